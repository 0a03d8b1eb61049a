#include "convert/quantize_ref.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/check.h"
#include "base/fp16.h"
#include "kernels/quant_blocks.h"

// Bit-exactness with ggml needs every product rounded on its own: no fused multiply-add.
// GCC contracts a*b+c into an FMA in C++ whenever the target has FMA (-march=native,
// LUMEN_NATIVE), which changes which candidate the K-quant searches pick (measured: ~1/3 of
// q4_K rows differ). Turn contraction off for this file whatever the flags.
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

namespace lumen::convert {
namespace {

using kernels::BlockQ4_0;
using kernels::BlockQ4_K;
using kernels::BlockQ6_K;
using kernels::BlockQ8_0;
using kernels::kQk;
using kernels::kQkK;
using kernels::nearest_int;

// Below this magnitude a group counts as all zeros (ggml's GROUP_MAX_EPS).
constexpr float kGroupMaxEps = 1e-15f;

// --- q4_K: asymmetric 4-bit sub-blocks --------------------------------------------------
//
// Fits x[i] ~ scale * q[i] - min_neg with q in [0, 15] for one 32-value sub-block, where
// min_neg = -min >= 0 is returned in *neg_min. The error is weighted by w[i]. Starts from
// the plain min/max grid, then tries 21 grid densities (nmax + rmin + rdelta*k over the
// range) and, for each, the least-squares (scale, min) of the resulting levels; keeps the
// candidate with the smallest weighted squared error. Ties keep the earlier candidate.
// (ggml's make_qkx2_quants with nmax 15, rmin -1, rdelta 0.1, nstep 20, squared error.)
float fit_q4_k_sub_block(const float* x, const float* w, uint8_t* levels, float* neg_min) {
  constexpr int kN = 32;
  constexpr int kNmax = 15;
  constexpr float kRmin = -1.0f;
  constexpr float kRdelta = 0.1f;
  constexpr int kNsteps = 20;

  float lo = x[0];
  float hi = x[0];
  float sum_w = w[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < kN; ++i) {
    if (x[i] < lo) lo = x[i];
    if (x[i] > hi) hi = x[i];
    sum_w += w[i];
    sum_x += w[i] * x[i];
  }
  if (lo > 0) lo = 0;  // the offset only ever shifts down: q = 0 must be able to reach 0
  if (hi == lo) {
    std::memset(levels, 0, kN);
    *neg_min = -lo;
    return 0.0f;
  }

  float inv_scale = kNmax / (hi - lo);
  float scale = 1 / inv_scale;
  float best_err = 0;
  for (int i = 0; i < kN; ++i) {
    const int q = std::clamp(nearest_int(inv_scale * (x[i] - lo)), 0, kNmax);
    levels[i] = static_cast<uint8_t>(q);
    const float diff = scale * levels[i] + lo - x[i];
    best_err += w[i] * (diff * diff);
  }

  uint8_t trial[kN];
  for (int step = 0; step <= kNsteps; ++step) {
    inv_scale = (kRmin + kRdelta * step + kNmax) / (hi - lo);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < kN; ++i) {
      const int q = std::clamp(nearest_int(inv_scale * (x[i] - lo)), 0, kNmax);
      trial[i] = static_cast<uint8_t>(q);
      sum_l += w[i] * q;
      sum_l2 += w[i] * q * q;
      sum_xl += w[i] * q * x[i];
    }
    // Weighted least squares for x ~ s * q + m over the trial levels.
    const float det = sum_w * sum_l2 - sum_l * sum_l;
    if (!(det > 0)) continue;
    float s = (sum_w * sum_xl - sum_x * sum_l) / det;
    float m = (sum_l2 * sum_x - sum_l * sum_xl) / det;
    if (m > 0) {  // a positive offset is not representable: refit the scale with m = 0
      m = 0;
      s = sum_xl / sum_l2;
    }
    float err = 0;
    for (int i = 0; i < kN; ++i) {
      const float diff = s * trial[i] + m - x[i];
      err += w[i] * (diff * diff);
    }
    if (err < best_err) {
      std::memcpy(levels, trial, kN);
      best_err = err;
      scale = s;
      lo = m;
    }
  }
  *neg_min = -lo;
  return scale;
}

void quantize_block_q4_k(const float* x, BlockQ4_K* out) {
  constexpr int kSub = kQkK / 32;  // 8 sub-blocks of 32
  uint8_t levels[kQkK];
  float scales[kSub];
  float mins[kSub];  // as positive offsets: w = scale * q - min
  float max_scale = 0;
  float max_min = 0;
  for (int j = 0; j < kSub; ++j) {
    const float* xs = x + 32 * j;
    // Weights: the sub-block's RMS plus |x|, so large values count more but small ones
    // still matter.
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += xs[l] * xs[l];
    const float rms = std::sqrt(sum_x2 / 32);
    float w[32];
    for (int l = 0; l < 32; ++l) w[l] = rms + std::fabs(xs[l]);
    scales[j] = fit_q4_k_sub_block(xs, w, levels + 32 * j, &mins[j]);
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }

  // 6-bit scales and mins relative to the super-block maxima. The uint8_t conversion
  // before the clamp is ggml's (a negative fit wraps and then clamps to 63).
  const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
  const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
  uint8_t* sm = out->scales;
  for (int j = 0; j < kSub; ++j) {
    const uint8_t ls = std::min<uint8_t>(63, static_cast<uint8_t>(nearest_int(inv_scale * scales[j])));
    const uint8_t lm = std::min<uint8_t>(63, static_cast<uint8_t>(nearest_int(inv_min * mins[j])));
    // Packing: see kernels::q4_k_scale_min (low 6 bits in bytes 0..7 for j < 4, nibbles in
    // bytes 8..11 plus the top 2 bits in bytes 0..7 for j >= 4).
    if (j < 4) {
      sm[j] = ls;
      sm[j + 4] = lm;
    } else {
      sm[j + 4] = static_cast<uint8_t>((ls & 0xF) | ((lm & 0xF) << 4));
      sm[j - 4] = static_cast<uint8_t>(sm[j - 4] | ((ls >> 4) << 6));
      sm[j] = static_cast<uint8_t>(sm[j] | ((lm >> 4) << 6));
    }
  }
  out->d_f16 = f32_to_fp16(max_scale / 63.f);
  out->dmin_f16 = f32_to_fp16(max_min / 63.f);

  // Re-derive the 4-bit levels against the scales as stored (rounded to 6 bits and fp16).
  // A sub-block whose stored scale is 0 keeps the levels of its fit.
  const float d_all = fp16_to_f32(out->d_f16);
  const float dmin_all = fp16_to_f32(out->dmin_f16);
  for (int j = 0; j < kSub; ++j) {
    uint8_t sc, m;
    kernels::q4_k_scale_min(out->scales, j, &sc, &m);
    const float d = d_all * sc;
    if (d == 0) continue;
    const float dm = dmin_all * m;
    for (int l = 0; l < 32; ++l)
      levels[32 * j + l] = static_cast<uint8_t>(std::clamp(nearest_int((x[32 * j + l] + dm) / d), 0, 15));
  }
  for (int c = 0; c < kQkK / 64; ++c)
    for (int l = 0; l < 32; ++l)
      out->qs[32 * c + l] = static_cast<uint8_t>(levels[64 * c + l] | (levels[64 * c + 32 + l] << 4));
}

// --- q6_K: symmetric 6-bit sub-blocks ----------------------------------------------------
//
// Fits x[i] ~ scale * q[i] with q in [-32, 31] for one 16-value sub-block, weighting the
// error by x[i]^2. The first grid maps the value of largest magnitude to -32; 18 more grids
// (-(32 + 0.1k) / max, k = -9..9, k != 0) are tried and the one maximising
// sum(w x q)^2 / sum(w q^2) (the least-squares gain) wins. Levels are stored as q + 32.
// (ggml's make_qx_quants with nmax 32, rmse_type 1.)
float fit_q6_k_sub_block(const float* x, int8_t* levels) {
  constexpr int kN = 16;
  constexpr int kNmax = 32;
  float max = 0;
  float amax = 0;
  for (int i = 0; i < kN; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < kGroupMaxEps) {
    std::memset(levels, 0, kN);
    return 0.0f;
  }
  auto level = [](float inv_scale, float v) {
    return std::clamp(nearest_int(inv_scale * v), -kNmax, kNmax - 1);
  };
  float inv_scale = -kNmax / max;
  float sum_lx = 0;
  float sum_l2 = 0;
  for (int i = 0; i < kN; ++i) {
    const int q = level(inv_scale, x[i]);
    levels[i] = static_cast<int8_t>(q + kNmax);
    const float w = x[i] * x[i];
    sum_lx += w * x[i] * q;
    sum_l2 += w * q * q;
  }
  float scale = sum_l2 != 0 ? sum_lx / sum_l2 : 0.0f;
  float best = scale * sum_lx;
  for (int k = -9; k <= 9; ++k) {
    if (k == 0) continue;
    inv_scale = -(kNmax + 0.1f * k) / max;
    sum_lx = 0;
    sum_l2 = 0;
    for (int i = 0; i < kN; ++i) {
      const int q = level(inv_scale, x[i]);
      const float w = x[i] * x[i];
      sum_lx += w * x[i] * q;
      sum_l2 += w * q * q;
    }
    if (sum_l2 > 0 && sum_lx * sum_lx > best * sum_l2) {
      for (int i = 0; i < kN; ++i) levels[i] = static_cast<int8_t>(level(inv_scale, x[i]) + kNmax);
      scale = sum_lx / sum_l2;
      best = scale * sum_lx;
    }
  }
  return scale;
}

void quantize_block_q6_k(const float* x, BlockQ6_K* out) {
  constexpr int kSub = kQkK / 16;  // 16 sub-blocks of 16
  int8_t levels[kQkK];             // q + 32, in [0, 63]
  float scales[kSub];
  float max_scale = 0;  // the signed scale of largest magnitude
  float max_abs_scale = 0;
  for (int j = 0; j < kSub; ++j) {
    scales[j] = fit_q6_k_sub_block(x + 16 * j, levels + 16 * j);
    const float a = std::fabs(scales[j]);
    if (a > max_abs_scale) {
      max_abs_scale = a;
      max_scale = scales[j];
    }
  }
  if (max_abs_scale < kGroupMaxEps) {  // an all-zero block
    std::memset(out, 0, sizeof(*out));
    return;
  }
  // 8-bit signed sub-block scales; the largest maps to -128.
  const float inv_scale = -128.f / max_scale;
  out->d_f16 = f32_to_fp16(1 / inv_scale);
  for (int j = 0; j < kSub; ++j)
    out->scales[j] = static_cast<int8_t>(std::min(127, nearest_int(inv_scale * scales[j])));

  // Re-derive the 6-bit levels against the stored scales (a zero scale keeps the fit's).
  const float d_all = fp16_to_f32(out->d_f16);
  for (int j = 0; j < kSub; ++j) {
    const float d = d_all * out->scales[j];
    if (d == 0) continue;
    for (int l = 0; l < 16; ++l)
      levels[16 * j + l] = static_cast<int8_t>(std::clamp(nearest_int(x[16 * j + l] / d), -32, 31) + 32);
  }
  // Packing: see kernels::BlockQ6_K (per half of 128: low nibbles of elements l and
  // l + 64 share ql[l], of l + 32 and l + 96 share ql[l + 32]; the 2 high bits of the four
  // go to qh[l]).
  for (int h = 0; h < kQkK / 128; ++h) {
    const int8_t* lv = levels + 128 * h;
    uint8_t* ql = out->ql + 64 * h;
    uint8_t* qh = out->qh + 32 * h;
    for (int l = 0; l < 32; ++l) {
      const auto q0 = static_cast<uint8_t>(lv[l]);
      const auto q1 = static_cast<uint8_t>(lv[l + 32]);
      const auto q2 = static_cast<uint8_t>(lv[l + 64]);
      const auto q3 = static_cast<uint8_t>(lv[l + 96]);
      ql[l] = static_cast<uint8_t>((q0 & 0xF) | ((q2 & 0xF) << 4));
      ql[l + 32] = static_cast<uint8_t>((q1 & 0xF) | ((q3 & 0xF) << 4));
      qh[l] = static_cast<uint8_t>((q0 >> 4) | ((q1 >> 4) << 2) | ((q2 >> 4) << 4) | ((q3 >> 4) << 6));
    }
  }
}

}  // namespace

bool can_quantize_to(DType dtype) {
  switch (dtype) {
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16:
    case DType::kQ8_0:
    case DType::kQ4_0:
    case DType::kQ4_K:
    case DType::kQ6_K:
      return true;
    default:
      return false;
  }
}

void quantize_row_q8_0(const float* x, std::byte* dst, int64_t n) {
  LUMEN_DCHECK(n % kQk == 0);
  auto* out = reinterpret_cast<BlockQ8_0*>(dst);
  for (int64_t b = 0; b < n / kQk; ++b, x += kQk) {
    float amax = 0;
    for (int j = 0; j < kQk; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    out[b].d_f16 = f32_to_fp16(d);
    for (int j = 0; j < kQk; ++j) out[b].qs[j] = static_cast<int8_t>(std::round(x[j] * id));
  }
}

void quantize_row_q4_0(const float* x, std::byte* dst, int64_t n) {
  LUMEN_DCHECK(n % kQk == 0);
  auto* out = reinterpret_cast<BlockQ4_0*>(dst);
  for (int64_t b = 0; b < n / kQk; ++b, x += kQk) {
    // The signed value of largest magnitude (the first one on ties) maps to -8, so the
    // full range [-8, 7] is used on the side that needs it.
    float amax = 0;
    float max = 0;
    for (int j = 0; j < kQk; ++j) {
      if (std::fabs(x[j]) > amax) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    }
    const float d = max / -8;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    out[b].d_f16 = f32_to_fp16(d);
    for (int j = 0; j < kQk / 2; ++j) {
      // x * id lies in [-8, 8]; + 8.5 then truncation rounds half up; 16 clamps to 15.
      const int q0 = std::min(15, static_cast<int>(x[j] * id + 8.5f));
      const int q1 = std::min(15, static_cast<int>(x[j + kQk / 2] * id + 8.5f));
      out[b].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
  }
}

void quantize_row_q4_k(const float* x, std::byte* dst, int64_t n) {
  LUMEN_DCHECK(n % kQkK == 0);
  auto* out = reinterpret_cast<BlockQ4_K*>(dst);
  for (int64_t b = 0; b < n / kQkK; ++b) quantize_block_q4_k(x + b * kQkK, out + b);
}

void quantize_row_q6_k(const float* x, std::byte* dst, int64_t n) {
  LUMEN_DCHECK(n % kQkK == 0);
  auto* out = reinterpret_cast<BlockQ6_K*>(dst);
  for (int64_t b = 0; b < n / kQkK; ++b) quantize_block_q6_k(x + b * kQkK, out + b);
}

void convert_row_f16(const float* x, std::byte* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t h = f32_to_fp16(x[i]);
    std::memcpy(dst + 2 * i, &h, 2);
  }
}

void convert_row_bf16(const float* x, std::byte* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t h = f32_to_bf16(x[i]);
    std::memcpy(dst + 2 * i, &h, 2);
  }
}

void quantize_row(DType dtype, const float* src, std::byte* dst, int64_t n) {
  switch (dtype) {
    case DType::kF32: std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float)); return;
    case DType::kF16: convert_row_f16(src, dst, n); return;
    case DType::kBF16: convert_row_bf16(src, dst, n); return;
    case DType::kQ8_0: quantize_row_q8_0(src, dst, n); return;
    case DType::kQ4_0: quantize_row_q4_0(src, dst, n); return;
    case DType::kQ4_K: quantize_row_q4_k(src, dst, n); return;
    case DType::kQ6_K: quantize_row_q6_k(src, dst, n); return;
    default: break;
  }
  LUMEN_CHECK_MSG(false, "quantize_row: unsupported target type");
}

}  // namespace lumen::convert
