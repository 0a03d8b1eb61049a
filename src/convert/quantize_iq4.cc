// The 4-bit non-linear types iq4_nl (blocks of 32, an fp16 scale each) and iq4_xs
// (256-value super-blocks of 8 sub-blocks, 6-bit sub-block scales): every weight is
// d * kIq4nlValues[q], a 16-level grid denser near 0 (kernels/quant_blocks.h).
//
// Per 32-value block (ggml's quantize_row_iq4_nl_impl, as quantize_iq4_nl / quantize_iq4_xs
// call it, with 7 tries):
//   w       imatrix * sqrt(sigma2 + x^2) with an importance matrix (sigma2 = 2 mean(x^2) of the
//           super-block), x^2 without
//   start   d = -max / values[0] (the signed value of largest magnitude maps to the grid's
//           end), levels = the nearest grid value to x / d, then d = least squares
//   search  15 grids (values[0] + k) / max, k = -7..7: keep the least-squares d of the one
//           with the largest gain sum(w q x)^2 / sum(w q^2) (the levels are not kept)
//   then    iq4_nl: fp16(d), levels re-derived against the unrounded d;
//           iq4_xs: 6-bit scales l = round(-32 d_b / max_d) against the super-block scale
//           -max_d / 32, levels re-derived against each stored scale
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

using kernels::BlockIQ4_NL;
using kernels::BlockIQ4_XS;
using kernels::kIq4nlValues;
using kernels::nearest_int;

constexpr int kBlock = 32;
constexpr int kTries = 7;

// For each integer f from the grid's first value to its last, the index of the largest grid
// value <= f (at most 14): the lower end of the bracket [v[i], v[i + 1]) of any x with
// floor(x) = f, since the grid values are integers.
struct Iq4Brackets {
  static constexpr int kLo = kIq4nlValues[0], kHi = kIq4nlValues[15];
  uint8_t lower[kHi - kLo + 1] = {};
  constexpr Iq4Brackets() {
    for (int f = kLo; f <= kHi; ++f) {
      int i = 0;
      while (i < 14 && kIq4nlValues[i + 1] <= f) ++i;
      lower[f - kLo] = static_cast<uint8_t>(i);
    }
  }
};
constexpr Iq4Brackets kBrackets;

// Index of the grid value nearest to x; on an exact tie in the two float differences the upper
// one, as ggml's bisection (best_index_int8) decides. The bracket comes from a table on
// floor(x) instead of the bisection's branches (same bracket for every x, NaN included: the
// bisection ends at [v[14], v[15]) and picks 15).
int nearest_level(float x) {
  const int8_t* v = kIq4nlValues;
  if (x <= v[0]) return 0;
  if (x >= v[15]) return 15;
  if (x != x) return 15;
  const int lo = kBrackets.lower[static_cast<int>(std::floor(x)) - Iq4Brackets::kLo];
  return x - v[lo] < v[lo + 1] - x ? lo : lo + 1;
}

// The search of one block: its scale (0 for an all-zero block, whose levels are left alone),
// and the levels of the first grid in L.
float fit_block(const float* xb, const float* qw, float sigma2, uint8_t* L) {
  float w[kBlock];
  for (int j = 0; j < kBlock; ++j) w[j] = qw ? qw[j] * std::sqrt(sigma2 + xb[j] * xb[j]) : xb[j] * xb[j];
  float amax = 0, max = 0;
  for (int j = 0; j < kBlock; ++j) {
    if (std::fabs(xb[j]) > amax) {
      amax = std::fabs(xb[j]);
      max = xb[j];
    }
  }
  if (amax < kGroupMaxEps) return 0;
  float d = -max / kIq4nlValues[0];
  float id = 1 / d;
  float sum_qx = 0, sum_q2 = 0;
  for (int j = 0; j < kBlock; ++j) {
    L[j] = static_cast<uint8_t>(nearest_level(id * xb[j]));
    const float q = kIq4nlValues[L[j]];
    sum_qx += w[j] * q * xb[j];
    sum_q2 += w[j] * q * q;
  }
  d = sum_qx / sum_q2;
  float best = d * sum_qx;
  for (int k = -kTries; k <= kTries; ++k) {
    id = (k + kIq4nlValues[0]) / max;
    sum_qx = sum_q2 = 0;
    for (int j = 0; j < kBlock; ++j) {
      const float q = kIq4nlValues[nearest_level(id * xb[j])];
      sum_qx += w[j] * q * xb[j];
      sum_q2 += w[j] * q * q;
    }
    if (sum_q2 > 0 && sum_qx * sum_qx > best * sum_q2) {
      d = sum_qx / sum_q2;
      best = d * sum_qx;
    }
  }
  return d;
}

// Low nibbles of elements j and j + 16 of each 32-block share qs[16 b + j].
void pack_nibbles(const uint8_t* L, int n, uint8_t* qs) {
  for (int b = 0; b < n / kBlock; ++b)
    for (int j = 0; j < 16; ++j) qs[16 * b + j] = static_cast<uint8_t>(L[32 * b + j] | (L[32 * b + 16 + j] << 4));
}

void quantize_block_iq4_nl(const float* x, const float* qw, BlockIQ4_NL* out) {
  float sigma2 = 0;
  for (int j = 0; j < kBlock; ++j) sigma2 += x[j] * x[j];
  sigma2 *= 2.f / kBlock;
  uint8_t L[kBlock] = {};
  const float d = fit_block(x, qw, sigma2, L);
  out->d_f16 = f32_to_fp16(d);
  const float id = d != 0 ? 1 / d : 0;
  for (int j = 0; j < kBlock; ++j) L[j] = static_cast<uint8_t>(nearest_level(id * x[j]));
  pack_nibbles(L, kBlock, out->qs);
}

void quantize_block_iq4_xs(const float* x, const float* qw, BlockIQ4_XS* out) {
  constexpr int kN = kernels::kQkK;
  float sigma2 = 0;
  for (int j = 0; j < kN; ++j) sigma2 += x[j] * x[j];
  sigma2 *= 2.f / kN;
  uint8_t L[kN] = {};
  float scales[kN / kBlock];
  float max_scale = 0, amax_scale = 0;
  for (int b = 0; b < kN / kBlock; ++b) {
    scales[b] = fit_block(x + kBlock * b, qw ? qw + kBlock * b : nullptr, sigma2, L + kBlock * b);
    if (std::fabs(scales[b]) > amax_scale) {
      amax_scale = std::fabs(scales[b]);
      max_scale = scales[b];
    }
  }
  const float d = -max_scale / 32;
  out->d_f16 = f32_to_fp16(d);
  const float id = d != 0 ? 1 / d : 0.f;
  out->scales_h = 0;
  std::memset(out->scales_l, 0, sizeof(out->scales_l));
  for (int b = 0; b < kN / kBlock; ++b) {
    int l = std::max(-32, std::min(31, nearest_int(id * scales[b])));
    const float dl = d * l;
    const float idl = dl != 0 ? 1 / dl : 0.f;
    for (int j = 0; j < kBlock; ++j) L[kBlock * b + j] = static_cast<uint8_t>(nearest_level(idl * x[kBlock * b + j]));
    l += 32;
    out->scales_l[b / 2] = static_cast<uint8_t>(out->scales_l[b / 2] | ((l & 0xF) << (4 * (b % 2))));
    out->scales_h = static_cast<uint16_t>(out->scales_h | ((l >> 4) << (2 * b)));
  }
  pack_nibbles(L, kN, out->qs);
}

}  // namespace

void quantize_iq4_nl(const float* x, std::byte* dst, int64_t n, const float* imatrix) {
  LUMEN_DCHECK(n % kBlock == 0);
  auto* out = reinterpret_cast<BlockIQ4_NL*>(dst);
  for (int64_t b = 0; b < n / kBlock; ++b)
    quantize_block_iq4_nl(x + kBlock * b, imatrix ? imatrix + kBlock * b : nullptr, out + b);
}

void quantize_iq4_xs(const float* x, std::byte* dst, int64_t n, const float* imatrix) {
  LUMEN_DCHECK(n % kernels::kQkK == 0);
  auto* out = reinterpret_cast<BlockIQ4_XS*>(dst);
  for (int64_t b = 0; b < n / kernels::kQkK; ++b)
    quantize_block_iq4_xs(x + kernels::kQkK * b, imatrix ? imatrix + kernels::kQkK * b : nullptr, out + b);
}

}  // namespace lumen::convert
