// AVX2 matmul kernels for q8_0 and q4_0 weights (against q8_0 activations): the plain GGUF
// layout (vec_dot, gemm) and 8-row interleaved groups (InterleavedKernels, kernel_table.h).
//
// Both follow the scalar reference's arithmetic block by block, so they equal it (and each
// other) bit for bit: an exact int32 sum per block, then sumf += (float)sumi * (d_w * d_x)
// as a separate multiply and add (fp-contract is off in this file).
//
// Why interleave on AVX2: the plain kernel works on one weight row at a time, so every
// block ends in a horizontal sum and two scalar scale products per activation row. In a
// group of 8 rows laid out as below, one 32-byte load holds the same 4 quants of the 8
// rows; maddubs with a broadcast activation dword advances all 8 rows at once, lane r of
// every accumulator is row r (no horizontal sums) and a block's 8 scales are one vector.
// The copy is made once at load (model/interleaved_cache.h), is the size of the GGUF
// tensor, and serves decode (one column) and prefill (many) alike.
#pragma GCC optimize("fp-contract=off")
#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/isa_kernels.h"
#include "kernels/kernel_table.h"
#include "kernels/kernels_isa_common.h"
#include "kernels/quant_blocks.h"

namespace lumen::kernels {
namespace {

constexpr int kRows = 8;  // weight rows per group: one ymm of int32 / f32 lanes

__m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
__m128i load128(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }
__m256i bcast_i32(const void* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof(v));
  return _mm256_set1_epi32(v);
}
__m256 bcast_f32(const void* p) {
  float v;
  std::memcpy(&v, p, sizeof(v));
  return _mm256_set1_ps(v);
}

// int32 lanes, each the sum of 4 products a[i] * b[i] of int8 (b != -128: |a| goes in
// unsigned, b takes a's sign; maddubs pairs stay within 2 * 128 * 127).
__m256i dot_i8(__m256i a, __m256i b) {
  const __m256i p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(a, a), _mm256_sign_epi8(b, a));
  return _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
}

// ---- the plain layout: one weight row against up to kMaxCols activation rows ------------

// The 32 quants of a weight block as signed bytes (q8_0 as stored, q4_0 as q - 8).
template <bool kNibbles>
__m256i block_quants(const std::byte* w, int64_t ib) {
  if constexpr (kNibbles) {
    const __m128i b = load128(reinterpret_cast<const BlockQ4_0*>(w)[ib].qs);
    const __m256i q = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(b, 4), b), _mm256_set1_epi8(15));
    return _mm256_sub_epi8(q, _mm256_set1_epi8(8));
  } else {
    return load256(reinterpret_cast<const BlockQ8_0*>(w)[ib].qs);
  }
}
template <bool kNibbles>
uint16_t block_d(const std::byte* w, int64_t ib) {
  if constexpr (kNibbles) return reinterpret_cast<const BlockQ4_0*>(w)[ib].d_f16;
  return reinterpret_cast<const BlockQ8_0*>(w)[ib].d_f16;
}

// Lane j: the sum of the 8 int32 lanes of v[j] (exact).
__m128i hsum4_i32(const __m256i v[4]) {
  const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
  return _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}

// Kernel::cols<NC> (kernels_isa_common.h). Four blocks at a time: their exact int sums come
// out of one reduction, their scale products d_w * d_x and (float)sumi * d out of one
// vector multiply each, and the four terms are added to the column's sum one by one, in
// block order, as the reference adds them.
template <bool kNibbles>
struct PlainKernel {
  template <int NC>
  static void cols(int64_t n, const std::byte* w, const std::byte* x, size_t xs, float* out) {
    float acc[NC];
    #pragma GCC unroll 4
    for (int c = 0; c < NC; ++c) acc[c] = 0.0f;
    const int64_t nb = n / kQk;
    for (int64_t ib0 = 0; ib0 < nb; ib0 += 4) {
      const int n_blocks = static_cast<int>(std::min<int64_t>(4, nb - ib0));
      __m256i qw[4];
      float dw[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      for (int j = 0; j < n_blocks; ++j) {
        qw[j] = block_quants<kNibbles>(w, ib0 + j);
        dw[j] = _cvtsh_ss(block_d<kNibbles>(w, ib0 + j));
      }
      #pragma GCC unroll 4
      for (int c = 0; c < NC; ++c) {
        const auto* bx = reinterpret_cast<const BlockQ8_0*>(x + c * xs) + ib0;
        __m256i v[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256()};
        float dx[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        for (int j = 0; j < n_blocks; ++j) {
          v[j] = dot_i8(qw[j], load256(bx[j].qs));
          dx[j] = _cvtsh_ss(bx[j].d_f16);
        }
        const __m128 d = _mm_mul_ps(_mm_setr_ps(dw[0], dw[1], dw[2], dw[3]), _mm_setr_ps(dx[0], dx[1], dx[2], dx[3]));
        alignas(16) float t[4];
        _mm_store_ps(t, _mm_mul_ps(_mm_cvtepi32_ps(hsum4_i32(v)), d));
        for (int j = 0; j < n_blocks; ++j) acc[c] += t[j];
      }
    }
    #pragma GCC unroll 4
    for (int c = 0; c < NC; ++c) out[c] = acc[c];
  }
};

// ---- interleaved layouts -------------------------------------------------------------------
//
// A group is 8 rows; per block index ib it holds one "group block" made of the 8 rows'
// blocks ib. [a][r] u32: a-major array of little-endian dwords, r = row 0..7.
//
// q8_0 "q8_0x8", 288 bytes per 32 elements:
//   [g = 0..7][r] u32   qs[4g .. 4g+3] of row r                                     256
//   [r] f16             d                                                            16
// q4_0 "q4_0x8", 144 bytes per 32 elements:
//   [k = 0..3][r] u32   qs[4k .. 4k+3] of row r: low nibbles elements 4k .. 4k+3,
//                       high nibbles elements 16 + 4k .. 16 + 4k + 3                128
//   [r] f16             d                                                            16
constexpr size_t kQ8_0GroupBlock = 288;
constexpr size_t kQ4_0GroupBlock = 144;

template <size_t kGroupBlock>
size_t group_bytes(int64_t n) {
  return static_cast<size_t>(n / kQk) * kGroupBlock;
}

// Packs n_rows rows into groups, group block ib from the 8 rows' blocks ib (rows past
// n_rows repeat the last row). kQuantBytes: quant bytes per block (16 or 32).
template <typename Block, size_t kGroupBlock, int kQuantBytes>
void pack_groups(int64_t n, const std::byte* w, size_t w_stride, int64_t n_rows, std::byte* dst) {
  const int64_t nb = n / kQk;
  for (int64_t r0 = 0; r0 < n_rows; r0 += kRows) {
    std::byte* g = dst + (r0 / kRows) * nb * kGroupBlock;
    for (int r = 0; r < kRows; ++r) {
      const auto* row = reinterpret_cast<const Block*>(w + std::min<int64_t>(r0 + r, n_rows - 1) * w_stride);
      for (int64_t ib = 0; ib < nb; ++ib) {
        std::byte* gb = g + ib * kGroupBlock;
        for (int k = 0; k < kQuantBytes / 4; ++k) std::memcpy(gb + 32 * k + 4 * r, row[ib].qs + 4 * k, 4);
        std::memcpy(gb + 8 * kQuantBytes + 2 * r, &row[ib].d_f16, 2);
      }
    }
  }
}

// Side data of a q8_0 activation row, per block ib (8 bytes): f32 d_x, int32 -8 * sum(q_x)
// for q4_0 (its weights go in as unsigned nibbles, q - 8 = q + (-8)), 0 for q8_0.
size_t q8_side_bytes(int64_t n) { return static_cast<size_t>(n / kQk) * 8; }
template <bool kNibbles>
void prepare_side(const std::byte* xq, int64_t n, std::byte* side) {
  const auto* bx = reinterpret_cast<const BlockQ8_0*>(xq);
  for (int64_t ib = 0; ib < n / kQk; ++ib) {
    int32_t corr = 0;
    if constexpr (kNibbles) {
      const __m256i p16 = _mm256_maddubs_epi16(_mm256_set1_epi8(1), load256(bx[ib].qs));
      const __m256i s8 = _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
      __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s8), _mm256_extracti128_si256(s8, 1));
      s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, _MM_SHUFFLE(1, 0, 3, 2)));
      s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, _MM_SHUFFLE(2, 3, 0, 1)));
      corr = -8 * _mm_cvtsi128_si32(s4);
    }
    const float d = _cvtsh_ss(bx[ib].d_f16);
    std::memcpy(side + ib * 8, &d, 4);
    std::memcpy(side + ib * 8 + 4, &corr, 4);
  }
}

// One group of 8 rows against C activation rows (x: row c at x + c * xs, side likewise):
// y[c * ys + r] for r < n_rows.
//
// q4_0: the 8 maddubs of a block (4 dwords x low / high nibbles) add up in int16: each
// lane sums 16 products of a nibble (<= 15) and an int8 (>= -128), |sum| <= 30720 < 2^15,
// so the int16 sums are exact. q8_0 products need the sign trick (dot_i8) and int32 sums.
template <bool kNibbles, int C>
void tile(int64_t nb, const std::byte* group, const std::byte* x, size_t xs, const std::byte* side, size_t ss,
          int64_t n_rows, float* y, int64_t ys) {
  constexpr size_t kGroupBlock = kNibbles ? kQ4_0GroupBlock : kQ8_0GroupBlock;
  constexpr size_t kScales = kNibbles ? 128 : 256;
  const __m256i m4 = _mm256_set1_epi8(15);
  const __m256i ones16 = _mm256_set1_epi16(1);
  __m256 acc[C];
  #pragma GCC unroll 8
  for (int c = 0; c < C; ++c) acc[c] = _mm256_setzero_ps();
  for (int64_t ib = 0; ib < nb; ++ib) {
    const std::byte* gb = group + ib * kGroupBlock;
    const std::byte* xb = x + ib * sizeof(BlockQ8_0) + offsetof(BlockQ8_0, qs);
    __m256i s[C];
    if constexpr (kNibbles) {
      __m256i s16[C];
      #pragma GCC unroll 8
      for (int c = 0; c < C; ++c) s16[c] = _mm256_setzero_si256();
      #pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) {
        const __m256i q = load256(gb + 32 * k);
        const __m256i lo = _mm256_and_si256(q, m4);
        const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
        #pragma GCC unroll 8
        for (int c = 0; c < C; ++c) {
          s16[c] = _mm256_add_epi16(s16[c], _mm256_maddubs_epi16(lo, bcast_i32(xb + c * xs + 4 * k)));
          s16[c] = _mm256_add_epi16(s16[c], _mm256_maddubs_epi16(hi, bcast_i32(xb + c * xs + 16 + 4 * k)));
        }
      }
      #pragma GCC unroll 8
      for (int c = 0; c < C; ++c)
        s[c] = _mm256_add_epi32(_mm256_madd_epi16(s16[c], ones16), bcast_i32(side + c * ss + ib * 8 + 4));
    } else {
      #pragma GCC unroll 8
      for (int c = 0; c < C; ++c) s[c] = _mm256_setzero_si256();
      #pragma GCC unroll 8
      for (int g = 0; g < 8; ++g) {
        const __m256i q = load256(gb + 32 * g);
        const __m256i aq = _mm256_sign_epi8(q, q);
        #pragma GCC unroll 8
        for (int c = 0; c < C; ++c) {
          const __m256i p16 = _mm256_maddubs_epi16(aq, _mm256_sign_epi8(bcast_i32(xb + c * xs + 4 * g), q));
          s[c] = _mm256_add_epi32(s[c], _mm256_madd_epi16(p16, ones16));
        }
      }
    }
    const __m256 dw = _mm256_cvtph_ps(load128(gb + kScales));
    #pragma GCC unroll 8
    for (int c = 0; c < C; ++c)
      acc[c] = _mm256_add_ps(acc[c], _mm256_mul_ps(_mm256_cvtepi32_ps(s[c]), _mm256_mul_ps(dw, bcast_f32(side + c * ss + ib * 8))));
  }
  if (n_rows >= kRows) {
    #pragma GCC unroll 8
    for (int c = 0; c < C; ++c) _mm256_storeu_ps(y + c * ys, acc[c]);
  } else {
    const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int32_t>(n_rows)),
                                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    #pragma GCC unroll 8
    for (int c = 0; c < C; ++c) _mm256_maskstore_ps(y + c * ys, mask, acc[c]);
  }
}

// n_rows rows = consecutive groups from `groups`, each against every activation row, kCols
// at a time (the tail by narrower tiles).
template <bool kNibbles, int kCols>
void gemm_groups(int64_t n, const std::byte* groups, int64_t n_rows, const std::byte* x, size_t xs,
                 const std::byte* side, size_t ss, int64_t n_cols, float* y, int64_t ys) {
  constexpr size_t kGroupBlock = kNibbles ? kQ4_0GroupBlock : kQ8_0GroupBlock;
  const int64_t nb = n / kQk;
  const size_t stride = static_cast<size_t>(nb) * kGroupBlock;
  for (int64_t r0 = 0; r0 < n_rows; r0 += kRows) {
    const std::byte* g = groups + (r0 / kRows) * stride;
    const int64_t rows = n_rows - r0;
    int64_t c0 = 0;
    for (; c0 + kCols <= n_cols; c0 += kCols)
      tile<kNibbles, kCols>(nb, g, x + c0 * xs, xs, side + c0 * ss, ss, rows, y + c0 * ys + r0, ys);
    const int64_t rest = n_cols - c0;
    const std::byte* xt = x + c0 * xs;
    const std::byte* st = side + c0 * ss;
    float* yt = y + c0 * ys + r0;
    static_assert(kCols <= 4);
    if (rest == 3) tile<kNibbles, 3>(nb, g, xt, xs, st, ss, rows, yt, ys);
    if (rest == 2) tile<kNibbles, 2>(nb, g, xt, xs, st, ss, rows, yt, ys);
    if (rest == 1) tile<kNibbles, 1>(nb, g, xt, xs, st, ss, rows, yt, ys);
  }
}

template <bool kNibbles>
void fill(MatmulKernels& mk) {
  mk.vec_dot = &vec_dot_cols<PlainKernel<kNibbles>>;
  mk.gemm = &gemm_cols<PlainKernel<kNibbles>>;
  if constexpr (kNibbles) {
    mk.interleaved = {"q4_0x8", kRows, &group_bytes<kQ4_0GroupBlock>, &q8_side_bytes, &prepare_side<true>,
                      &pack_groups<BlockQ4_0, kQ4_0GroupBlock, 16>, &gemm_groups<true, 4>};
  } else {
    mk.interleaved = {"q8_0x8", kRows, &group_bytes<kQ8_0GroupBlock>, &q8_side_bytes, &prepare_side<false>,
                      &pack_groups<BlockQ8_0, kQ8_0GroupBlock, 32>, &gemm_groups<false, 4>};
  }
}

}  // namespace

void mm_q8_0_avx2(MatmulKernels& mk) { fill<false>(mk); }
void mm_q4_0_avx2(MatmulKernels& mk) { fill<true>(mk); }

}  // namespace lumen::kernels
