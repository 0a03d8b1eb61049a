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
// Fits x[i] ~ scale * q[i] - neg_min with q in [0, 15] for each 32-value sub-block of a
// super-block, with neg_min = -min >= 0. The error is weighted by w[i]. Starts from the
// plain min/max grid, then tries 21 grid densities (nmax + rmin + rdelta*k over the range)
// and, for each, the least-squares (scale, min) of the resulting levels; keeps the
// candidate with the smallest weighted squared error (ties keep the earlier one). A flat
// sub-block gets levels 0 and scale 0. (ggml's make_qkx2_quants with nmax 15, rmin -1,
// rdelta 0.1, nstep 20, squared error, called once per sub-block.)
//
// The 8 sub-blocks are fitted together, one per SIMD lane (2 groups of 4): each lane does
// exactly ggml's f32 operations in ggml's order (IEEE per lane, so the bytes are the
// same), and the loops run once for all 8 instead of 8 times. GCC/Clang vector extensions:
// the compiler lowers them to the target's SIMD (SSE2 on baseline x86-64), no ISA flags.
using F4 = float __attribute__((vector_size(16)));
using I4 = int32_t __attribute__((vector_size(16)));

// nearest_int (ties to even via the 1.5 * 2^23 trick) per lane, clamped to
// [q_min, q_max], returned as float.
inline F4 level4(F4 v, int q_min, int q_max) {
  const F4 biased = v + 12582912.0f;
  I4 q;
  std::memcpy(&q, &biased, sizeof(q));
  q = (q & 0x007fffff) - 0x00400000;
  q = q < q_min ? I4{} + q_min : q;
  q = q > q_max ? I4{} + q_max : q;
  // int -> float exactly: q - q_min is in [0, 2^23), so its float is the bits of
  // 2^23 + (q - q_min) minus 2^23.
  q += 0x4B000000 - q_min;
  F4 f;
  std::memcpy(&f, &q, sizeof(f));
  return (f - 8388608.0f) + static_cast<float>(q_min);
}

constexpr int kQ4KSub = kQkK / 32;  // 8 sub-blocks of 32

void fit_q4_k_super_block(const float* x, const float* w, uint8_t* levels, float* scales, float* neg_mins) {
  constexpr int kN = 32;
  constexpr int kNmax = 15;
  constexpr float kRmin = -1.0f;
  constexpr float kRdelta = 0.1f;
  constexpr int kNsteps = 20;
  constexpr int kG = kQ4KSub / 4;  // lane groups; sub-block j is lane j % 4 of group j / 4

  // Transposed: xt[g][i] lane l = x[32 * (4g + l) + i].
  F4 xt[kG][kN], wt[kG][kN];
  for (int g = 0; g < kG; ++g)
    for (int i = 0; i < kN; ++i)
      for (int l = 0; l < 4; ++l) {
        xt[g][i][l] = x[kN * (4 * g + l) + i];
        wt[g][i][l] = w[kN * (4 * g + l) + i];
      }

  F4 lo[kG], hi[kG], sum_w[kG], sum_x[kG], scale[kG], best_err[kG];
  I4 flat[kG];
  F4 lv[kG][kN];  // the best levels so far (as floats)
  for (int g = 0; g < kG; ++g) {
    lo[g] = hi[g] = xt[g][0];
    sum_w[g] = wt[g][0];
    sum_x[g] = sum_w[g] * xt[g][0];
    for (int i = 1; i < kN; ++i) {
      lo[g] = xt[g][i] < lo[g] ? xt[g][i] : lo[g];
      hi[g] = xt[g][i] > hi[g] ? xt[g][i] : hi[g];
      sum_w[g] += wt[g][i];
      sum_x[g] += wt[g][i] * xt[g][i];
    }
    lo[g] = lo[g] > 0 ? F4{} : lo[g];  // the offset only shifts down: q = 0 must reach 0
    flat[g] = hi[g] == lo[g];          // resolved at the end: levels 0, scale 0
    const F4 inv_scale = kNmax / (hi[g] - lo[g]);
    scale[g] = 1 / inv_scale;
    best_err[g] = F4{};
    for (int i = 0; i < kN; ++i) {
      lv[g][i] = level4(inv_scale * (xt[g][i] - lo[g]), 0, kNmax);
      const F4 diff = scale[g] * lv[g][i] + lo[g] - xt[g][i];
      best_err[g] += wt[g][i] * (diff * diff);
    }
  }

  for (int step = 0; step <= kNsteps; ++step) {
    for (int g = 0; g < kG; ++g) {
      const F4 inv_scale = (kRmin + kRdelta * step + kNmax) / (hi[g] - lo[g]);
      F4 trial[kN];
      F4 sum_l{}, sum_l2{}, sum_xl{};
      for (int i = 0; i < kN; ++i) {
        trial[i] = level4(inv_scale * (xt[g][i] - lo[g]), 0, kNmax);
        sum_l += wt[g][i] * trial[i];
        sum_l2 += wt[g][i] * trial[i] * trial[i];
        sum_xl += wt[g][i] * trial[i] * xt[g][i];
      }
      // Weighted least squares for x ~ s * q + m over the trial levels; a positive m is
      // not representable, so then m = 0 and s is refitted alone.
      const F4 det = sum_w[g] * sum_l2 - sum_l * sum_l;
      F4 s = (sum_w[g] * sum_xl - sum_x[g] * sum_l) / det;
      F4 m = (sum_l2 * sum_x[g] - sum_l * sum_xl) / det;
      const I4 m_pos = m > 0;
      s = m_pos ? sum_xl / sum_l2 : s;
      m = m_pos ? F4{} : m;
      F4 err{};
      for (int i = 0; i < kN; ++i) {
        const F4 diff = s * trial[i] + m - xt[g][i];
        err += wt[g][i] * (diff * diff);
      }
      const I4 take = (det > 0) & ~flat[g] & (err < best_err[g]);
      for (int i = 0; i < kN; ++i) lv[g][i] = take ? trial[i] : lv[g][i];
      best_err[g] = take ? err : best_err[g];
      scale[g] = take ? s : scale[g];
      lo[g] = take ? m : lo[g];
    }
  }
  for (int g = 0; g < kG; ++g) {
    for (int l = 0; l < 4; ++l) {
      const int j = 4 * g + l;
      const bool is_flat = flat[g][l] != 0;
      for (int i = 0; i < kN; ++i) levels[kN * j + i] = is_flat ? 0 : static_cast<uint8_t>(lv[g][i][l]);
      scales[j] = is_flat ? 0.0f : scale[g][l];
      neg_mins[j] = -lo[g][l];
    }
  }
}

void quantize_block_q4_k(const float* x, BlockQ4_K* out) {
  constexpr int kSub = kQ4KSub;
  uint8_t levels[kQkK];
  float scales[kSub];
  float mins[kSub];  // as positive offsets: w = scale * q - min
  // Weights: each sub-block's RMS plus |x|, so large values count more but small ones
  // still matter.
  float w[kQkK];
  for (int j = 0; j < kSub; ++j) {
    const float* xs = x + 32 * j;
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += xs[l] * xs[l];
    const float rms = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) w[32 * j + l] = rms + std::fabs(xs[l]);
  }
  fit_q4_k_super_block(x, w, levels, scales, mins);
  float max_scale = 0;
  float max_min = 0;
  for (int j = 0; j < kSub; ++j) {
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
// Fits x[i] ~ scale * q[i] with q in [-32, 31] for each 16-value sub-block of a
// super-block, weighting the error by x[i]^2. The first grid maps the value of largest
// magnitude to -32; 18 more grids (-(32 + 0.1k) / max, k = -9..9, k != 0) are tried and the
// one maximising sum(w x q)^2 / sum(w q^2) (the least-squares gain) wins. An all-zero
// sub-block (|x| < 1e-15) gets levels 0 and scale 0. Levels are stored as q + 32.
// (ggml's make_qx_quants with nmax 32, rmse_type 1, once per sub-block.) The 16 sub-blocks
// run as 4 groups of 4 lanes, each lane doing ggml's operations in ggml's order (see the
// q4_K fit).
constexpr int kQ6KSub = kQkK / 16;  // 16 sub-blocks of 16

void fit_q6_k_super_block(const float* x, int8_t* levels, float* scales) {
  constexpr int kN = 16;
  constexpr int kNmax = 32;
  constexpr int kG = kQ6KSub / 4;
  for (int g = 0; g < kG; ++g) {
    F4 xt[kN], wt[kN];  // xt[i] lane l = x[16 * (4g + l) + i]; wt = xt^2
    for (int i = 0; i < kN; ++i)
      for (int l = 0; l < 4; ++l) xt[i][l] = x[kN * (4 * g + l) + i];
    F4 max{}, amax{};
    for (int i = 0; i < kN; ++i) {
      wt[i] = xt[i] * xt[i];
      const I4 bigger = (xt[i] < 0 ? -xt[i] : xt[i]) > amax;
      amax = bigger ? (xt[i] < 0 ? -xt[i] : xt[i]) : amax;
      max = bigger ? xt[i] : max;
    }
    const I4 zero = amax < kGroupMaxEps;
    F4 inv_scale = -kNmax / max;
    F4 lv[kN];
    F4 sum_lx{}, sum_l2{};
    for (int i = 0; i < kN; ++i) {
      lv[i] = level4(inv_scale * xt[i], -kNmax, kNmax - 1);
      sum_lx += wt[i] * xt[i] * lv[i];
      sum_l2 += wt[i] * lv[i] * lv[i];
    }
    F4 scale = sum_l2 != 0 ? sum_lx / sum_l2 : F4{};
    F4 best = scale * sum_lx;
    for (int k = -9; k <= 9; ++k) {
      if (k == 0) continue;
      inv_scale = -(kNmax + 0.1f * k) / max;
      F4 trial[kN];
      sum_lx = F4{};
      sum_l2 = F4{};
      for (int i = 0; i < kN; ++i) {
        trial[i] = level4(inv_scale * xt[i], -kNmax, kNmax - 1);
        sum_lx += wt[i] * xt[i] * trial[i];
        sum_l2 += wt[i] * trial[i] * trial[i];
      }
      const I4 take = (sum_l2 > 0) & (sum_lx * sum_lx > best * sum_l2);
      for (int i = 0; i < kN; ++i) lv[i] = take ? trial[i] : lv[i];
      scale = take ? sum_lx / sum_l2 : scale;
      best = take ? scale * sum_lx : best;
    }
    for (int l = 0; l < 4; ++l) {
      const int j = 4 * g + l;
      const bool is_zero = zero[l] != 0;
      for (int i = 0; i < kN; ++i)
        levels[kN * j + i] = is_zero ? 0 : static_cast<int8_t>(static_cast<int>(lv[i][l]) + kNmax);
      scales[j] = is_zero ? 0.0f : scale[l];
    }
  }
}

void quantize_block_q6_k(const float* x, BlockQ6_K* out) {
  constexpr int kSub = kQ6KSub;
  int8_t levels[kQkK];  // q + 32, in [0, 63]
  float scales[kSub];
  fit_q6_k_super_block(x, levels, scales);
  float max_scale = 0;  // the signed scale of largest magnitude
  float max_abs_scale = 0;
  for (int j = 0; j < kSub; ++j) {
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
