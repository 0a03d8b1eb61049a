// The K types: q2_K, q3_K, q4_K, q5_K, q6_K (256-value super-blocks of 16 or 32-value
// sub-blocks; formats in kernels/quant_blocks.h). Each super-block is quantized in three
// steps, as ggml does:
//   1. fit every sub-block alone (a scale, and a min for the asymmetric types)
//   2. quantize the sub-block scales (and mins) to 4, 6 or 8 bits against a super-block scale
//   3. re-derive every level against the scales as stored (rounded to their bits and fp16)
// Without an importance matrix step 1 weighs errors by a fixed rule and step 2 scales against
// the largest sub-block scale (quantize_row_*_ref); with one, step 1 weighs by
// imatrix * sqrt(sigma2 + x^2) and step 2 fits the scales by a weighted search (*_impl).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/check.h"
#include "base/fp16.h"
#include "convert/exact_float.h"
#include "convert/quant_search.h"
#include "convert/quantize_types.h"
#include "kernels/quant_blocks.h"


namespace lumen::convert {
namespace {

using kernels::BlockQ2_K;
using kernels::BlockQ3_K;
using kernels::BlockQ4_K;
using kernels::BlockQ5_K;
using kernels::BlockQ6_K;
using kernels::kQkK;
using kernels::nearest_int;

// --- the reference fit of q4_K / q5_K sub-blocks, 8 at once -----------------------------
//
// fit_asymmetric (make_qkx2_quants) for the 8 sub-blocks of 32 of a super-block, one per
// SIMD lane (2 groups of 4): each lane does exactly ggml's f32 operations in ggml's order
// (IEEE per lane, so the bytes are the same), and the loops run once for all 8 instead of 8
// times. GCC/Clang vector extensions: the compiler lowers them to the target's SIMD (SSE2 on
// baseline x86-64), no ISA flags.
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

constexpr int kSub32 = kQkK / 32;  // 8 sub-blocks of 32

struct Qkx2Params {
  int nmax;
  float rmin;
  float rdelta;
  int n_steps;
};

void fit_super_block_32(const float* x, const float* w, const Qkx2Params& p, uint8_t* levels, float* scales,
                        float* neg_mins) {
  constexpr int kN = 32;
  constexpr int kG = kSub32 / 4;  // lane groups; sub-block j is lane j % 4 of group j / 4
  const int nmax = p.nmax;

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
    const F4 inv_scale = static_cast<float>(nmax) / (hi[g] - lo[g]);
    scale[g] = 1 / inv_scale;
    best_err[g] = F4{};
    for (int i = 0; i < kN; ++i) {
      lv[g][i] = level4(inv_scale * (xt[g][i] - lo[g]), 0, nmax);
      const F4 diff = scale[g] * lv[g][i] + lo[g] - xt[g][i];
      best_err[g] += wt[g][i] * (diff * diff);
    }
  }

  for (int step = 0; step <= p.n_steps; ++step) {
    const float n_levels = p.rmin + p.rdelta * static_cast<float>(step) + static_cast<float>(nmax);
    for (int g = 0; g < kG; ++g) {
      const F4 inv_scale = n_levels / (hi[g] - lo[g]);
      F4 trial[kN];
      F4 sum_l{}, sum_l2{}, sum_xl{};
      for (int i = 0; i < kN; ++i) {
        trial[i] = level4(inv_scale * (xt[g][i] - lo[g]), 0, nmax);
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

// Importance weights of a super-block (the weighted paths): w[i] = qw[i] * sqrt(sigma2 + x[i]^2)
// with sigma2 = sigma2_factor * mean(x^2) over the super-block; sw[j] = the sum of sub-block
// j's weights (sub-blocks of sub_size).
void importance_weights(const float* x, const float* qw, float sigma2_factor, int sub_size, float* w, float* sw) {
  float sum_x2 = 0;
  for (int i = 0; i < kQkK; ++i) sum_x2 += x[i] * x[i];
  const float sigma2 = sigma2_factor * sum_x2 / kQkK;
  for (int j = 0; j < kQkK / sub_size; ++j) {
    float sum_w = 0;
    for (int l = 0; l < sub_size; ++l) {
      const int i = sub_size * j + l;
      w[i] = qw[i] * std::sqrt(sigma2 + x[i] * x[i]);
    }
    for (int l = 0; l < sub_size; ++l) sum_w += w[sub_size * j + l];
    sw[j] = sum_w;
  }
}

// Reference weights of a 32-value sub-block: its RMS plus |x|, so large values count more
// but small ones still matter.
void rms_plus_abs_weights(const float* x, float* w) {
  for (int j = 0; j < kSub32; ++j) {
    const float* xs = x + 32 * j;
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += xs[l] * xs[l];
    const float rms = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) w[32 * j + l] = rms + std::fabs(xs[l]);
  }
}

// --- 6-bit scales and mins of q4_K / q5_K -------------------------------------------------

// Packs the 6-bit (scale, min) pairs of the 8 sub-blocks (see kernels::q4_k_scale_min).
void pack_scale_min_k4(const uint8_t* ls, const uint8_t* lm, uint8_t* sm) {
  for (int j = 0; j < kSub32; ++j) {
    if (j < 4) {
      sm[j] = ls[j];
      sm[j + 4] = lm[j];
    } else {
      sm[j + 4] = static_cast<uint8_t>((ls[j] & 0xF) | ((lm[j] & 0xF) << 4));
      sm[j - 4] = static_cast<uint8_t>(sm[j - 4] | ((ls[j] >> 4) << 6));
      sm[j] = static_cast<uint8_t>(sm[j] | ((lm[j] >> 4) << 6));
    }
  }
}

// Step 2 of q4_K / q5_K: the sub-block scales and mins to 6 bits and the super-block d, dmin.
// Reference: against the largest scale / min; weighted: fit_positive under the sub-blocks'
// weight sums `sw`. `clamp63`: q5_K's weighted path clamps the fitted levels to 63, q4_K's
// does not (ggml's code; the fit never exceeds 63 there anyway).
void quantize_scales_k4(const float* scales, const float* neg_mins, const float* sw, bool clamp63, uint8_t* packed,
                        uint16_t* d_f16, uint16_t* dmin_f16) {
  uint8_t ls[kSub32], lm[kSub32];
  if (sw) {
    const float d_block = fit_positive(kSub32, 63, scales, ls, sw);
    const float m_block = fit_positive(kSub32, 63, neg_mins, lm, sw);
    if (clamp63) {
      for (int j = 0; j < kSub32; ++j) {
        ls[j] = std::min<uint8_t>(63, ls[j]);
        lm[j] = std::min<uint8_t>(63, lm[j]);
      }
    }
    std::memset(packed, 0, 12);
    pack_scale_min_k4(ls, lm, packed);
    *d_f16 = f32_to_fp16(d_block);
    *dmin_f16 = f32_to_fp16(m_block);
    return;
  }
  float max_scale = 0;
  float max_min = 0;
  for (int j = 0; j < kSub32; ++j) {
    if (scales[j] > max_scale) max_scale = scales[j];
    if (neg_mins[j] > max_min) max_min = neg_mins[j];
  }
  // The uint8_t conversion before the clamp is ggml's (a negative fit wraps and then clamps
  // to 63).
  const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
  const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
  for (int j = 0; j < kSub32; ++j) {
    ls[j] = std::min<uint8_t>(63, static_cast<uint8_t>(nearest_int(inv_scale * scales[j])));
    lm[j] = std::min<uint8_t>(63, static_cast<uint8_t>(nearest_int(inv_min * neg_mins[j])));
  }
  std::memset(packed, 0, 12);
  pack_scale_min_k4(ls, lm, packed);
  *d_f16 = f32_to_fp16(max_scale / 63.f);
  *dmin_f16 = f32_to_fp16(max_min / 63.f);
}

// Step 3 of q4_K / q5_K: levels against the stored scales; a sub-block whose stored scale is
// 0 keeps the levels of its fit.
void requantize_k4(const float* x, const uint8_t* packed, uint16_t d_f16, uint16_t dmin_f16, int nmax, uint8_t* L) {
  const float d_all = fp16_to_f32(d_f16);
  const float dmin_all = fp16_to_f32(dmin_f16);
  for (int j = 0; j < kSub32; ++j) {
    uint8_t sc, m;
    kernels::q4_k_scale_min(packed, j, &sc, &m);
    const float d = d_all * sc;
    if (d == 0) continue;
    const float dm = dmin_all * m;
    for (int l = 0; l < 32; ++l)
      L[32 * j + l] = static_cast<uint8_t>(std::clamp(nearest_int((x[32 * j + l] + dm) / d), 0, nmax));
  }
}

// Step 1 of q4_K / q5_K: the 8 sub-block fits. Weighted: w = qw * sqrt(sigma2 + x^2) with
// sigma2 = 2 * mean(x^2) over the super-block, scalar make_qkx3 search; reference: the lane
// search above with the RMS + |x| weights. `sw` (weighted only) gets each sub-block's weight sum.
void fit_sub_blocks_k4(const float* x, const float* qw, const Qkx2Params& ref, uint8_t* L, float* scales,
                       float* neg_mins, float* sw) {
  if (!qw) {
    float w[kQkK];
    rms_plus_abs_weights(x, w);
    fit_super_block_32(x, w, ref, L, scales, neg_mins);
    return;
  }
  float w[kQkK];
  importance_weights(x, qw, 2, 32, w, sw);
  for (int j = 0; j < kSub32; ++j)
    scales[j] = fit_asymmetric(32, ref.nmax, x + 32 * j, w + 32 * j, L + 32 * j, &neg_mins[j], -0.9f, 0.05f, 36, false);
}

void quantize_block_q4_k(const float* x, const float* qw, BlockQ4_K* out) {
  uint8_t L[kQkK];
  float scales[kSub32], neg_mins[kSub32], sw[kSub32];
  fit_sub_blocks_k4(x, qw, Qkx2Params{15, -1.0f, 0.1f, 20}, L, scales, neg_mins, sw);
  quantize_scales_k4(scales, neg_mins, qw ? sw : nullptr, false, out->scales, &out->d_f16, &out->dmin_f16);
  requantize_k4(x, out->scales, out->d_f16, out->dmin_f16, 15, L);
  for (int c = 0; c < kQkK / 64; ++c)
    for (int l = 0; l < 32; ++l)
      out->qs[32 * c + l] = static_cast<uint8_t>(L[64 * c + l] | (L[64 * c + 32 + l] << 4));
}

void quantize_block_q5_k(const float* x, const float* qw, BlockQ5_K* out) {
  uint8_t L[kQkK];
  float scales[kSub32], neg_mins[kSub32], sw[kSub32];
  fit_sub_blocks_k4(x, qw, Qkx2Params{31, -0.5f, 0.1f, 15}, L, scales, neg_mins, sw);
  quantize_scales_k4(scales, neg_mins, qw ? sw : nullptr, true, out->scales, &out->d_f16, &out->dmin_f16);
  requantize_k4(x, out->scales, out->d_f16, out->dmin_f16, 31, L);
  // Low nibbles as q4_K; the fifth bit of sub-block 2c at bit 2c of qh[l], of 2c + 1 at 2c + 1.
  std::memset(out->qh, 0, sizeof(out->qh));
  for (int c = 0; c < kQkK / 64; ++c) {
    for (int l = 0; l < 32; ++l) {
      int l1 = L[64 * c + l];
      int l2 = L[64 * c + 32 + l];
      if (l1 > 15) {
        l1 -= 16;
        out->qh[l] = static_cast<uint8_t>(out->qh[l] | (1 << (2 * c)));
      }
      if (l2 > 15) {
        l2 -= 16;
        out->qh[l] = static_cast<uint8_t>(out->qh[l] | (2 << (2 * c)));
      }
      out->qs[32 * c + l] = static_cast<uint8_t>(l1 | (l2 << 4));
    }
  }
}

// --- q6_K: symmetric 6-bit sub-blocks ----------------------------------------------------
//
// fit_symmetric (make_qx_quants, nmax 32, x^2 weights) for the 16 sub-blocks of 16, as 4
// groups of 4 lanes, each lane doing ggml's operations in ggml's order (see the q4_K fit).
constexpr int kSub16 = kQkK / 16;  // 16 sub-blocks of 16

void fit_q6_k_super_block(const float* x, int8_t* levels, float* scales) {
  constexpr int kN = 16;
  constexpr int kNmax = 32;
  constexpr int kG = kSub16 / 4;
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

void quantize_block_q6_k(const float* x, const float* qw, BlockQ6_K* out) {
  int8_t levels[kQkK];  // q + 32, in [0, 63]
  float scales[kSub16];
  if (qw) {
    // Weighted: the imatrix itself is the weight (ggml's q6_K does not mix in sigma2).
    for (int j = 0; j < kSub16; ++j)
      scales[j] = fit_symmetric(16, 32, x + 16 * j, levels + 16 * j, SymmetricWeight::kSquare, qw + 16 * j);
  } else {
    fit_q6_k_super_block(x, levels, scales);
  }
  float max_scale = 0;  // the signed scale of largest magnitude
  float max_abs_scale = 0;
  for (int j = 0; j < kSub16; ++j) {
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
  for (int j = 0; j < kSub16; ++j)
    out->scales[j] = static_cast<int8_t>(std::min(127, nearest_int(inv_scale * scales[j])));

  // Re-derive the 6-bit levels against the stored scales (a zero scale keeps the fit's).
  const float d_all = fp16_to_f32(out->d_f16);
  for (int j = 0; j < kSub16; ++j) {
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

// --- q2_K and q3_K: 16 sub-blocks of 16 ---------------------------------------------------

// 2-bit levels of 256 values into qs: element 128h + 32k + l at bits 2k of qs[32h + l].
void pack_2bit(const uint8_t* L, uint8_t* qs) {
  for (int h = 0; h < kQkK / 128; ++h)
    for (int l = 0; l < 32; ++l) {
      const uint8_t* lv = L + 128 * h;
      qs[32 * h + l] = static_cast<uint8_t>(lv[l] | (lv[l + 32] << 2) | (lv[l + 64] << 4) | (lv[l + 96] << 6));
    }
}

void quantize_block_q2_k(const float* x, const float* qw, BlockQ2_K* out) {
  uint8_t L[kQkK];
  float scales[kSub16], neg_mins[kSub16];
  if (qw) {
    // Asymmetric 2-bit fit per sub-block under w = qw * sqrt(sigma2 + x^2), sigma2 the
    // super-block's mean square; then 4-bit scales and mins by a weighted fit.
    float w[kQkK], sw[kSub16];
    importance_weights(x, qw, 1, 16, w, sw);
    for (int j = 0; j < kSub16; ++j)
      scales[j] = fit_asymmetric(16, 3, x + 16 * j, w + 16 * j, L + 16 * j, &neg_mins[j], -0.9f, 0.05f, 36, false);
    uint8_t ls[kSub16], lm[kSub16];
    const float dm = fit_positive(kSub16, 15, scales, ls, sw);
    const float mm = fit_positive(kSub16, 15, neg_mins, lm, sw);
    out->d_f16 = f32_to_fp16(dm);
    out->dmin_f16 = f32_to_fp16(mm);
    for (int j = 0; j < kSub16; ++j) out->scales[j] = static_cast<uint8_t>(ls[j] | (lm[j] << 4));
  } else {
    // Reference: |x|-weighted absolute-error fit per sub-block, then 4-bit scales and mins
    // against the largest of each.
    float max_scale = 0;
    float max_min = 0;
    for (int j = 0; j < kSub16; ++j) {
      float w[16];
      for (int l = 0; l < 16; ++l) w[l] = std::fabs(x[16 * j + l]);
      scales[j] = fit_asymmetric(16, 3, x + 16 * j, w, L + 16 * j, &neg_mins[j], -0.5f, 0.1f, 15, true);
      if (scales[j] > max_scale) max_scale = scales[j];
      if (neg_mins[j] > max_min) max_min = neg_mins[j];
    }
    if (max_scale > 0) {
      const float inv = 15.f / max_scale;
      for (int j = 0; j < kSub16; ++j) out->scales[j] = static_cast<uint8_t>(nearest_int(inv * scales[j]));
      out->d_f16 = f32_to_fp16(max_scale / 15.f);
    } else {
      std::memset(out->scales, 0, sizeof(out->scales));
      out->d_f16 = f32_to_fp16(0.f);
    }
    if (max_min > 0) {
      const float inv = 15.f / max_min;
      for (int j = 0; j < kSub16; ++j)
        out->scales[j] = static_cast<uint8_t>(out->scales[j] | (nearest_int(inv * neg_mins[j]) << 4));
      out->dmin_f16 = f32_to_fp16(max_min / 15.f);
    } else {
      out->dmin_f16 = f32_to_fp16(0.f);
    }
  }
  const float d_all = fp16_to_f32(out->d_f16);
  const float dmin_all = fp16_to_f32(out->dmin_f16);
  for (int j = 0; j < kSub16; ++j) {
    const float d = d_all * (out->scales[j] & 0xF);
    if (!d) continue;
    const float dm = dmin_all * (out->scales[j] >> 4);
    for (int l = 0; l < 16; ++l)
      L[16 * j + l] = static_cast<uint8_t>(std::clamp(nearest_int((x[16 * j + l] + dm) / d), 0, 3));
  }
  pack_2bit(L, out->qs);
}

void quantize_block_q3_k(const float* x, const float* qw, BlockQ3_K* out) {
  int8_t L[kQkK];
  float scales[kSub16];
  std::memset(out->scales, 0, sizeof(out->scales));
  // 6-bit sub-block scale levels (0..63, meaning level - 32): low 4 bits in nibbles of
  // scales[0..8), high 2 bits in scales[8..12) (see kernels::q3_k_scale).
  auto pack_scale = [out](int j, int l) {
    if (j < 8) out->scales[j] = static_cast<uint8_t>(l & 0xF);
    else out->scales[j - 8] = static_cast<uint8_t>(out->scales[j - 8] | ((l & 0xF) << 4));
    l >>= 4;
    out->scales[j % 4 + 8] = static_cast<uint8_t>(out->scales[j % 4 + 8] | (l << (2 * (j / 4))));
  };
  if (qw) {
    float w[kQkK], sw[kSub16];
    importance_weights(x, qw, 2, 16, w, sw);
    for (int j = 0; j < kSub16; ++j)
      scales[j] = fit_symmetric(16, 4, x + 16 * j, L + 16 * j, SymmetricWeight::kSquare, w + 16 * j);
    int8_t ls[kSub16];
    const float d_block = fit_symmetric(kSub16, 32, scales, ls, SymmetricWeight::kSquare, sw);
    for (int j = 0; j < kSub16; ++j) pack_scale(j, ls[j]);
    out->d_f16 = f32_to_fp16(d_block);
  } else {
    float max_scale = 0;  // the signed scale of largest magnitude
    float amax = 0;
    for (int j = 0; j < kSub16; ++j) {
      scales[j] = fit_symmetric_q3(16, 4, x + 16 * j, L + 16 * j, true);
      if (std::fabs(scales[j]) > amax) {
        amax = std::fabs(scales[j]);
        max_scale = scales[j];
      }
    }
    if (max_scale) {
      const float inv = -32.f / max_scale;
      for (int j = 0; j < kSub16; ++j) {
        // ggml narrows to int8_t before clamping; |inv * scale| <= 32 keeps that exact.
        const auto l = static_cast<int8_t>(nearest_int(inv * scales[j]));
        pack_scale(j, std::max(-32, std::min(31, static_cast<int>(l))) + 32);
      }
      out->d_f16 = f32_to_fp16(1 / inv);
    } else {
      out->d_f16 = f32_to_fp16(0.f);
    }
  }
  // Re-derive the 3-bit levels (q in [-4, 3], stored q + 4) against the stored scales.
  const float d_all = fp16_to_f32(out->d_f16);
  for (int j = 0; j < kSub16; ++j) {
    const int sc = kernels::q3_k_scale(out->scales, j) - 32;
    const float d = d_all * static_cast<float>(static_cast<int8_t>(sc));
    if (!d) continue;
    for (int l = 0; l < 16; ++l)
      L[16 * j + l] = static_cast<int8_t>(std::clamp(nearest_int(x[16 * j + l] / d), -4, 3) + 4);
  }
  // The high bit of element e goes to bit e / 32 of hmask[e % 32]; the low 2 bits to qs.
  std::memset(out->hmask, 0, sizeof(out->hmask));
  uint8_t low[kQkK];
  for (int e = 0; e < kQkK; ++e) {
    int l = L[e];
    if (l > 3) {
      out->hmask[e % 32] = static_cast<uint8_t>(out->hmask[e % 32] | (1 << (e / 32)));
      l -= 4;
    }
    low[e] = static_cast<uint8_t>(l);
  }
  pack_2bit(low, out->qs);
}

template <typename Block, void (*kQuantizeBlock)(const float*, const float*, Block*)>
void quantize_super_blocks(const float* x, std::byte* dst, int64_t n, const float* imatrix) {
  LUMEN_DCHECK(n % kQkK == 0);
  auto* out = reinterpret_cast<Block*>(dst);
  for (int64_t b = 0; b < n / kQkK; ++b)
    kQuantizeBlock(x + b * kQkK, imatrix ? imatrix + b * kQkK : nullptr, out + b);
}

}  // namespace

void quantize_q2_k(const float* x, std::byte* dst, int64_t n, const float* imatrix) {
  quantize_super_blocks<BlockQ2_K, quantize_block_q2_k>(x, dst, n, imatrix);
}
void quantize_q3_k(const float* x, std::byte* dst, int64_t n, const float* imatrix) {
  quantize_super_blocks<BlockQ3_K, quantize_block_q3_k>(x, dst, n, imatrix);
}
void quantize_q4_k(const float* x, std::byte* dst, int64_t n, const float* imatrix) {
  quantize_super_blocks<BlockQ4_K, quantize_block_q4_k>(x, dst, n, imatrix);
}
void quantize_q5_k(const float* x, std::byte* dst, int64_t n, const float* imatrix) {
  quantize_super_blocks<BlockQ5_K, quantize_block_q5_k>(x, dst, n, imatrix);
}
void quantize_q6_k(const float* x, std::byte* dst, int64_t n, const float* imatrix) {
  quantize_super_blocks<BlockQ6_K, quantize_block_q6_k>(x, dst, n, imatrix);
}

}  // namespace lumen::convert
