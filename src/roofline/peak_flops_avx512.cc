// AVX-512 (+VNNI) peak-rate loops; compiled with AVX-512 flags, called only when the CPU
// has them.
#include <immintrin.h>

#include <cstdint>

#include "roofline/peak_flops_isa.h"

namespace lumen::roofline::detail {

namespace {
// 12 independent chains: enough to cover a 4-cycle FMA latency on 2 pipes with room to
// spare. The inner loops must unroll completely (the pragmas) so the accumulators live in
// registers; an array in memory would put a store-to-load forward on every chain.
constexpr int kChains = 12;
}  // namespace

double fma_f32_loop_avx512(int64_t n_iter) {
  __m512 acc[kChains];
  #pragma GCC unroll 16
  for (int j = 0; j < kChains; ++j) acc[j] = _mm512_set1_ps(static_cast<float>(j));
  const __m512 a = _mm512_set1_ps(0.999999f);
  const __m512 b = _mm512_set1_ps(1e-6f);
  for (int64_t i = 0; i < n_iter; ++i) {
    #pragma GCC unroll 16
    for (int j = 0; j < kChains; ++j) acc[j] = _mm512_fmadd_ps(acc[j], a, b);  // acc -> 1
  }
  __m512 s = acc[0];
  #pragma GCC unroll 16
  for (int j = 1; j < kChains; ++j) s = _mm512_add_ps(s, acc[j]);
  // Not _mm512_reduce_add_ps: g++ 12 warns (-Wuninitialized) inside its extract helpers.
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, s);
  float sink = 0;
  for (float v : lanes) sink += v;
  asm volatile("" : : "x"(sink));
  return static_cast<double>(n_iter) * kChains * 16 * 2;
}

double dot_i8_loop_avx512(int64_t n_iter) {
  __m512i acc[kChains];
  #pragma GCC unroll 16
  for (int j = 0; j < kChains; ++j) acc[j] = _mm512_set1_epi32(j);
  const __m512i a = _mm512_set1_epi8(3);
  const __m512i b = _mm512_set1_epi8(-1);
  for (int64_t i = 0; i < n_iter; ++i) {
    #pragma GCC unroll 16
    for (int j = 0; j < kChains; ++j) acc[j] = _mm512_dpbusd_epi32(acc[j], a, b);
  }
  __m512i s = acc[0];
  #pragma GCC unroll 16
  for (int j = 1; j < kChains; ++j) s = _mm512_add_epi32(s, acc[j]);
  alignas(64) int32_t lanes[16];
  _mm512_store_si512(lanes, s);
  int32_t sink = 0;
  for (int32_t v : lanes) sink += v;
  asm volatile("" : : "r"(sink));
  return static_cast<double>(n_iter) * kChains * 64 * 2;  // 64 u8 x s8 products per instruction
}

}  // namespace lumen::roofline::detail
