// f32 math for 8 lanes (and a bit helper) shared by the AVX2-compiled translation units (*_avx2.cc). In an
// anonymous namespace on purpose (see kernels_isa_common.h): include it only from files
// compiled with the AVX2 (or AVX-512) flags.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace lumen::kernels {
namespace {  // NOLINT(google-build-namespaces): deliberate, see above

// The 32 bits of `bits` as 32 bytes: byte i = 0xff if bit i is set.
inline __m256i bytes_from_bits(uint32_t bits) {
  // Byte i takes source byte i / 8 (both 128-bit lanes hold the broadcast u32), then tests
  // bit i % 8 of it.
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(static_cast<int32_t>(bits)),
      _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
  const __m256i sel = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ull));
  return _mm256_cmpeq_epi8(_mm256_and_si256(spread, sel), sel);
}
// The same for the little-endian u32 at p.
inline __m256i bytes_from_bits(const uint8_t* p) {
  uint32_t bits;
  std::memcpy(&bits, p, 4);
  return bytes_from_bits(bits);
}

inline double hsum_pd(__m256d v) {
  __m128d s = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
  s = _mm_add_sd(s, _mm_unpackhi_pd(s, s));
  return _mm_cvtsd_f64(s);
}

// expf for 8 lanes (Cephes expf): n = round(x log2 e), r = x - n ln2 (two-part ln2),
// exp(r) by a degree-7 polynomial, times 2^n (as 2^(n-1) * 2 so that n = 128 works).
// x > ln(FLT_MAX) gives +inf and x < -87.3 gives 0 (the true result is then below
// FLT_MIN), like expf up to that flush. Max error ~2 ulp.
inline __m256 exp_ps(__m256 x) {
  const __m256 zero_mask = _mm256_cmp_ps(x, _mm256_set1_ps(-87.3f), _CMP_LT_OQ);
  const __m256 inf_mask = _mm256_cmp_ps(x, _mm256_set1_ps(88.7228394f), _CMP_GT_OQ);
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.3f)), _mm256_set1_ps(88.7228394f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r);
  p = _mm256_add_ps(p, _mm256_set1_ps(1.0f));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(126)), 23);
  __m256 y = _mm256_mul_ps(_mm256_mul_ps(p, _mm256_castsi256_ps(e)), _mm256_set1_ps(2.0f));
  y = _mm256_blendv_ps(y, _mm256_set1_ps(__builtin_huge_valf()), inf_mask);
  return _mm256_andnot_ps(zero_mask, y);
}

// tanhf for 8 lanes. |x| < 0.625: Cephes tanhf's odd polynomial x + x z P(z), z = x^2;
// above: 1 - 2 / (expf(2|x|) + 1) with x's sign (expf overflowing to inf gives exactly 1).
// A few ulp from libm's tanhf; NaN stays NaN.
inline __m256 tanh_ps(__m256 x) {
  const __m256 sign = _mm256_and_ps(x, _mm256_set1_ps(-0.0f));
  const __m256 ax = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x);
  const __m256 z = _mm256_mul_ps(x, x);
  __m256 p = _mm256_set1_ps(-5.70498872745e-3f);
  p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(2.06390887954e-2f));
  p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(-5.37397155531e-2f));
  p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(1.33314422036e-1f));
  p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(-3.33332819422e-1f));
  const __m256 small = _mm256_fmadd_ps(_mm256_mul_ps(p, z), x, x);
  const __m256 e = exp_ps(_mm256_add_ps(ax, ax));
  const __m256 big = _mm256_sub_ps(_mm256_set1_ps(1.0f),
                                   _mm256_div_ps(_mm256_set1_ps(2.0f), _mm256_add_ps(e, _mm256_set1_ps(1.0f))));
  const __m256 is_small = _mm256_cmp_ps(ax, _mm256_set1_ps(0.625f), _CMP_LT_OQ);
  const __m256 is_nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
  __m256 y = _mm256_blendv_ps(_mm256_or_ps(big, sign), small, is_small);
  return _mm256_blendv_ps(y, x, is_nan);
}

}  // namespace
}  // namespace lumen::kernels
