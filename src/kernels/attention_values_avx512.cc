// AVX-512 P.V of a GQA group straight from q8_0 / q4_0 V rows (KernelTable::
// attn_accum_group_q8_0 / _q4_0, flash_attention.cc's V pass): no dequantize pass into a
// buffer and no reload of it; each V value is formed in registers and fed to the FMAs.
//
// Bit for bit the same table's dequantize_q8_0 / _q4_0 followed by attn_accum_group_f32
// (attention_avx512.cc accum_tile), because every value and every operation is the same:
//   * a V value is the dequantizer's one f32 product d * q (q exact as a float; vcvtph2ps
//     widens d exactly like fp16_to_f32, NaNs aside, whose payload the product then
//     carries the same way);
//   * per (head, dim) the accumulator is the same chain of FMAs p[h][s] * v[s][i] + acc over
//     the keys s in increasing order, started from acc as the caller left it.
// Only where the value comes from changes: the 32 dims of one accum tile are exactly one
// q8_0 / q4_0 block of the row, so a tile reads one block (one scale) per key:
//
//   q8_0 block: d | q0 .. q31 (int8)        v0 = dims 0-15 = d * q0..q15,  v1 = d * q16..q31
//   q4_0 block: d | b0 .. b15 (two nibbles)  v0 = d * (lo(b0..b15) - 8),  v1 = d * (hi(b0..b15) - 8)
//
// q4_0's (nibble - 8) comes from a 16-entry table of floats (-8 .. 7) indexed by the nibble
// (vpermps reads only the index's low 4 bits, so the low nibbles need no mask): the same
// exact float that the dequantizer's int -> float conversion gives.
//
// Compiled with the AVX-512 flags; only reached when cpu_features().has_avx512_vnni().
#pragma GCC optimize("fp-contract=off")  // only the explicit FMAs below are fused
// GCC 12 bug 105593 (see matmul_avx512_common.h): the 512-bit intrinsics read as uninitialised use.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "kernels/kernel_table.h"
#include "kernels/quant_blocks.h"

namespace lumen::kernels {
namespace {

// d widened exactly (see the file comment), in every lane.
[[gnu::always_inline]] inline __m512 scale16(uint16_t d_f16) {
  return _mm512_broadcastss_ps(_mm_cvtph_ps(_mm_cvtsi32_si128(d_f16)));
}

// The 32 values of one block: v0 = elements 0-15, v1 = elements 16-31, each d * q.
struct ValuesQ8_0 {
  using Block = BlockQ8_0;
  [[gnu::always_inline]] static void load(const Block* b, __m512& v0, __m512& v1) {
    const __m512 d = scale16(b->d_f16);
    const __m128i q0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b->qs));
    const __m128i q1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b->qs + 16));
    v0 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q0)), d);
    v1 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q1)), d);
  }
};

struct ValuesQ4_0 {
  using Block = BlockQ4_0;
  [[gnu::always_inline]] static void load(const Block* b, __m512& v0, __m512& v1) {
    const __m512 minus8 = _mm512_setr_ps(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7);
    const __m512 d = scale16(b->d_f16);
    const __m512i q = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b->qs)));
    v0 = _mm512_mul_ps(_mm512_permutexvar_ps(q, minus8), d);                        // low nibbles
    v1 = _mm512_mul_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(q, 4), minus8), d);  // high nibbles
  }
};

// acc[h][32 ib .. 32 ib + 31] += sum_s p[h][s] v[s][32 ib ..] for NH heads: block ib of each
// of the n rows (v_stride bytes apart).
template <int NH, typename Values>
void accum_tile_q(const float* p, size_t p_stride, const std::byte* v, size_t v_stride, int64_t n, int32_t ib,
                  float* acc, size_t a_stride) {
  const int32_t i0 = ib * kQk;
  __m512 a[NH][2];
  #pragma GCC unroll 8
  for (int h = 0; h < NH; ++h) {
    a[h][0] = _mm512_loadu_ps(acc + h * a_stride + i0);
    a[h][1] = _mm512_loadu_ps(acc + h * a_stride + i0 + 16);
  }
  const std::byte* vs = v + ib * sizeof(typename Values::Block);
  for (int64_t s = 0; s < n; ++s, vs += v_stride) {
    __m512 v0, v1;
    Values::load(reinterpret_cast<const typename Values::Block*>(vs), v0, v1);
    #pragma GCC unroll 8
    for (int h = 0; h < NH; ++h) {
      const __m512 ps = _mm512_set1_ps(p[h * p_stride + s]);
      a[h][0] = _mm512_fmadd_ps(ps, v0, a[h][0]);
      a[h][1] = _mm512_fmadd_ps(ps, v1, a[h][1]);
    }
  }
  #pragma GCC unroll 8
  for (int h = 0; h < NH; ++h) {
    _mm512_storeu_ps(acc + h * a_stride + i0, a[h][0]);
    _mm512_storeu_ps(acc + h * a_stride + i0 + 16, a[h][1]);
  }
}

constexpr int kAccumHeads = 8;  // 16 accumulators + 2 values + scale, broadcast, table

// The heads in tiles of at most 8, as attention_avx512.cc's attn_accum_group does (the tiling
// of independent (head, dim) chains does not change any result).
template <typename Values>
void attn_accum_group_q(const float* p, size_t p_stride, const std::byte* v, size_t v_stride, int64_t n,
                        int32_t n_heads, int32_t hd, float* acc, size_t a_stride) {
  for (int32_t ib = 0; ib < hd / kQk; ++ib) {
    for (int32_t h = 0; h < n_heads; h += kAccumHeads) {
      const float* ph = p + h * p_stride;
      float* ah = acc + h * a_stride;
      switch (n_heads - h < kAccumHeads ? n_heads - h : kAccumHeads) {
        case 8: accum_tile_q<8, Values>(ph, p_stride, v, v_stride, n, ib, ah, a_stride); break;
        case 7: accum_tile_q<7, Values>(ph, p_stride, v, v_stride, n, ib, ah, a_stride); break;
        case 6: accum_tile_q<6, Values>(ph, p_stride, v, v_stride, n, ib, ah, a_stride); break;
        case 5: accum_tile_q<5, Values>(ph, p_stride, v, v_stride, n, ib, ah, a_stride); break;
        case 4: accum_tile_q<4, Values>(ph, p_stride, v, v_stride, n, ib, ah, a_stride); break;
        case 3: accum_tile_q<3, Values>(ph, p_stride, v, v_stride, n, ib, ah, a_stride); break;
        case 2: accum_tile_q<2, Values>(ph, p_stride, v, v_stride, n, ib, ah, a_stride); break;
        default: accum_tile_q<1, Values>(ph, p_stride, v, v_stride, n, ib, ah, a_stride); break;
      }
    }
  }
}

}  // namespace

void override_attention_values_avx512(KernelTable& t) {
  t.attn_accum_group_q8_0 = &attn_accum_group_q<ValuesQ8_0>;
  t.attn_accum_group_q4_0 = &attn_accum_group_q<ValuesQ4_0>;
}

}  // namespace lumen::kernels
