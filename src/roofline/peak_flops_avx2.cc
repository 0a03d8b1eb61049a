// AVX2 + FMA peak-rate loops; compiled with AVX2 flags, called only when the CPU has them.
#include <immintrin.h>

#include "roofline/peak_flops_isa.h"

namespace lumen::roofline::detail {

namespace {
constexpr int kChains = 10;     // f32: 10 accumulators + 2 constants of 16 ymm registers
constexpr int kChainsI8 = 5;    // int8: x, acc and 2 temporaries per chain in flight

float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_hadd_ps(s, s);
  s = _mm_hadd_ps(s, s);
  return _mm_cvtss_f32(s);
}
}  // namespace

double fma_f32_loop_avx2(int64_t n_iter) {
  __m256 acc[kChains];
  #pragma GCC unroll 16
  for (int j = 0; j < kChains; ++j) acc[j] = _mm256_set1_ps(static_cast<float>(j));
  const __m256 a = _mm256_set1_ps(0.999999f);
  const __m256 b = _mm256_set1_ps(1e-6f);
  for (int64_t i = 0; i < n_iter; ++i) {
    #pragma GCC unroll 16
    for (int j = 0; j < kChains; ++j) acc[j] = _mm256_fmadd_ps(acc[j], a, b);
  }
  __m256 s = acc[0];
  #pragma GCC unroll 16
  for (int j = 1; j < kChains; ++j) s = _mm256_add_ps(s, acc[j]);
  const float sink = hsum(s);
  asm volatile("" : : "x"(sink));
  return static_cast<double>(n_iter) * kChains * 8 * 2;
}

// Without VNNI a u8 x s8 dot product into i32 takes two instructions: vpmaddubsw (32
// products, pairwise summed to i16) then vpmaddwd against ones (to i32), plus the add.
// The empty asm makes x opaque each iteration, so the products cannot be hoisted out of
// the loop, without putting them on a dependency chain; only the adds chain.
double dot_i8_loop_avx2(int64_t n_iter) {
  __m256i x[kChainsI8], acc[kChainsI8];
  #pragma GCC unroll 16
  for (int j = 0; j < kChainsI8; ++j) {
    x[j] = _mm256_set1_epi8(static_cast<char>(j + 1));
    acc[j] = _mm256_setzero_si256();
  }
  const __m256i b = _mm256_set1_epi8(1);
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t i = 0; i < n_iter; ++i) {
    #pragma GCC unroll 16
    for (int j = 0; j < kChainsI8; ++j) {
      asm volatile("" : "+x"(x[j]));
      acc[j] = _mm256_add_epi32(acc[j], _mm256_madd_epi16(_mm256_maddubs_epi16(x[j], b), ones));
    }
  }
  __m256i s = acc[0];
  #pragma GCC unroll 16
  for (int j = 1; j < kChainsI8; ++j) s = _mm256_add_epi32(s, acc[j]);
  const int sink = _mm256_extract_epi32(s, 0) + _mm256_extract_epi32(s, 7);
  asm volatile("" : : "r"(sink));
  return static_cast<double>(n_iter) * kChainsI8 * 32 * 2;
}

}  // namespace lumen::roofline::detail
