// AVX-512 exp_sum (KernelTable::exp_sum: s[j] = expf(s[j] - max), returning the sum in
// double), bit for bit the AVX2 one (kernels_avx2.cc exp_sum, math_avx2.h exp_ps) that the
// AVX-512 table used before: the same operations per lane, and the same double sums in the
// same order. And silu_mul (gate = gate / (1 + expf(-gate)) * up), bit for bit the AVX2 one:
// per lane the same operations; a short tail through zeroed lanes, as the AVX2 loop pads it.
//
// Why 16 lanes pay here when the other row ops do not (kernels_avx512.cc): Zen 4 runs a
// 512-bit operation as two 256-bit halves, so a throughput-bound loop gains nothing, but one
// exp is a chain of ~25 dependent operations (~60 cycles) and the out-of-order window holds
// only a few 8-lane iterations of it: the 8-lane loop is bound by latency, and a 512-bit
// operation carries twice the elements per scheduler entry. Measured on the Cascade Lake
// host, silu_mul of qwen2.5-0.5b's 4864 (serial work of a decode step between two matmuls):
// 6.4 us with 8 lanes (~30 cycles an iteration, the scheduler full of waiting exp chains),
// 4.6 us with 16.
//
// The sum: the AVX2 loop keeps two 4-lane double accumulators, s0 (elements 8 g + 0..3 of
// each group g of 8) and s1 (8 g + 4..7), adds group after group, then hsum_pd(s0 + s1),
// then the tail (< 8 elements) one by one. Here lanes 0-3 of one 8-lane double accumulator
// are s0 and lanes 4-7 are s1; a 16-element step adds its two groups in order:
//
//   e[16m .. 16m+15]:  | g = 2m: 0..3 -> s0, 4..7 -> s1 | g = 2m+1: 0..3 -> s0, 4..7 -> s1 |
//   acc += cvt(lo 8);  acc += cvt(hi 8)                   (each lane: group 2m, then 2m+1)
//
// Compiled with the AVX-512 flags; only reached when cpu_features().has_avx512_vnni().
#pragma GCC optimize("fp-contract=off")  // math_avx2.h's operations exactly, nothing fused
// GCC 12 bug 105593 (see matmul_avx512_common.h): the 512-bit intrinsics read as uninitialised use.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cstdint>

#include "kernels/kernel_table.h"

namespace lumen::kernels {
namespace {

__m512 set16(float v) { return _mm512_set1_ps(v); }

// math_avx2.h exp_ps, operation for operation, on 16 lanes.
__m512 exp16(__m512 x) {
  const __mmask16 zero_mask = _mm512_cmp_ps_mask(x, set16(-87.3f), _CMP_LT_OQ);
  const __mmask16 inf_mask = _mm512_cmp_ps_mask(x, set16(88.7228394f), _CMP_GT_OQ);
  x = _mm512_min_ps(_mm512_max_ps(x, set16(-87.3f)), set16(88.7228394f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, set16(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, set16(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, set16(-2.12194440e-4f), r);
  __m512 p = set16(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, set16(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, set16(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, set16(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, set16(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, set16(5.0000001201e-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r);
  p = _mm512_add_ps(p, set16(1.0f));
  const __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(126)), 23);
  __m512 y = _mm512_mul_ps(_mm512_mul_ps(p, _mm512_castsi512_ps(e)), set16(2.0f));
  y = _mm512_mask_blend_ps(inf_mask, y, set16(__builtin_huge_valf()));
  return _mm512_maskz_mov_ps(static_cast<__mmask16>(~zero_mask), y);  // andnot(zero_mask, y)
}

__m512d add_group(__m512d acc, __m256 e8) { return _mm512_add_pd(acc, _mm512_cvtps_pd(e8)); }

double exp_sum(float* s, int64_t n, float max) {
  const __m512 vmax = set16(max);
  __m512d acc = _mm512_setzero_pd();  // lanes 0-3: AVX2's s0, lanes 4-7: its s1
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    const __m512 e = exp16(_mm512_sub_ps(_mm512_loadu_ps(s + j), vmax));
    _mm512_storeu_ps(s + j, e);
    acc = add_group(acc, _mm512_castps512_ps256(e));
    acc = add_group(acc, _mm512_extractf32x8_ps(e, 1));
  }
  if (j + 8 <= n) {  // a last whole group of 8
    const __m256 x = _mm256_sub_ps(_mm256_loadu_ps(s + j), _mm256_set1_ps(max));
    const __m256 e = _mm512_castps512_ps256(exp16(_mm512_zextps256_ps512(x)));
    _mm256_storeu_ps(s + j, e);
    acc = add_group(acc, e);
    j += 8;
  }
  // hsum_pd(s0 + s1)
  const __m256d s01 = _mm256_add_pd(_mm512_castpd512_pd256(acc), _mm512_extractf64x4_pd(acc, 1));
  __m128d h = _mm_add_pd(_mm256_castpd256_pd128(s01), _mm256_extractf128_pd(s01, 1));
  h = _mm_add_sd(h, _mm_unpackhi_pd(h, h));
  double sum = _mm_cvtsd_f64(h);
  if (j < n) {  // the tail as the AVX2 loop does it: padded with -100, then summed one by one
    alignas(64) float t[16];
    for (int k = 0; k < 16; ++k) t[k] = j + k < n ? s[j + k] - max : -100.0f;
    _mm512_store_ps(t, exp16(_mm512_load_ps(t)));
    for (int64_t k = j; k < n; ++k) {
      s[k] = t[k - j];
      sum += t[k - j];
    }
  }
  return sum;
}

// kernels_avx2.cc silu_ps on 16 lanes: g / (1 + expf(0 - g)).
__m512 silu16(__m512 g) { return _mm512_div_ps(g, _mm512_add_ps(set16(1.0f), exp16(_mm512_sub_ps(_mm512_setzero_ps(), g)))); }

void silu_mul(float* gate, const float* up, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(gate + i, _mm512_mul_ps(silu16(_mm512_loadu_ps(gate + i)), _mm512_loadu_ps(up + i)));
  if (i < n) {  // zeros in the lanes past n, as in the AVX2 loop's padded tail
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m512 g = _mm512_maskz_loadu_ps(m, gate + i), u = _mm512_maskz_loadu_ps(m, up + i);
    _mm512_mask_storeu_ps(gate + i, m, _mm512_mul_ps(silu16(g), u));
  }
}

}  // namespace

void override_softmax_avx512(KernelTable& t) {
  t.exp_sum = &exp_sum;
  t.silu_mul = &silu_mul;
}

}  // namespace lumen::kernels
