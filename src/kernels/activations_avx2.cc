// AVX2 + FMA + F16C row kernels of the architectures beyond llama: LayerNorm with bias
// (StableLM, StarCoder2), GELU (Gemma, StarCoder2) and tanh soft-capping (Gemma 2).
// Compiled with the AVX2 flags (cmake/lumen.cmake); reached only through the table.
//
// Numerics against the scalar reference (kernels_ref.cc):
//   layer_norm_row   double sums in 4 lanes; the rest bit for bit (same f32 operations)
//   gelu_mul         bit-exact: the same fp16 rounding (F16C, nearest even) indexes the
//                    same table (gathered), then the same multiply
//   softcap          tanh_ps (math_avx2.h), a few ulp from tanhf
#pragma GCC optimize("fp-contract=off")  // only the explicit FMAs are fused
#include <immintrin.h>

#include <cmath>
#include <cstdint>

#include "kernels/kernel_table.h"
#include "kernels/kernels_ref.h"
#include "kernels/math_avx2.h"

namespace lumen::kernels {
namespace {

void layer_norm_row(const float* x, const float* w, const float* b, int64_t n, float eps, float* out) {
  __m256d s0 = _mm256_setzero_pd(), s1 = s0;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    s0 = _mm256_add_pd(s0, _mm256_cvtps_pd(_mm256_castps256_ps128(v)));
    s1 = _mm256_add_pd(s1, _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)));
  }
  double sum = hsum_pd(_mm256_add_pd(s0, s1));
  for (; i < n; ++i) sum += static_cast<double>(x[i]);
  const float mean = static_cast<float>(sum / static_cast<double>(n));
  const __m256 vmean = _mm256_set1_ps(mean);
  s0 = _mm256_setzero_pd();
  s1 = s0;
  for (i = 0; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_sub_ps(_mm256_loadu_ps(x + i), vmean);
    const __m256 sq = _mm256_mul_ps(v, v);
    s0 = _mm256_add_pd(s0, _mm256_cvtps_pd(_mm256_castps256_ps128(sq)));
    s1 = _mm256_add_pd(s1, _mm256_cvtps_pd(_mm256_extractf128_ps(sq, 1)));
  }
  double sum2 = hsum_pd(_mm256_add_pd(s0, s1));
  for (; i < n; ++i) {
    const float v = x[i] - mean;
    sum2 += static_cast<double>(v * v);
  }
  const float variance = static_cast<float>(sum2 / static_cast<double>(n));
  const float scale = 1.0f / _mm_cvtss_f32(_mm_sqrt_ss(_mm_set_ss(variance + eps)));
  const __m256 vscale = _mm256_set1_ps(scale);
  for (i = 0; i + 8 <= n; i += 8) {
    __m256 y = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), vmean), vscale);
    if (w) y = _mm256_mul_ps(y, _mm256_loadu_ps(w + i));
    if (b) y = _mm256_add_ps(y, _mm256_loadu_ps(b + i));
    _mm256_storeu_ps(out + i, y);
  }
  for (; i < n; ++i) {
    float y = (x[i] - mean) * scale;
    if (w) y = y * w[i];
    if (b) y = y + b[i];
    out[i] = y;
  }
}

// gelu of 8 lanes through the table: fp16(x) (nearest even) widened to 32-bit indices.
__m256 gelu_ps(__m256 x, const float* table) {
  const __m256i idx = _mm256_cvtepu16_epi32(_mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
  __m256 g = _mm256_i32gather_ps(table, idx, 4);
  g = _mm256_andnot_ps(_mm256_cmp_ps(x, _mm256_set1_ps(-10.0f), _CMP_LE_OQ), g);
  return _mm256_blendv_ps(g, x, _mm256_cmp_ps(x, _mm256_set1_ps(10.0f), _CMP_GE_OQ));
}

void gelu_mul(float* gate, const float* up, int64_t n) {
  const float* table = ref::gelu_f16_table();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 g = gelu_ps(_mm256_loadu_ps(gate + i), table);
    if (up) g = _mm256_mul_ps(g, _mm256_loadu_ps(up + i));
    _mm256_storeu_ps(gate + i, g);
  }
  if (i < n) {
    float g[8] = {}, u[8] = {};
    for (int64_t k = i; k < n; ++k) {
      g[k - i] = gate[k];
      u[k - i] = up ? up[k] : 1.0f;
    }
    _mm256_storeu_ps(g, _mm256_mul_ps(gelu_ps(_mm256_loadu_ps(g), table), _mm256_loadu_ps(u)));
    for (int64_t k = i; k < n; ++k) gate[k] = g[k - i];
  }
}

void softcap(float* s, int64_t n, float cap) {
  const __m256 inv = _mm256_set1_ps(1.0f / cap), vcap = _mm256_set1_ps(cap);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(s + i, _mm256_mul_ps(tanh_ps(_mm256_mul_ps(_mm256_loadu_ps(s + i), inv)), vcap));
  if (i < n) {  // a padded vector, so that every element goes through the same tanh
    float t[8] = {};
    for (int64_t k = i; k < n; ++k) t[k - i] = s[k];
    _mm256_storeu_ps(t, _mm256_mul_ps(tanh_ps(_mm256_mul_ps(_mm256_loadu_ps(t), inv)), vcap));
    for (int64_t k = i; k < n; ++k) s[k] = t[k - i];
  }
}

}  // namespace

void override_activations_avx2(KernelTable& t) {
  t.layer_norm_row = &layer_norm_row;
  t.gelu_mul = &gelu_mul;
  t.softcap = &softcap;
}

}  // namespace lumen::kernels
