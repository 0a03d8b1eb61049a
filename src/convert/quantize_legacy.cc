// The "legacy" 32-value block types: q4_0, q4_1, q5_0, q5_1, q8_0 (formats in
// kernels/quant_blocks.h). Without an importance matrix each block is quantized from its
// own range (ggml's quantize_row_*_ref); with one, each block's scale is searched under
// weights w = imatrix * sqrt(row variance + x^2) (ggml's quantize_row_*_impl).
#include <algorithm>
#include <cfloat>
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

using kernels::BlockQ4_0;
using kernels::BlockQ4_1;
using kernels::BlockQ5_0;
using kernels::BlockQ5_1;
using kernels::BlockQ8_0;
using kernels::kQk;

// The signed value of largest magnitude in x[0..kQk) (the first one on ties).
float signed_absmax(const float* x) {
  float amax = 0;
  float max = 0;
  for (int j = 0; j < kQk; ++j) {
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  return max;
}

// Packs 32 levels of up to 5 bits: low nibbles of elements j and j + 16 share qs[j]; bit 4
// of element i goes to bit i of the little-endian u32 qh (when qh is given).
void pack_levels(const uint8_t* L, uint8_t* qs, uint8_t* qh) {
  uint32_t high = 0;
  for (int j = 0; j < kQk / 2; ++j) {
    qs[j] = static_cast<uint8_t>((L[j] & 0x0F) | ((L[j + kQk / 2] & 0x0F) << 4));
    high |= static_cast<uint32_t>((L[j] & 0x10u) >> 4) << j;
    high |= static_cast<uint32_t>((L[j + kQk / 2] & 0x10u) >> 4) << (j + kQk / 2);
  }
  if (qh) std::memcpy(qh, &high, sizeof(high));
}

// The importance-weighted path of every legacy type: w[j] = qw[j] * sqrt(sigma2 + x[j]^2),
// where sigma2 is the mean square of the whole row.
float row_sigma2(const float* x, int64_t n) {
  float sum_x2 = 0;
  for (int64_t j = 0; j < n; ++j) sum_x2 += x[j] * x[j];
  return sum_x2 / n;
}

void block_weights(const float* xb, const float* qw, float sigma2, float* w) {
  for (int j = 0; j < kQk; ++j) w[j] = qw[j] * std::sqrt(sigma2 + xb[j] * xb[j]);
}

// min and max of a block, for the asymmetric (_1) types.
void block_range(const float* x, float* min, float* max) {
  *min = FLT_MAX;
  *max = -FLT_MAX;
  for (int j = 0; j < kQk; ++j) {
    if (x[j] < *min) *min = x[j];
    if (x[j] > *max) *max = x[j];
  }
}

}  // namespace

void quantize_q8_0(const float* x, std::byte* dst, int64_t n) {
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

namespace {

// q4_0 / q5_0: x ~ d * (q - nmax), q in [0, 2 nmax). Reference: the signed value of largest
// magnitude maps to -nmax, so the full range is used on the side that needs it; x / d + nmax
// + 0.5 is truncated (rounds half up; ggml truncates through int8_t, which the range keeps
// exact) and the top value clamps to 2 nmax - 1. Weighted: fit_symmetric under the weights.
template <typename Block, int kNmax>
void quantize_symmetric(const float* x, std::byte* dst, int64_t n, const float* imatrix) {
  LUMEN_DCHECK(n % kQk == 0);
  auto* out = reinterpret_cast<Block*>(dst);
  uint8_t* qh = nullptr;
  const float sigma2 = imatrix ? row_sigma2(x, n) : 0.f;
  for (int64_t b = 0; b < n / kQk; ++b) {
    const float* xb = x + b * kQk;
    if constexpr (kNmax == 16) qh = out[b].qh;
    uint8_t L[kQk];
    if (imatrix) {
      float w[kQk];
      block_weights(xb, imatrix + b * kQk, sigma2, w);
      const float d = fit_symmetric(kQk, kNmax, xb, reinterpret_cast<int8_t*>(L), SymmetricWeight::kSquare, w);
      out[b].d_f16 = f32_to_fp16(d);
    } else {
      const float d = signed_absmax(xb) / -kNmax;
      const float id = d != 0 ? 1.0f / d : 0.0f;
      out[b].d_f16 = f32_to_fp16(d);
      for (int j = 0; j < kQk; ++j)
        L[j] = static_cast<uint8_t>(
            std::min(2 * kNmax - 1, static_cast<int>(static_cast<int8_t>(xb[j] * id + (kNmax + 0.5f)))));
    }
    pack_levels(L, out[b].qs, qh);
  }
}

// q4_1 / q5_1: x ~ d * q + m, q in [0, nmax]. Reference: d = (max - min) / nmax, m = min,
// q = trunc((x - min) / d + 0.5) (q4_1 clamps to 15; q5_1's value is at most 31.5). Weighted:
// fit_asymmetric under the weights.
template <typename Block, int kNmax>
void quantize_asymmetric(const float* x, std::byte* dst, int64_t n, const float* imatrix) {
  LUMEN_DCHECK(n % kQk == 0);
  auto* out = reinterpret_cast<Block*>(dst);
  uint8_t* qh = nullptr;
  const float sigma2 = imatrix ? row_sigma2(x, n) : 0.f;
  for (int64_t b = 0; b < n / kQk; ++b) {
    const float* xb = x + b * kQk;
    if constexpr (kNmax == 31) qh = out[b].qh;
    uint8_t L[kQk];
    if (imatrix) {
      float w[kQk];
      float neg_min;
      block_weights(xb, imatrix + b * kQk, sigma2, w);
      const float d = fit_asymmetric(kQk, kNmax, xb, w, L, &neg_min, -0.9f, 0.05f, 36, false);
      out[b].d_f16 = f32_to_fp16(d);
      out[b].m_f16 = f32_to_fp16(-neg_min);
    } else {
      float min, max;
      block_range(xb, &min, &max);
      const float d = (max - min) / kNmax;
      const float id = d != 0 ? 1.0f / d : 0.0f;
      out[b].d_f16 = f32_to_fp16(d);
      out[b].m_f16 = f32_to_fp16(min);
      for (int j = 0; j < kQk; ++j) {
        const float v = (xb[j] - min) * id + 0.5f;
        L[j] = kNmax == 15 ? static_cast<uint8_t>(std::min(15, static_cast<int>(static_cast<int8_t>(v))))
                           : static_cast<uint8_t>(v);
      }
    }
    pack_levels(L, out[b].qs, qh);
  }
}

}  // namespace

void quantize_q4_0(const float* x, std::byte* dst, int64_t n, const float* imatrix) {
  quantize_symmetric<BlockQ4_0, 8>(x, dst, n, imatrix);
}
void quantize_q5_0(const float* x, std::byte* dst, int64_t n, const float* imatrix) {
  quantize_symmetric<BlockQ5_0, 16>(x, dst, n, imatrix);
}
void quantize_q4_1(const float* x, std::byte* dst, int64_t n, const float* imatrix) {
  quantize_asymmetric<BlockQ4_1, 15>(x, dst, n, imatrix);
}
void quantize_q5_1(const float* x, std::byte* dst, int64_t n, const float* imatrix) {
  quantize_asymmetric<BlockQ5_1, 31>(x, dst, n, imatrix);
}

}  // namespace lumen::convert
