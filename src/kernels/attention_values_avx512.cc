// AVX-512 P.V of a GQA group straight from q8_0 / q4_0 / f16 V rows (KernelTable::
// attn_values_q8_0 / _q4_0 / _f16, flash_attention.cc's V pass): no dequantize (widening)
// pass into a buffer and no reload of it; each V value is formed in registers and fed to the
// FMAs.
//
// Bit for bit the same table's dequantize_q8_0 / _q4_0 followed by attn_accum_group_f32
// (attention_avx512.cc accum_tile), because every value and every operation is the same:
//   * a V value is the dequantizer's one f32 product d * q (q exact as a float; vcvtph2ps
//     widens d exactly like fp16_to_f32, NaNs aside, whose payload the product then
//     carries the same way);
//   * per (head, dim) the accumulator is the same chain of FMAs p[h][s] * v[s][i] + acc over
//     the keys s in increasing order, started from acc as the caller left it.
// Only where the values come from and how the independent (head, dim) chains are tiled
// change. A 32-dim tile is exactly one block of the row, a 16-dim tile half of one:
//
//   q8_0 block: d | q0 .. q31 (int8)         dims 0-15 = d * q0..q15,  16-31 = d * q16..q31
//   q4_0 block: d | b0 .. b15 (two nibbles)   dims 0-15 = d * (lo(b0..b15) - 8),
//                                             16-31 = d * (hi(b0..b15) - 8)
//
// q4_0's (nibble - 8) comes from a 16-entry table of floats (-8 .. 7) indexed by the nibble
// (vpermps reads only the index's low 4 bits, so the low nibbles need no mask): the same
// exact float that the dequantizer's int -> float conversion gives.
//
// Tiles (measured on Zen 4, 16 keys x 64 dims in L1, against dequantize + accum_group_f32):
// up to 4 heads, heads x 32 dims (2 accumulators per head: few heads need the second chain
// to hide the FMA latency); 5 and more heads, up to 16 heads x 16 dims per tile, so each
// value vector is formed once for every head of the tile. Forming a value costs a multiply
// on the FMA pipes, so once the heads need several tiles (prefill tiles of many rows) the
// dequantize pass, which forms each value once for all of them, wins again: flash attention
// only calls these for up to 12 rows (KernelTable::AttnValuesKernels::max_heads).
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

// The values of one block: half(b, k) = elements 16 k .. 16 k + 15, each d * q (kScaled:
// d is the block's d_f16, widened once per block) or the f16 value widened.
struct ValuesQ8_0 {
  using Block = BlockQ8_0;
  static constexpr bool kScaled = true;
  [[gnu::always_inline]] static __m512 half(const Block* b, __m512 d, int k) {
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b->qs + 16 * k));
    return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)), d);
  }
};

struct ValuesQ4_0 {
  using Block = BlockQ4_0;
  static constexpr bool kScaled = true;
  [[gnu::always_inline]] static __m512 half(const Block* b, __m512 d, int k) {
    const __m512 minus8 = _mm512_setr_ps(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7);
    __m512i q = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b->qs)));
    if (k == 1) q = _mm512_srli_epi32(q, 4);  // high nibbles; the low ones are the index's low 4 bits
    return _mm512_mul_ps(_mm512_permutexvar_ps(q, minus8), d);
  }
};

// An f16 V row read as blocks of 32 values (vcvtph2ps widens exactly, as f16_to_f32 does).
struct ValuesF16 {
  struct Block {
    uint16_t v[kQk];
  };
  static constexpr bool kScaled = false;
  [[gnu::always_inline]] static __m512 half(const Block* b, __m512, int k) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b->v + 16 * k)));
  }
};

// acc[h][i0 .. i0 + 16 W) += sum_s p[h][s] v[s][i0 ..] for NH heads and W = 2 (one block,
// i0 = 32 ib) or W = 1 (half block k of block ib, i0 = 32 ib + 16 k); rows v_stride bytes
// apart.
template <int NH, int W, typename Values>
void accum_tile(const float* p, size_t p_stride, const std::byte* v, size_t v_stride, int64_t n, int32_t ib,
                int k, float* acc, size_t a_stride) {
  const int32_t i0 = ib * kQk + 16 * k;
  __m512 a[NH][W];
  #pragma GCC unroll 16
  for (int h = 0; h < NH; ++h)
    #pragma GCC unroll 2
    for (int w = 0; w < W; ++w) a[h][w] = _mm512_loadu_ps(acc + h * a_stride + i0 + 16 * w);
  const std::byte* vs = v + ib * sizeof(typename Values::Block);
  for (int64_t s = 0; s < n; ++s, vs += v_stride) {
    const auto* b = reinterpret_cast<const typename Values::Block*>(vs);
    __m512 d = _mm512_setzero_ps();
    if constexpr (Values::kScaled) d = scale16(b->d_f16);
    __m512 vv[W];
    #pragma GCC unroll 2
    for (int w = 0; w < W; ++w) vv[w] = Values::half(b, d, W == 2 ? w : k);
    #pragma GCC unroll 16
    for (int h = 0; h < NH; ++h) {
      const __m512 ps = _mm512_set1_ps(p[h * p_stride + s]);
      #pragma GCC unroll 2
      for (int w = 0; w < W; ++w) a[h][w] = _mm512_fmadd_ps(ps, vv[w], a[h][w]);
    }
  }
  #pragma GCC unroll 16
  for (int h = 0; h < NH; ++h)
    #pragma GCC unroll 2
    for (int w = 0; w < W; ++w) _mm512_storeu_ps(acc + h * a_stride + i0 + 16 * w, a[h][w]);
}

constexpr int kWideHeads = 4;  // up to this many heads: heads x 32 dims
constexpr int kMaxHeads = 16;  // heads per 16-dim tile (16 accumulators, values, scale, table)

// Heads [0, n_heads) (1 <= n_heads <= kWideHeads), dims of block ib.
template <typename Values>
void accum_wide(const float* p, size_t p_stride, const std::byte* v, size_t v_stride, int64_t n, int32_t n_heads,
                int32_t ib, float* acc, size_t a_stride) {
  switch (n_heads) {
    case 4: accum_tile<4, 2, Values>(p, p_stride, v, v_stride, n, ib, 0, acc, a_stride); break;
    case 3: accum_tile<3, 2, Values>(p, p_stride, v, v_stride, n, ib, 0, acc, a_stride); break;
    case 2: accum_tile<2, 2, Values>(p, p_stride, v, v_stride, n, ib, 0, acc, a_stride); break;
    default: accum_tile<1, 2, Values>(p, p_stride, v, v_stride, n, ib, 0, acc, a_stride); break;
  }
}

// Heads [0, n_heads) (kWideHeads < n_heads <= kMaxHeads), half k of block ib.
template <typename Values>
void accum_tall(const float* p, size_t p_stride, const std::byte* v, size_t v_stride, int64_t n, int32_t n_heads,
                int32_t ib, int k, float* acc, size_t a_stride) {
  switch (n_heads) {
    case 16: accum_tile<16, 1, Values>(p, p_stride, v, v_stride, n, ib, k, acc, a_stride); break;
    case 15: accum_tile<15, 1, Values>(p, p_stride, v, v_stride, n, ib, k, acc, a_stride); break;
    case 14: accum_tile<14, 1, Values>(p, p_stride, v, v_stride, n, ib, k, acc, a_stride); break;
    case 13: accum_tile<13, 1, Values>(p, p_stride, v, v_stride, n, ib, k, acc, a_stride); break;
    case 12: accum_tile<12, 1, Values>(p, p_stride, v, v_stride, n, ib, k, acc, a_stride); break;
    case 11: accum_tile<11, 1, Values>(p, p_stride, v, v_stride, n, ib, k, acc, a_stride); break;
    case 10: accum_tile<10, 1, Values>(p, p_stride, v, v_stride, n, ib, k, acc, a_stride); break;
    case 9: accum_tile<9, 1, Values>(p, p_stride, v, v_stride, n, ib, k, acc, a_stride); break;
    case 8: accum_tile<8, 1, Values>(p, p_stride, v, v_stride, n, ib, k, acc, a_stride); break;
    case 7: accum_tile<7, 1, Values>(p, p_stride, v, v_stride, n, ib, k, acc, a_stride); break;
    case 6: accum_tile<6, 1, Values>(p, p_stride, v, v_stride, n, ib, k, acc, a_stride); break;
    default: accum_tile<5, 1, Values>(p, p_stride, v, v_stride, n, ib, k, acc, a_stride); break;
  }
}

// Precondition (kernel_table.h): hd % 32 == 0. Any n_heads; more than kMaxHeads go in parts
// as equal as can be (each of more than kWideHeads heads).
template <typename Values>
void attn_accum_group_q(const float* p, size_t p_stride, const std::byte* v, size_t v_stride, int64_t n,
                        int32_t n_heads, int32_t hd, float* acc, size_t a_stride) {
  if (n_heads <= kWideHeads) {
    for (int32_t ib = 0; ib < hd / kQk; ++ib) accum_wide<Values>(p, p_stride, v, v_stride, n, n_heads, ib, acc, a_stride);
    return;
  }
  const int32_t n_parts = (n_heads + kMaxHeads - 1) / kMaxHeads;
  for (int32_t ib = 0; ib < hd / kQk; ++ib) {
    for (int k = 0; k < 2; ++k) {
      for (int32_t part = 0; part < n_parts; ++part) {
        const int32_t h0 = n_heads * part / n_parts, h1 = n_heads * (part + 1) / n_parts;
        accum_tall<Values>(p + h0 * p_stride, p_stride, v, v_stride, n, h1 - h0, ib, k, acc + h0 * a_stride, a_stride);
      }
    }
  }
}

}  // namespace

void override_attention_values_avx512(KernelTable& t) {
  // 16 keys x 64 dims in L1 on Zen 4, against dequantize + attn_accum_group_f32, 3 runs:
  // 1.3-2.8x at 1-8 heads, 0.9-1.2x at 12, 1.0-1.1x at 16, 0.8-1.0x at 28, 0.9x at 56.
  constexpr int32_t kPaysUpTo = 12;
  t.attn_values_q8_0 = {&attn_accum_group_q<ValuesQ8_0>, kPaysUpTo};
  t.attn_values_q4_0 = {&attn_accum_group_q<ValuesQ4_0>, kPaysUpTo};
  // f16 (the values only widened, no multiply), same measurement, best of 5: 2.4x at 1 head,
  // 1.5x at 4, 1.38x at 7, 1.34x at 8, 1.10x at 12, 1.04x at 14, 0.97x at 16 and 28.
  constexpr int32_t kF16PaysUpTo = 14;
  t.attn_values_f16 = {&attn_accum_group_q<ValuesF16>, kF16PaysUpTo};
}

}  // namespace lumen::kernels
