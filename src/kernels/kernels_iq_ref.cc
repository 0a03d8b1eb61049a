// Scalar reference kernels of the i-quant types (see iq_blocks.h for the formats and the
// widened integer form every kernel table computes with). Baseline x86-64. iq4_nl and
// iq4_xs dequantize with the other 4-bit types in kernels_ref.cc.
#pragma GCC optimize("fp-contract=off")  // as kernels_ref.cc: products rounded as written
#include <cstring>

#include "base/fp16.h"
#include "kernels/iq_blocks.h"
#include "kernels/kernels_ref.h"

namespace lumen::kernels::ref {
namespace {

// As ggml's dequantize_row_iq*: per 16 (or 32) elements dl = d * (scale factor), then
// y = dl * value. Here dl = (d * sc) * kScaleMul and value = v (the 1-bit types' v is
// 8 * (grid + shift), their kScaleMul 1/8): the same products up to exact powers of two,
// so the same floats as ggml's.
template <typename W>
void dequantize_wide(const std::byte* src, float* y, int64_t n) {
  const auto* b = reinterpret_cast<const typename W::Block*>(src);
  IqWide wide;
  for (int64_t ib = 0; ib < n / kQkK; ++ib) {
    W::widen(b[ib], wide);
    const float d = fp16_to_f32(wide.d_f16);
    for (int t = 0; t < 16; ++t) {
      const float dl = (d * static_cast<float>(wide.sc[t])) * W::kScaleMul;
      for (int i = 0; i < 16; ++i) *y++ = dl * static_cast<float>(wide.v[16 * t + i]);
    }
  }
}

// Per super-block the exact S (iq_wide_dot), then acc += (d_x * d_w) * (float)S in block
// order; the result is acc * kScaleMul (exact). ggml sums the same integers per super-block
// and applies the same power of two, so only the float rounding of d_x * d_w and of the
// 1-bit types' shift term (ggml: sumi + 0.125 * sumi1 in float) can differ.
template <typename W>
float dot_iq_q8_k(int64_t n, const std::byte* w, const std::byte* x) {
  const auto* bw = reinterpret_cast<const typename W::Block*>(w);
  const auto* bx = reinterpret_cast<const BlockQ8_K*>(x);
  IqWide wide;
  float acc = 0.0f;
  for (int64_t ib = 0; ib < n / kQkK; ++ib) {
    W::widen(bw[ib], wide);
    const int32_t s = iq_wide_dot(wide, bx[ib].qs);
    acc += (bx[ib].d * fp16_to_f32(wide.d_f16)) * static_cast<float>(s);
  }
  return acc * W::kScaleMul;
}

}  // namespace

void dequantize_row_iq3_s(const std::byte* src, float* dst, int64_t n) { dequantize_wide<WidenIQ3_S>(src, dst, n); }
void dequantize_row_iq3_xxs(const std::byte* src, float* dst, int64_t n) { dequantize_wide<WidenIQ3_XXS>(src, dst, n); }
void dequantize_row_iq2_s(const std::byte* src, float* dst, int64_t n) { dequantize_wide<WidenIQ2_S>(src, dst, n); }
void dequantize_row_iq2_xs(const std::byte* src, float* dst, int64_t n) { dequantize_wide<WidenIQ2_XS>(src, dst, n); }
void dequantize_row_iq2_xxs(const std::byte* src, float* dst, int64_t n) { dequantize_wide<WidenIQ2_XXS>(src, dst, n); }
void dequantize_row_iq1_s(const std::byte* src, float* dst, int64_t n) { dequantize_wide<WidenIQ1_S>(src, dst, n); }
void dequantize_row_iq1_m(const std::byte* src, float* dst, int64_t n) { dequantize_wide<WidenIQ1_M>(src, dst, n); }

// As vec_dot_q4_0_q8_0 with the non-linear values: sumf += (float)sumi * (d_w * d_x).
float vec_dot_iq4_nl_q8_0(int64_t n, const std::byte* w, const std::byte* x) {
  const auto* bw = reinterpret_cast<const BlockIQ4_NL*>(w);
  const auto* bx = reinterpret_cast<const BlockQ8_0*>(x);
  float sumf = 0.0f;
  for (int64_t ib = 0; ib < n / kQk; ++ib) {
    int32_t sumi = 0;
    for (int i = 0; i < 16; ++i) {
      sumi += kIq4nlValues[bw[ib].qs[i] & 15] * bx[ib].qs[i];
      sumi += kIq4nlValues[bw[ib].qs[i] >> 4] * bx[ib].qs[i + 16];
    }
    sumf += static_cast<float>(sumi) * (fp16_to_f32(bw[ib].d_f16) * fp16_to_f32(bx[ib].d_f16));
  }
  return sumf;
}
float vec_dot_iq4_xs_q8_k(int64_t n, const std::byte* w, const std::byte* x) { return dot_iq_q8_k<WidenIQ4_XS>(n, w, x); }
float vec_dot_iq3_s_q8_k(int64_t n, const std::byte* w, const std::byte* x) { return dot_iq_q8_k<WidenIQ3_S>(n, w, x); }
float vec_dot_iq3_xxs_q8_k(int64_t n, const std::byte* w, const std::byte* x) { return dot_iq_q8_k<WidenIQ3_XXS>(n, w, x); }
float vec_dot_iq2_s_q8_k(int64_t n, const std::byte* w, const std::byte* x) { return dot_iq_q8_k<WidenIQ2_S>(n, w, x); }
float vec_dot_iq2_xs_q8_k(int64_t n, const std::byte* w, const std::byte* x) { return dot_iq_q8_k<WidenIQ2_XS>(n, w, x); }
float vec_dot_iq2_xxs_q8_k(int64_t n, const std::byte* w, const std::byte* x) { return dot_iq_q8_k<WidenIQ2_XXS>(n, w, x); }
float vec_dot_iq1_s_q8_k(int64_t n, const std::byte* w, const std::byte* x) { return dot_iq_q8_k<WidenIQ1_S>(n, w, x); }
float vec_dot_iq1_m_q8_k(int64_t n, const std::byte* w, const std::byte* x) { return dot_iq_q8_k<WidenIQ1_M>(n, w, x); }

}  // namespace lumen::kernels::ref
