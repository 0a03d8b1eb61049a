// AVX2 matmul kernels for q8_0, q4_0 and q5_0 weights (against q8_0 activations) and q4_K, q5_K, q6_K
// (against q8_K): the plain GGUF layout (vec_dot, gemm) and 8-row interleaved groups
// (InterleavedKernels, kernel_table.h), and the q8_K activation quantizer they read.
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
#include <type_traits>
#include <utility>

#include "kernels/iq_simd.h"
#include "kernels/isa_kernels.h"
#include "kernels/kernel_table.h"
#include "kernels/kernels_isa_common.h"
#include "kernels/math_avx2.h"
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

// Sums of the int32 lanes (exact).
int32_t hsum_i32(__m128i s) {
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(s);
}
int32_t hsum_i32(__m256i v) { return hsum_i32(_mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1))); }

// v shifted left by `left` bits per 16-bit lane (right by -left when negative). Bit b of a
// byte lands at b + left of the same byte when 0 <= b + left < 8 (bits leaving the byte are
// masked away by the callers).
[[gnu::always_inline]] inline __m256i shift_epi16(__m256i v, int left) {
  return left >= 0 ? _mm256_slli_epi16(v, left) : _mm256_srli_epi16(v, -left);
}

// ---- the plain layout: one weight row against up to kMaxCols activation rows ------------

// The 32 quants of a weight block as signed bytes (q8_0 as stored, q4_0 as q - 8, q5_0 as
// q - 16).
template <typename Block>
__m256i block_quants(const std::byte* w, int64_t ib) {
  const Block& b = reinterpret_cast<const Block*>(w)[ib];
  if constexpr (std::is_same_v<Block, BlockQ8_0>) {
    return load256(b.qs);
  } else {
    const __m128i lo = load128(b.qs);
    const __m256i q = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(lo, 4), lo), _mm256_set1_epi8(15));
    if constexpr (std::is_same_v<Block, BlockQ4_0>) {
      return _mm256_sub_epi8(q, _mm256_set1_epi8(8));
    } else {
      static_assert(std::is_same_v<Block, BlockQ5_0>);
      const __m256i q5 = _mm256_or_si256(q, _mm256_and_si256(bytes_from_bits(b.qh), _mm256_set1_epi8(16)));
      return _mm256_sub_epi8(q5, _mm256_set1_epi8(16));
    }
  }
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
template <typename Block>
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
        qw[j] = block_quants<Block>(w, ib0 + j);
        dw[j] = _cvtsh_ss(reinterpret_cast<const Block*>(w)[ib0 + j].d_f16);
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

// q4_K / q5_K against q8_K in the plain layout (ref::vec_dot_q4_k_q8_k / _q5_k_): per block
// the exact sumi = sum_s sc[s] * (q . q8 over s) and summ = sum_s m[s] * bsum[s], then
// acc += (d_x * d_w) * (float)sumi, acc_m += (-d_x * dmin_w) * (float)summ; result acc + acc_m.
// q5_K's fifth bit of element 32s + l is bit s of qh[l].
template <typename Block>
struct PlainKMinKernel {
  template <int NC>
  static void cols(int64_t n, const std::byte* w, const std::byte* x, size_t xs, float* out) {
    constexpr bool kQ5 = std::is_same_v<Block, BlockQ5_K>;
    const auto* bw = reinterpret_cast<const Block*>(w);
    const __m256i m4 = _mm256_set1_epi8(15), b4 = _mm256_set1_epi8(16);
    float acc[NC], acc_m[NC];
    #pragma GCC unroll 4
    for (int c = 0; c < NC; ++c) acc[c] = acc_m[c] = 0.0f;
    for (int64_t ib = 0; ib < n / kQkK; ++ib) {
      const Block& b = bw[ib];
      uint8_t sc[8], mn[8];
      unpack_q4_k_scales(b.scales, sc, mn);
      const __m128i mins = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(mn)));
      const float dw = _cvtsh_ss(b.d_f16), dminw = _cvtsh_ss(b.dmin_f16);
      __m256i sumi[NC];
      #pragma GCC unroll 4
      for (int c = 0; c < NC; ++c) sumi[c] = _mm256_setzero_si256();
      for (int j = 0; j < 4; ++j) {
        const __m256i q4 = load256(b.qs + 32 * j);
        __m256i q4l = _mm256_and_si256(q4, m4);
        __m256i q4h = _mm256_and_si256(_mm256_srli_epi16(q4, 4), m4);
        if constexpr (kQ5) {
          const __m256i qh = load256(b.qh);  // bit s of byte l -> bit 4: shift the 16-bit lanes
          q4l = _mm256_or_si256(q4l, _mm256_and_si256(shift_epi16(qh, 4 - 2 * j), b4));
          q4h = _mm256_or_si256(q4h, _mm256_and_si256(shift_epi16(qh, 3 - 2 * j), b4));
        }
        const __m256i scl = _mm256_set1_epi16(sc[2 * j]);
        const __m256i sch = _mm256_set1_epi16(sc[2 * j + 1]);
        #pragma GCC unroll 4
        for (int c = 0; c < NC; ++c) {
          const int8_t* q8 = reinterpret_cast<const BlockQ8_K*>(x + c * xs)[ib].qs + 64 * j;
          const __m256i pl = _mm256_madd_epi16(scl, _mm256_maddubs_epi16(q4l, load256(q8)));
          const __m256i ph = _mm256_madd_epi16(sch, _mm256_maddubs_epi16(q4h, load256(q8 + 32)));
          sumi[c] = _mm256_add_epi32(sumi[c], _mm256_add_epi32(pl, ph));
        }
      }
      #pragma GCC unroll 4
      for (int c = 0; c < NC; ++c) {
        const BlockQ8_K& bx = reinterpret_cast<const BlockQ8_K*>(x + c * xs)[ib];
        // Sub-block sums of the activations from bsums (pairs of 16 -> 8 sums of 32).
        const __m128i q8s = _mm_hadd_epi16(load128(bx.bsums), load128(bx.bsums + 8));
        const __m128i prod = _mm_madd_epi16(mins, q8s);
        const int32_t summ = hsum_i32(prod);
        acc[c] += (bx.d * dw) * static_cast<float>(hsum_i32(sumi[c]));
        acc_m[c] += (-bx.d * dminw) * static_cast<float>(summ);
      }
    }
    #pragma GCC unroll 4
    for (int c = 0; c < NC; ++c) out[c] = acc[c] + acc_m[c];
  }
};

// q6_K against q8_K in the plain layout (ref::vec_dot_q6_k_q8_k): per block the exact
// sumi = sum_s scales[s] * ((q6 - 32) . q8 over s), then acc += (d_x * d_w) * (float)sumi.
// The q6 values go in unsigned (maddubs; a pair is at most 2 * 63 * 128 = 16128), the
// offset as 32 * sum_s scales[s] * bsum[s].
struct PlainQ6_KKernel {
  // The q6 values of one half (128 elements) as 4 x 32 unsigned bytes 0..63: quarter k
  // holds elements 32k .. 32k + 31 of the half (see BlockQ6_K).
  static void unpack_half(const uint8_t* ql, const uint8_t* qh, __m256i q[4]) {
    const __m256i m4 = _mm256_set1_epi8(15), m2 = _mm256_set1_epi8(3);
    const __m256i l1 = load256(ql), l2 = load256(ql + 32), h = load256(qh);
    const __m256i h0 = _mm256_slli_epi16(_mm256_and_si256(h, m2), 4);
    const __m256i h1 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 2), m2), 4);
    const __m256i h2 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 4), m2), 4);
    const __m256i h3 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 6), m2), 4);
    q[0] = _mm256_or_si256(_mm256_and_si256(l1, m4), h0);
    q[1] = _mm256_or_si256(_mm256_and_si256(l2, m4), h1);
    q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4), h2);
    q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l2, 4), m4), h3);
  }

  template <int NC>
  static void cols(int64_t n, const std::byte* w, const std::byte* x, size_t xs, float* out) {
    const auto* bw = reinterpret_cast<const BlockQ6_K*>(w);
    float acc[NC];
    #pragma GCC unroll 4
    for (int c = 0; c < NC; ++c) acc[c] = 0.0f;
    for (int64_t ib = 0; ib < n / kQkK; ++ib) {
      const BlockQ6_K& b = bw[ib];
      const __m256i scales16 = _mm256_cvtepi8_epi16(load128(b.scales));
      __m256i sumi[NC];
      #pragma GCC unroll 4
      for (int c = 0; c < NC; ++c) sumi[c] = _mm256_setzero_si256();
      for (int h = 0; h < 2; ++h) {
        __m256i q[4];
        unpack_half(b.ql + 64 * h, b.qh + 32 * h, q);
        #pragma GCC unroll 4
        for (int k = 0; k < 4; ++k) {
          const int s = 8 * h + 2 * k;  // sub-blocks s (bytes 0..15), s + 1 (bytes 16..31)
          const __m256i sv = _mm256_set_m128i(_mm_set1_epi16(b.scales[s + 1]), _mm_set1_epi16(b.scales[s]));
          #pragma GCC unroll 4
          for (int c = 0; c < NC; ++c) {
            const int8_t* q8 = reinterpret_cast<const BlockQ8_K*>(x + c * xs)[ib].qs + 128 * h + 32 * k;
            sumi[c] = _mm256_add_epi32(sumi[c], _mm256_madd_epi16(sv, _mm256_maddubs_epi16(q[k], load256(q8))));
          }
        }
      }
      const float dw = _cvtsh_ss(b.d_f16);
      #pragma GCC unroll 4
      for (int c = 0; c < NC; ++c) {
        const BlockQ8_K& bx = reinterpret_cast<const BlockQ8_K*>(x + c * xs)[ib];
        const __m256i offset = _mm256_slli_epi32(_mm256_madd_epi16(load256(bx.bsums), scales16), 5);
        acc[c] += (bx.d * dw) * static_cast<float>(hsum_i32(_mm256_sub_epi32(sumi[c], offset)));
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
// q5_0 "q5_0x8t", 176 bytes per 32 elements (the size of the 8 GGUF blocks):
//   [k = 0..3][r] u32   qs[4k .. 4k+3] of row r, as q4_0x8                           128
//   [r] u32             row r's qh transposed: bit 8j + p = the fifth bit of
//                       element 4p + j (j = 0..3, p = 0..7)                           32
//   [r] f16             d                                                            16
// q4_K "q4_Kx8", 1184 bytes per 256 elements (+2.8%: the 6-bit scales stored as bytes):
//   [c = 0..3][k = 0..7][r] u32  qs[32c + 4k .. 32c + 4k + 3] of row r: low nibbles
//                       elements 64c + 4k .. (sub-block 2c), high 64c + 32 + 4k ..     1024
//   [s = 0..7][r] u8    sc[s]                                                         64
//   [t = 0..3][r] u8 x 2   m[2t], m[2t + 1]                                           64
//   [r] f16 d, [r] f16 dmin                                                            32
// q5_K "q5_Kx8", 1440 bytes per 256 elements (+2.3%):
//   the q4_Kx8 group block (qs low nibbles, sc, m, d, dmin)                          1184
//   [s = 0..7][r] u32  the fifth bits of sub-block s of row r: bit 8j + k = that of
//                      element 32s + 4k + j (j = 0..3, k = 0..7)                       256
// iq4_xs "iq4_xsx8", 1104 bytes per 256 elements (+1.5%):
//   [b = 0..7][k = 0..3][r] u32  qs[16b + 4k .. 16b + 4k + 3] of row r: low nibbles the
//                       codes of elements 32b + 4k .., high nibbles 32b + 16 + 4k ..   1024
//   [b][r] i8           ls[b] - 32, sub-block b's scale                                 64
//   [r] f16 d                                                                           16
// q6_K "q6_Kx8p", 1680 bytes per 256 elements (the size of the 8 GGUF blocks):
//   [h = 0..1][k = 0..7] { [r] u32 P, [r] u32 Q, [r] u32 R }                          1536
//   [t = 0..7][r] i8 x 2   scales[2t], scales[2t + 1]                                  128
//   [r] f16 d                                                                           16
//   Byte j of row r's P, Q, R holds the 6-bit quants q0..q3 (0..63) of the four quarters
//   qi of half h at element 128h + 32qi + 4k + j (sub-block 8h + 2qi + k / 4): P = q0 |
//   (q3 >> 4) << 6, Q = q1 | ((q3 >> 2) & 3) << 6, R = q2 | (q3 & 3) << 6. Three quarters
//   are one AND each, the fourth gathers its three bit pairs (q6_k_unpack): 11 vector ops
//   for the 4 x 32 quants instead of 17 from GGUF's ql / qh split.
constexpr size_t kQ8_0GroupBlock = 288;
constexpr size_t kQ4_0GroupBlock = 144;
constexpr size_t kQ5_0GroupBlock = 176;
constexpr size_t kQ4_KGroupBlock = 1184;
constexpr size_t kQ5_KGroupBlock = 1440;
constexpr size_t kIQ4_XSGroupBlock = 1104;
constexpr size_t kQ6_KGroupBlock = 1680;

template <size_t kGroupBlock, int kBlock>
size_t group_bytes(int64_t n) {
  return static_cast<size_t>(n / kBlock) * kGroupBlock;
}

// Packs n_rows rows into groups: fill(row, r, ib, gb) writes row r's part of group block
// ib from `row` (rows past n_rows repeat the last row).
template <typename Block, size_t kGroupBlock, int kBlock, typename Fill>
void pack_groups(int64_t n, const std::byte* w, size_t w_stride, int64_t n_rows, std::byte* dst, Fill fill) {
  const int64_t nb = n / kBlock;
  for (int64_t r0 = 0; r0 < n_rows; r0 += kRows) {
    std::byte* g = dst + (r0 / kRows) * nb * kGroupBlock;
    for (int r = 0; r < kRows; ++r) {
      const auto* row = reinterpret_cast<const Block*>(w + std::min<int64_t>(r0 + r, n_rows - 1) * w_stride);
      for (int64_t ib = 0; ib < nb; ++ib) fill(row[ib], r, g + ib * kGroupBlock);
    }
  }
}

// q8_0 / q4_0: kQuantBytes (32 or 16) quant bytes, then d.
template <typename Block, size_t kGroupBlock, int kQuantBytes>
void pack_q8(int64_t n, const std::byte* w, size_t w_stride, int64_t n_rows, std::byte* dst) {
  pack_groups<Block, kGroupBlock, kQk>(n, w, w_stride, n_rows, dst, [](const Block& b, int r, std::byte* gb) {
    for (int k = 0; k < kQuantBytes / 4; ++k) std::memcpy(gb + 32 * k + 4 * r, b.qs + 4 * k, 4);
    std::memcpy(gb + 8 * kQuantBytes + 2 * r, &b.d_f16, 2);
  });
}

void pack_q5_0(int64_t n, const std::byte* w, size_t w_stride, int64_t n_rows, std::byte* dst) {
  pack_groups<BlockQ5_0, kQ5_0GroupBlock, kQk>(n, w, w_stride, n_rows, dst, [](const BlockQ5_0& b, int r, std::byte* gb) {
    for (int k = 0; k < 4; ++k) std::memcpy(gb + 32 * k + 4 * r, b.qs + 4 * k, 4);
    uint32_t qh, t = 0;
    std::memcpy(&qh, b.qh, 4);
    for (int e = 0; e < kQk; ++e) t |= ((qh >> e) & 1u) << (8 * (e % 4) + e / 4);
    std::memcpy(gb + 128 + 4 * r, &t, 4);
    std::memcpy(gb + 160 + 2 * r, &b.d_f16, 2);
  });
}

// q4_Kx8 / q5_Kx8: the quant nibbles, the unpacked scales and mins, d and dmin; q5_K's
// fifth bits transposed after them.
template <typename Block>
void pack_kmin(int64_t n, const std::byte* w, size_t w_stride, int64_t n_rows, std::byte* dst) {
  constexpr size_t kGroupBlock = std::is_same_v<Block, BlockQ5_K> ? kQ5_KGroupBlock : kQ4_KGroupBlock;
  pack_groups<Block, kGroupBlock, kQkK>(n, w, w_stride, n_rows, dst, [](const Block& b, int r, std::byte* gb) {
    for (int i = 0; i < 32; ++i) std::memcpy(gb + 32 * i + 4 * r, b.qs + 4 * i, 4);  // i = 8c + k
    uint8_t sc[8], mn[8];
    unpack_q4_k_scales(b.scales, sc, mn);
    for (int s = 0; s < 8; ++s) {
      gb[1024 + 8 * s + r] = static_cast<std::byte>(sc[s]);
      gb[1088 + 16 * (s / 2) + 2 * r + s % 2] = static_cast<std::byte>(mn[s]);
      if constexpr (std::is_same_v<Block, BlockQ5_K>) {
        uint32_t t = 0;
        for (int l = 0; l < 32; ++l) t |= ((b.qh[l] >> s) & 1u) << (8 * (l % 4) + l / 4);
        std::memcpy(gb + 1184 + 32 * s + 4 * r, &t, 4);
      }
    }
    std::memcpy(gb + 1152 + 2 * r, &b.d_f16, 2);
    std::memcpy(gb + 1168 + 2 * r, &b.dmin_f16, 2);
  });
}

void pack_iq4_xs(int64_t n, const std::byte* w, size_t w_stride, int64_t n_rows, std::byte* dst) {
  pack_groups<BlockIQ4_XS, kIQ4_XSGroupBlock, kQkK>(n, w, w_stride, n_rows, dst, [](const BlockIQ4_XS& b, int r, std::byte* gb) {
    for (int i = 0; i < 32; ++i) std::memcpy(gb + 32 * i + 4 * r, b.qs + 4 * i, 4);  // i = 4b + k
    int16_t sc[16];
    WidenIQ4_XS::scales(b, sc);
    for (int sb = 0; sb < 8; ++sb) gb[1024 + 8 * sb + r] = static_cast<std::byte>(static_cast<int8_t>(sc[2 * sb]));
    std::memcpy(gb + 1088 + 2 * r, &b.d_f16, 2);
  });
}

void pack_q6_k(int64_t n, const std::byte* w, size_t w_stride, int64_t n_rows, std::byte* dst) {
  pack_groups<BlockQ6_K, kQ6_KGroupBlock, kQkK>(n, w, w_stride, n_rows, dst, [](const BlockQ6_K& b, int r, std::byte* gb) {
    for (int h = 0; h < 2; ++h) {
      for (int k = 0; k < 8; ++k) {
        std::byte* p = gb + (8 * h + k) * 96 + 4 * r;
        for (int j = 0; j < 4; ++j) {
          uint8_t pqr[3];
          q6_k_pqr(b, h, 4 * k + j, pqr);
          for (int i = 0; i < 3; ++i) p[32 * i + j] = static_cast<std::byte>(pqr[i]);
        }
      }
    }
    for (int t = 0; t < 8; ++t) std::memcpy(gb + 1536 + 16 * t + 2 * r, b.scales + 2 * t, 2);
    std::memcpy(gb + 1664 + 2 * r, &b.d_f16, 2);
  });
}

// Side data of a q8_0 activation row, per block ib (8 bytes): f32 d_x, int32
// -kOffset * sum(q_x): the weights go in unsigned, q - kOffset (q4_0: 8, q5_0: 16, q8_0: 0).
size_t q8_side_bytes(int64_t n) { return static_cast<size_t>(n / kQk) * 8; }
template <int kOffset>
void prepare_side_q8(const std::byte* xq, int64_t n, std::byte* side) {
  const auto* bx = reinterpret_cast<const BlockQ8_0*>(xq);
  for (int64_t ib = 0; ib < n / kQk; ++ib) {
    int32_t corr = 0;
    if constexpr (kOffset != 0) {
      const __m256i p16 = _mm256_maddubs_epi16(_mm256_set1_epi8(1), load256(bx[ib].qs));
      corr = -kOffset * hsum_i32(_mm256_madd_epi16(p16, _mm256_set1_epi16(1)));
    }
    const float d = _cvtsh_ss(bx[ib].d_f16);
    std::memcpy(side + ib * 8, &d, 4);
    std::memcpy(side + ib * 8 + 4, &corr, 4);
  }
}

// Side data of a q8_K activation row for q4_K, per block (16 bytes): [t = 0..3] int16 pairs
// (bsum[2t], bsum[2t + 1]), bsum[s] = the sum of the 32 quants of sub-block s (|.| <= 4096).
size_t q4_k_side_bytes(int64_t n) { return static_cast<size_t>(n / kQkK) * 16; }
void prepare_side_q4_k(const std::byte* xq, int64_t n, std::byte* side) {
  const auto* bx = reinterpret_cast<const BlockQ8_K*>(xq);
  for (int64_t ib = 0; ib < n / kQkK; ++ib)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(side + ib * 16),
                     _mm_hadd_epi16(load128(bx[ib].bsums), load128(bx[ib].bsums + 8)));
}

// Side data of a q8_K activation row for iq4_xs: |q| of every quant (256 bytes per block),
// the unsigned operand of maddubs (the weights' values carry the activations' signs).
size_t iq4_xs_side_bytes(int64_t n) { return static_cast<size_t>(n); }
void prepare_side_iq4_xs(const std::byte* xq, int64_t n, std::byte* side) {
  const auto* bx = reinterpret_cast<const BlockQ8_K*>(xq);
  for (int64_t ib = 0; ib < n / kQkK; ++ib)
    for (int k = 0; k < kQkK / 32; ++k) {
      const __m256i q = load256(bx[ib].qs + 32 * k);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(side + ib * kQkK + 32 * k), _mm256_sign_epi8(q, q));
    }
}

// ---- group tiles: one group of 8 rows against C activation rows -----------------------------
//
// Tile<C>::run(nb, group, x, xs, side, ss, n_rows, y, ys): x row c at x + c * xs (side
// likewise); writes y[c * ys + r] for r < min(n_rows, 8).

template <int C>
[[gnu::always_inline]] inline void store_rows(const __m256* acc, int64_t n_rows, float* y, int64_t ys) {
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

// Software prefetch of the weights kPrefetchAhead bytes ahead, one group block's worth per
// block step. A thread's groups are one contiguous run, but the hardware prefetchers alone
// keep too few lines in flight for one core to stream at its share of the bandwidth
// (measured, 1 column, 75 MB of q4_K, 1 thread: 10.8 GB/s without, 15.4 with 2.3 KB ahead
// into L1; 2 threads 17 -> 25 GB/s). Past the end of the weights it touches nothing:
// prefetches never fault.
constexpr size_t kPrefetchAhead = 2368;
template <size_t kGroupBlock>
[[gnu::always_inline]] inline void prefetch_ahead(const std::byte* gb) {
  #pragma GCC unroll 32
  for (size_t off = 0; off < kGroupBlock; off += 64)
    _mm_prefetch(reinterpret_cast<const char*>(gb + kPrefetchAhead + off), _MM_HINT_T0);
}

// The 1-column (decode) tiles prefetch further ahead and spread the lines over a block's
// steps instead of a burst at its start: step `step` of kSteps touches its share of the
// group block's lines kPrefetchAheadCol bytes ahead. With the burst 2.3 KB ahead, the
// block's last lines (its scales) were often still missing when read (perf annotate: a
// quarter of the q4_K tile's samples on the scale loads). Out of cache, 2 threads
// (docs/perf.md, "1-column tiles: prefetch spread 8 KB ahead"): q4_K from 80% to 96% of a
// summing read of the same bytes, q5_K 83% -> 107%, q6_K 87% -> 93%.
constexpr size_t kPrefetchAheadCol = 8192;
template <size_t kGroupBlock, int kSteps>
[[gnu::always_inline]] inline void prefetch_col_step(const std::byte* gb, int step) {
  constexpr int kLines = static_cast<int>((kGroupBlock + 63) / 64);  // gb need not be line-aligned
  constexpr int kPerStep = (kLines + kSteps - 1) / kSteps;
  const char* p = reinterpret_cast<const char*>(gb) + kPrefetchAheadCol + 64 * kPerStep * step;
  #pragma GCC unroll 8
  for (int i = 0; i < kPerStep; ++i)
    if (kPerStep * step + i < kLines) _mm_prefetch(p + 64 * i, _MM_HINT_T0);
}

// Keeps v in a register at this point of the program. The tiles' int sums are chains of
// integer adds, which GCC may reassociate: it then sums all of a block's products of all
// columns as one tree at the end, with every product live at once, and spills most of
// them to the stack (q4_0, 4 columns: 32 ymm stores and reloads per block, a third of the
// tile's time). Pinning each partial sum once per step keeps the sums in source order.
#define LUMEN_PIN_REG(v) __asm__("" : "+x"(v))

// q8_0 / q4_0: acc += (float)sumi * (d_w * d_x) per block.
//
// q4_0: the 8 maddubs of a block (4 dwords x low / high nibbles) add up in int16: each
// lane sums 16 products of a nibble (<= 15) and an int8 (>= -128), |sum| <= 30720 < 2^15,
// so the int16 sums are exact. q8_0 products need the sign trick (dot_i8) and int32 sums.
// Each step unpacks a dword of the 8 rows once and meets all C columns with it (one
// broadcast activation dword per maddubs).
template <bool kNibbles, int C>
void tile_q8(int64_t nb, const std::byte* group, const std::byte* x, size_t xs, const std::byte* side, size_t ss,
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
    prefetch_ahead<kGroupBlock>(gb);
    __m256i s[C];
    if constexpr (kNibbles) {
      __m256i s16[C];
      #pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) {
        const __m256i q = load256(gb + 32 * k);
        const __m256i lo = _mm256_and_si256(q, m4);
        const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
        #pragma GCC unroll 8
        for (int c = 0; c < C; ++c) {
          const std::byte* xc = xb + c * xs + 4 * k;
          const __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(lo, bcast_i32(xc)), _mm256_maddubs_epi16(hi, bcast_i32(xc + 16)));
          s16[c] = k == 0 ? p : _mm256_add_epi16(s16[c], p);
          LUMEN_PIN_REG(s16[c]);
        }
      }
      #pragma GCC unroll 8
      for (int c = 0; c < C; ++c)
        s[c] = _mm256_add_epi32(_mm256_madd_epi16(s16[c], ones16), bcast_i32(side + c * ss + ib * 8 + 4));
    } else {
      #pragma GCC unroll 4
      for (int g = 0; g < 8; g += 2) {
        const __m256i q0 = load256(gb + 32 * g), q1 = load256(gb + 32 * g + 32);
        const __m256i aq0 = _mm256_sign_epi8(q0, q0), aq1 = _mm256_sign_epi8(q1, q1);
        #pragma GCC unroll 8
        for (int c = 0; c < C; ++c) {
          const std::byte* xc = xb + c * xs + 4 * g;
          const __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(aq0, _mm256_sign_epi8(bcast_i32(xc), q0)), ones16);
          const __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(aq1, _mm256_sign_epi8(bcast_i32(xc + 4), q1)), ones16);
          const __m256i p = _mm256_add_epi32(p0, p1);
          s[c] = g == 0 ? p : _mm256_add_epi32(s[c], p);
          LUMEN_PIN_REG(s[c]);
        }
      }
    }
    const __m256 dw = _mm256_cvtph_ps(load128(gb + kScales));
    #pragma GCC unroll 8
    for (int c = 0; c < C; ++c)
      acc[c] = _mm256_add_ps(acc[c], _mm256_mul_ps(_mm256_cvtepi32_ps(s[c]), _mm256_mul_ps(dw, bcast_f32(side + c * ss + ib * 8))));
  }
  store_rows<C>(acc, n_rows, y, ys);
}

// q4_0, two groups (16 rows, the second kGroupStride bytes after the first) against C
// columns: each broadcast activation dword meets both groups' nibbles, so a block costs
// half the broadcasts of two tile_q8 calls. Step kh = 0..7 is dword kh & 3, low nibbles
// for kh < 4, high after; the int16 sums are tile_q8's (16 products per lane, exact) and
// the float steps per row and block the same, so each row's result is bit for bit
// tile_q8's. The second group may be short: rows past n_rows are not stored.
template <int C>
void tile_q4_0_pair(int64_t nb, const std::byte* group, size_t group_stride, const std::byte* x, size_t xs,
                    const std::byte* side, size_t ss, int64_t n_rows, float* y, int64_t ys) {
  const __m256i m4 = _mm256_set1_epi8(15);
  const __m256i ones16 = _mm256_set1_epi16(1);
  __m256 acc[2][C];
  #pragma GCC unroll 8
  for (int c = 0; c < C; ++c) acc[0][c] = acc[1][c] = _mm256_setzero_ps();
  for (int64_t ib = 0; ib < nb; ++ib) {
    const std::byte* gb[2] = {group + ib * kQ4_0GroupBlock, group + group_stride + ib * kQ4_0GroupBlock};
    const std::byte* xb = x + ib * sizeof(BlockQ8_0) + offsetof(BlockQ8_0, qs);
    prefetch_ahead<kQ4_0GroupBlock>(gb[0]);
    prefetch_ahead<kQ4_0GroupBlock>(gb[1]);
    __m256i s16[2][C];
    #pragma GCC unroll 8
    for (int kh = 0; kh < 8; ++kh) {
      __m256i w[2];
      #pragma GCC unroll 2
      for (int g = 0; g < 2; ++g) {
        const __m256i q = load256(gb[g] + 32 * (kh & 3));
        w[g] = _mm256_and_si256(kh < 4 ? q : _mm256_srli_epi16(q, 4), m4);
      }
      #pragma GCC unroll 8
      for (int c = 0; c < C; ++c) {
        const __m256i xv = bcast_i32(xb + c * xs + 4 * kh);  // element 4kh: low nibbles 0..15, high 16..31
        #pragma GCC unroll 2
        for (int g = 0; g < 2; ++g) {
          const __m256i p = _mm256_maddubs_epi16(w[g], xv);
          s16[g][c] = kh == 0 ? p : _mm256_add_epi16(s16[g][c], p);
          LUMEN_PIN_REG(s16[g][c]);
        }
      }
    }
    const __m256 dw[2] = {_mm256_cvtph_ps(load128(gb[0] + 128)), _mm256_cvtph_ps(load128(gb[1] + 128))};
    #pragma GCC unroll 8
    for (int c = 0; c < C; ++c) {
      const __m256i corr = bcast_i32(side + c * ss + ib * 8 + 4);
      const __m256 dx = bcast_f32(side + c * ss + ib * 8);
      #pragma GCC unroll 2
      for (int g = 0; g < 2; ++g) {
        const __m256i si = _mm256_add_epi32(_mm256_madd_epi16(s16[g][c], ones16), corr);
        acc[g][c] = _mm256_add_ps(acc[g][c], _mm256_mul_ps(_mm256_cvtepi32_ps(si), _mm256_mul_ps(dw[g], dx)));
      }
    }
  }
  store_rows<C>(acc[0], kRows, y, ys);
  store_rows<C>(acc[1], n_rows - kRows, y + kRows, ys);
}

// q5_0: as q4_0 with the fifth bits. In the transposed qh dword, element 4k + j's bit is
// bit k of byte j and element 16 + 4k + j's bit 4 + k of byte j: one shift of the dword
// brings either to bit 4 of every byte j (bits shifted in from the next byte land below or
// above it), a mask keeps it, and it joins the nibble as 16. The quants are
// then 0..31 unsigned (side data: -16 * sum(q_x)); 4 maddubs add up in int16 (8 products
// of at most 31 * 128: 31744 < 2^15), so low and high nibbles keep one int16 sum each.
template <int C>
void tile_q5_0(int64_t nb, const std::byte* group, const std::byte* x, size_t xs, const std::byte* side, size_t ss,
               int64_t n_rows, float* y, int64_t ys) {
  const __m256i m4 = _mm256_set1_epi8(15), b4 = _mm256_set1_epi8(16), ones16 = _mm256_set1_epi16(1);
  __m256 acc[C];
  #pragma GCC unroll 8
  for (int c = 0; c < C; ++c) acc[c] = _mm256_setzero_ps();
  for (int64_t ib = 0; ib < nb; ++ib) {
    const std::byte* gb = group + ib * kQ5_0GroupBlock;
    const std::byte* xb = x + ib * sizeof(BlockQ8_0) + offsetof(BlockQ8_0, qs);
    prefetch_ahead<kQ5_0GroupBlock>(gb);
    const __m256i qh = load256(gb + 128);
    __m256i lo16[C], hi16[C];
    #pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
      const __m256i q = load256(gb + 32 * k);
      const __m256i lo = _mm256_or_si256(_mm256_and_si256(q, m4), _mm256_and_si256(_mm256_slli_epi32(qh, 4 - k), b4));
      const __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), m4), _mm256_and_si256(_mm256_srli_epi32(qh, k), b4));
      #pragma GCC unroll 8
      for (int c = 0; c < C; ++c) {
        const __m256i pl = _mm256_maddubs_epi16(lo, bcast_i32(xb + c * xs + 4 * k));
        const __m256i ph = _mm256_maddubs_epi16(hi, bcast_i32(xb + c * xs + 16 + 4 * k));
        lo16[c] = k == 0 ? pl : _mm256_add_epi16(lo16[c], pl);
        hi16[c] = k == 0 ? ph : _mm256_add_epi16(hi16[c], ph);
        LUMEN_PIN_REG(lo16[c]);
        LUMEN_PIN_REG(hi16[c]);
      }
    }
    const __m256 dw = _mm256_cvtph_ps(load128(gb + 160));
    #pragma GCC unroll 8
    for (int c = 0; c < C; ++c) {
      const __m256i s = _mm256_add_epi32(_mm256_add_epi32(_mm256_madd_epi16(lo16[c], ones16), _mm256_madd_epi16(hi16[c], ones16)),
                                         bcast_i32(side + c * ss + ib * 8 + 4));
      acc[c] = _mm256_add_ps(acc[c], _mm256_mul_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(dw, bcast_f32(side + c * ss + ib * 8))));
    }
  }
  store_rows<C>(acc, n_rows, y, ys);
}

// The 8 rows' 6-bit scale s of a q4_Kx8 group block as int16 pairs (sc, sc) per dword, so
// that madd_epi16(sums, pair) = sc * (the dword's two int16 sums).
__m256i q4_k_scale_pairs(const std::byte* gb, int s) {
  const __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(gb + 1024 + 8 * s)));
  return _mm256_or_si256(v, _mm256_slli_epi32(v, 16));
}

// The end of a q4_Kx8 / q5_Kx8 group block against C columns: summ = sum_s m[s] * bsum[s]
// from the side data (this block's at side + c * ss), then acc += (d_x * d_w) * (float)sumi
// and acc_m += (-d_x * dmin_w) * (float)summ, the reference's float steps.
template <int C>
[[gnu::always_inline]] inline void kmin_block_end(const std::byte* gb, const std::byte* xb, size_t xs, const std::byte* side,
                                                  size_t ss, const __m256i* sumi, __m256* acc, __m256* acc_m) {
  __m256i summ[C];
  #pragma GCC unroll 8
  for (int c = 0; c < C; ++c) summ[c] = _mm256_setzero_si256();
  #pragma GCC unroll 4
  for (int t = 0; t < 4; ++t) {
    const __m256i mins = _mm256_cvtepu8_epi16(load128(gb + 1088 + 16 * t));
    #pragma GCC unroll 8
    for (int c = 0; c < C; ++c) summ[c] = _mm256_add_epi32(summ[c], _mm256_madd_epi16(mins, bcast_i32(side + c * ss + 4 * t)));
  }
  const __m256 dw = _mm256_cvtph_ps(load128(gb + 1152)), dminw = _mm256_cvtph_ps(load128(gb + 1168));
  #pragma GCC unroll 8
  for (int c = 0; c < C; ++c) {
    float dx;
    std::memcpy(&dx, xb + c * xs + offsetof(BlockQ8_K, d), 4);
    acc[c] = _mm256_add_ps(acc[c], _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(dx), dw), _mm256_cvtepi32_ps(sumi[c])));
    acc_m[c] = _mm256_add_ps(acc_m[c], _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(-dx), dminw), _mm256_cvtepi32_ps(summ[c])));
  }
}

// Orders the unpacked quants v after `after` (the last accumulator of the previous step), so
// that the compiler cannot hoist every step's loads and unpacking to the top of an unrolled
// loop (they would all be live at once and spill).
[[gnu::always_inline]] inline void keep_after(__m256i& v, __m256i& after) { asm("" : "+x"(v), "+x"(after)); }

// q4_K / q5_K: acc += (d_x * d_w) * (float)sumi, acc_m += (-d_x * dmin_w) * (float)summ
// per block, result acc + acc_m; sumi = sum_s sc[s] * (q . q8 over s), summ = sum_s m[s] *
// bsum[s]. q4_K: a sub-block's 8 maddubs add up in int16 as q4_0's (16 products of a nibble
// and an int8, |sum| <= 30720). q5_K (quants 0..31, the fifth bit from the transposed
// dword: bit 8j + k -> bit 4 of byte j by one shift): 4 maddubs at a time (8 products,
// |sum| <= 31744), so each sub-block is two int16 sums, each scaled by its own madd.
//
// q4_K / q5_K against C >= 2 activation rows (prefill, verify): the arithmetic above
// sub-block by sub-block, so that only C int16 sums are live. Sub-block s = 2cc + half is the
// low (half 0) or high (half 1) nibbles of dwords 8cc .. 8cc + 7; t[c] sums its 8 maddubs
// (q5_K: two runs of 4, |sum| <= 31744, each scaled on its own), then sumi[c] += madd(t[c],
// (sc, sc)). The int sums are exact, so this equals vec_dot (and the reference) bit for bit.
template <bool kQ5, int C>
void tile_kmin_cols(int64_t nb, const std::byte* group, const std::byte* x, size_t xs, const std::byte* side, size_t ss,
                    int64_t n_rows, float* y, int64_t ys) {
  static_assert(C >= 2);
  constexpr size_t kGroupBlock = kQ5 ? kQ5_KGroupBlock : kQ4_KGroupBlock;
  constexpr int kRun = kQ5 ? 4 : 8;  // maddubs per int16 sum
  const __m256i m4 = _mm256_set1_epi8(15), b4 = _mm256_set1_epi8(16);
  __m256 acc[C], acc_m[C];
  #pragma GCC unroll 8
  for (int c = 0; c < C; ++c) acc[c] = acc_m[c] = _mm256_setzero_ps();
  for (int64_t ib = 0; ib < nb; ++ib) {
    const std::byte* gb = group + ib * kGroupBlock;
    const std::byte* xb = x + ib * sizeof(BlockQ8_K);
    prefetch_ahead<kGroupBlock>(gb);
    __m256i sumi[C];
    #pragma GCC unroll 8
    for (int c = 0; c < C; ++c) sumi[c] = _mm256_setzero_si256();
    #pragma GCC unroll 1
    for (int cc = 0; cc < 4; ++cc) {
      #pragma GCC unroll 2
      for (int half = 0; half < 2; ++half) {
        const int s = 2 * cc + half;
        const std::byte* xq = xb + offsetof(BlockQ8_K, qs) + 32 * s;
        __m256i h = _mm256_setzero_si256();
        if constexpr (kQ5) h = load256(gb + 1184 + 32 * s);
        #pragma GCC unroll 2
        for (int run = 0; run < 8 / kRun; ++run) {
          __m256i t[C];
          #pragma GCC unroll 8
          for (int c = 0; c < C; ++c) t[c] = _mm256_setzero_si256();
          #pragma GCC unroll 8
          for (int kk = 0; kk < kRun; ++kk) {
            const int k = run * kRun + kk;
            const __m256i q = load256(gb + (8 * cc + k) * 32);
            __m256i v = _mm256_and_si256(half == 0 ? q : _mm256_srli_epi16(q, 4), m4);
            if constexpr (kQ5) v = _mm256_or_si256(v, _mm256_and_si256(shift_epi16(h, 4 - k), b4));
            keep_after(v, t[C - 1]);
            #pragma GCC unroll 8
            for (int c = 0; c < C; ++c) {
              t[c] = _mm256_add_epi16(t[c], _mm256_maddubs_epi16(v, bcast_i32(xq + c * xs + 4 * k)));
              LUMEN_PIN_REG(t[c]);
            }
          }
          const __m256i sc = q4_k_scale_pairs(gb, s);
          #pragma GCC unroll 8
          for (int c = 0; c < C; ++c) sumi[c] = _mm256_add_epi32(sumi[c], _mm256_madd_epi16(t[c], sc));
        }
      }
    }
    kmin_block_end<C>(gb, xb, xs, side + ib * 16, ss, sumi, acc, acc_m);
  }
  #pragma GCC unroll 8
  for (int c = 0; c < C; ++c) acc[c] = _mm256_add_ps(acc[c], acc_m[c]);
  store_rows<C>(acc, n_rows, y, ys);
}

// q4_K / q5_K, two groups (16 rows, the second group_stride bytes after the first) against
// C columns: tile_kmin_cols with each broadcast activation dword meeting both groups'
// quants, half the broadcasts of two tile_kmin_cols calls. Same int sums and float steps
// per row, so each row equals tile_kmin_cols's bit for bit. The second group may be short.
template <bool kQ5, int C>
void tile_kmin_pair(int64_t nb, const std::byte* group, size_t group_stride, const std::byte* x, size_t xs,
                    const std::byte* side, size_t ss, int64_t n_rows, float* y, int64_t ys) {
  constexpr size_t kGroupBlock = kQ5 ? kQ5_KGroupBlock : kQ4_KGroupBlock;
  constexpr int kRun = kQ5 ? 4 : 8;  // maddubs per int16 sum
  const __m256i m4 = _mm256_set1_epi8(15), b4 = _mm256_set1_epi8(16);
  __m256 acc[2][C], acc_m[2][C];
  #pragma GCC unroll 8
  for (int c = 0; c < C; ++c) acc[0][c] = acc[1][c] = acc_m[0][c] = acc_m[1][c] = _mm256_setzero_ps();
  for (int64_t ib = 0; ib < nb; ++ib) {
    const std::byte* gb[2] = {group + ib * kGroupBlock, group + group_stride + ib * kGroupBlock};
    const std::byte* xb = x + ib * sizeof(BlockQ8_K);
    prefetch_ahead<kGroupBlock>(gb[0]);
    prefetch_ahead<kGroupBlock>(gb[1]);
    __m256i sumi[2][C];
    #pragma GCC unroll 8
    for (int c = 0; c < C; ++c) sumi[0][c] = sumi[1][c] = _mm256_setzero_si256();
    #pragma GCC unroll 1
    for (int cc = 0; cc < 4; ++cc) {
      #pragma GCC unroll 2
      for (int half = 0; half < 2; ++half) {
        const int s = 2 * cc + half;
        const std::byte* xq = xb + offsetof(BlockQ8_K, qs) + 32 * s;
        __m256i h[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
        if constexpr (kQ5) {
          h[0] = load256(gb[0] + 1184 + 32 * s);
          h[1] = load256(gb[1] + 1184 + 32 * s);
        }
        #pragma GCC unroll 2
        for (int run = 0; run < 8 / kRun; ++run) {
          __m256i t[2][C];
          #pragma GCC unroll 8
          for (int kk = 0; kk < kRun; ++kk) {
            const int k = run * kRun + kk;
            __m256i v[2];
            #pragma GCC unroll 2
            for (int g = 0; g < 2; ++g) {
              const __m256i q = load256(gb[g] + (8 * cc + k) * 32);
              v[g] = _mm256_and_si256(half == 0 ? q : _mm256_srli_epi16(q, 4), m4);
              if constexpr (kQ5) v[g] = _mm256_or_si256(v[g], _mm256_and_si256(shift_epi16(h[g], 4 - k), b4));
              if (kk > 0) keep_after(v[g], t[1][C - 1]);
            }
            #pragma GCC unroll 8
            for (int c = 0; c < C; ++c) {
              const __m256i xv = bcast_i32(xq + c * xs + 4 * k);
              #pragma GCC unroll 2
              for (int g = 0; g < 2; ++g) {
                const __m256i p = _mm256_maddubs_epi16(v[g], xv);
                t[g][c] = kk == 0 ? p : _mm256_add_epi16(t[g][c], p);
                LUMEN_PIN_REG(t[g][c]);
              }
            }
          }
          #pragma GCC unroll 2
          for (int g = 0; g < 2; ++g) {
            const __m256i sc = q4_k_scale_pairs(gb[g], s);
            #pragma GCC unroll 8
            for (int c = 0; c < C; ++c) sumi[g][c] = _mm256_add_epi32(sumi[g][c], _mm256_madd_epi16(t[g][c], sc));
          }
        }
      }
    }
    #pragma GCC unroll 2
    for (int g = 0; g < 2; ++g) kmin_block_end<C>(gb[g], xb, xs, side + ib * 16, ss, sumi[g], acc[g], acc_m[g]);
  }
  #pragma GCC unroll 8
  for (int c = 0; c < C; ++c) {
    acc[0][c] = _mm256_add_ps(acc[0][c], acc_m[0][c]);
    acc[1][c] = _mm256_add_ps(acc[1][c], acc_m[1][c]);
  }
  store_rows<C>(acc[0], kRows, y, ys);
  store_rows<C>(acc[1], n_rows - kRows, y + kRows, ys);
}

// q4_K / q5_K against one activation row (decode), the arithmetic of tile_kmin_cols
// written for the 1-column case: per sub-block pair two int16 accumulators per nibble half
// (short add chains, no spills), the per-row scales applied by one madd_epi16 per int16
// sum (q4_K adds the two first: 8 maddubs of nibbles stay within int16, see tile_kmin_cols; q5_K's
// 4 each are at the limit), one float conversion per super-block. The int sums are exact,
// so this equals tile_kmin_cols (and vec_dot) bit for bit.
template <bool kQ5>
void tile_kmin_col(int64_t nb, const std::byte* group, const std::byte* x, const std::byte* side, int64_t n_rows,
                   float* y) {
  constexpr size_t kGroupBlock = kQ5 ? kQ5_KGroupBlock : kQ4_KGroupBlock;
  const __m256i m4 = _mm256_set1_epi8(15), b4 = _mm256_set1_epi8(16);
  __m256 acc = _mm256_setzero_ps(), acc_m = _mm256_setzero_ps();
  for (int64_t ib = 0; ib < nb; ++ib) {
    const std::byte* gb = group + ib * kGroupBlock;
    const std::byte* xb = x + ib * sizeof(BlockQ8_K);
    const std::byte* xq = xb + offsetof(BlockQ8_K, qs);
    __m256i sumi = _mm256_setzero_si256();
    #pragma GCC unroll 1
    for (int cc = 0; cc < 4; ++cc) {
      prefetch_col_step<kGroupBlock, 4>(gb, cc);
      __m256i hl = _mm256_setzero_si256(), hh = _mm256_setzero_si256();
      if constexpr (kQ5) {
        hl = load256(gb + 1184 + 64 * cc);
        hh = load256(gb + 1184 + 64 * cc + 32);
      }
      __m256i tl[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
      __m256i th[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
      #pragma GCC unroll 8
      for (int k = 0; k < 8; ++k) {
        const __m256i q = load256(gb + (8 * cc + k) * 32);
        __m256i lo = _mm256_and_si256(q, m4);
        __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
        if constexpr (kQ5) {
          lo = _mm256_or_si256(lo, _mm256_and_si256(shift_epi16(hl, 4 - k), b4));
          hi = _mm256_or_si256(hi, _mm256_and_si256(shift_epi16(hh, 4 - k), b4));
        }
        tl[k & 1] = _mm256_add_epi16(tl[k & 1], _mm256_maddubs_epi16(lo, bcast_i32(xq + 64 * cc + 4 * k)));
        th[k & 1] = _mm256_add_epi16(th[k & 1], _mm256_maddubs_epi16(hi, bcast_i32(xq + 64 * cc + 32 + 4 * k)));
      }
      const __m256i scl = q4_k_scale_pairs(gb, 2 * cc), sch = q4_k_scale_pairs(gb, 2 * cc + 1);
      __m256i pl, ph;
      if constexpr (kQ5) {
        pl = _mm256_add_epi32(_mm256_madd_epi16(tl[0], scl), _mm256_madd_epi16(tl[1], scl));
        ph = _mm256_add_epi32(_mm256_madd_epi16(th[0], sch), _mm256_madd_epi16(th[1], sch));
      } else {
        pl = _mm256_madd_epi16(_mm256_add_epi16(tl[0], tl[1]), scl);
        ph = _mm256_madd_epi16(_mm256_add_epi16(th[0], th[1]), sch);
      }
      sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(pl, ph));
    }
    __m256i summ = _mm256_setzero_si256();
    #pragma GCC unroll 4
    for (int t = 0; t < 4; ++t)
      summ = _mm256_add_epi32(summ, _mm256_madd_epi16(_mm256_cvtepu8_epi16(load128(gb + 1088 + 16 * t)),
                                                      bcast_i32(side + ib * 16 + 4 * t)));
    const __m256 dw = _mm256_cvtph_ps(load128(gb + 1152)), dminw = _mm256_cvtph_ps(load128(gb + 1168));
    float dx;
    std::memcpy(&dx, xb + offsetof(BlockQ8_K, d), 4);
    acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(dx), dw), _mm256_cvtepi32_ps(sumi)));
    acc_m = _mm256_add_ps(acc_m, _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(-dx), dminw), _mm256_cvtepi32_ps(summ)));
  }
  acc = _mm256_add_ps(acc, acc_m);
  store_rows<1>(&acc, n_rows, y, 0);
}

// Indices for _mm256_shuffle_epi8 that fill each dword d of a vector from its own bytes:
// byte j of the result is byte (within >> 8j) & 3 of dword d.
__m256i dword_shuffle(int32_t within) {
  const __m256i base = _mm256_setr_epi8(0, 0, 0, 0, 4, 4, 4, 4, 8, 8, 8, 8, 12, 12, 12, 12,
                                        0, 0, 0, 0, 4, 4, 4, 4, 8, 8, 8, 8, 12, 12, 12, 12);
  return _mm256_add_epi8(base, _mm256_set1_epi32(within));
}

// The 8 rows' q6_K scales 2t, 2t + 1 of a q6_Kx8 group block as int16 pairs per dword.
__m256i q6_k_scale_pairs(const std::byte* gb, int t) { return _mm256_cvtepi8_epi16(load128(gb + 1536 + 16 * t)); }

// The 4 x 32 quants (0..63) of one (h, k) unit of a q6_Kx8p group block, quarter qi in
// v[qi]. The top-two-bit masks keep bits 6, 7 of each byte, so the 16-bit shifts move
// nothing across a byte boundary.
[[gnu::always_inline]] inline void q6_k_unpack(const std::byte* unit, __m256i v[4]) {
  const __m256i m63 = _mm256_set1_epi8(63), top = _mm256_set1_epi8(static_cast<char>(0xc0));
  const __m256i p = load256(unit), q = load256(unit + 32), r = load256(unit + 64);
  v[0] = _mm256_and_si256(p, m63);
  v[1] = _mm256_and_si256(q, m63);
  v[2] = _mm256_and_si256(r, m63);
  v[3] = _mm256_or_si256(_mm256_or_si256(_mm256_srli_epi16(_mm256_and_si256(p, top), 2),
                                         _mm256_srli_epi16(_mm256_and_si256(q, top), 4)),
                         _mm256_srli_epi16(_mm256_and_si256(r, top), 6));
}

// Quarter qi (0..3) of one (h, k) unit of a q6_Kx8p group block: its 32 quants (0..63),
// the same bits as q6_k_unpack's v[qi] (one AND for quarters 0..2, the gathered bit pairs
// for quarter 3), the loads folded into the ops. The empty asm hides that the units' bytes
// were read before: GCC would otherwise keep each unit's three vectors from quarter 0 to 3,
// beside the tile's sums, and spill them.
[[gnu::always_inline]] inline __m256i q6_k_quarter(const std::byte* unit, int qi) {
  asm volatile("" : "+r"(unit));
  const __m256i m63 = _mm256_set1_epi8(63), top = _mm256_set1_epi8(static_cast<char>(0xc0));
  if (qi < 3) return _mm256_and_si256(load256(unit + 32 * qi), m63);
  return _mm256_or_si256(_mm256_or_si256(_mm256_srli_epi16(_mm256_and_si256(load256(unit), top), 2),
                                         _mm256_srli_epi16(_mm256_and_si256(load256(unit + 32), top), 4)),
                         _mm256_srli_epi16(_mm256_and_si256(load256(unit + 64), top), 6));
}

// q6_K: acc += (d_x * d_w) * (float)sumi per block, sumi = sum_s scales[s] * (q6 . q8 over
// s) - 32 * sum_s scales[s] * bsum[s], the q6 values 0..63 unsigned. Two maddubs of a
// sub-block add up in int16 (4 products of at most 63 * 128: 32256 < 2^15), then one
// madd_epi16 against the scale pair (scale, scale) of each row widens and scales them.
//
// q6_K against C >= 2 activation rows (prefill, verify): one quarter of two units at a time
// (sub-block 8h + 2qi + kk, dwords k, k + 1 of its four), so that only the C int32 sums, two
// unpacked vectors and the step's temporaries are live (the older form unpacked two whole
// units, 8 vectors, beside 4 scale vectors and the sums, and GCC spilled). The step's four
// scale vectors are picked one at a time, before the quarter's steps. The int sums are
// exact, so this equals vec_dot (and the reference) bit for bit.
template <int C>
void tile_q6_k(int64_t nb, const std::byte* group, const std::byte* x, size_t xs, const std::byte* /*side*/,
               size_t /*ss*/, int64_t n_rows, float* y, int64_t ys) {
  static_assert(C >= 2);
  // Within each dword of the scale pairs (sc[2t], sc[2t + 1]): (sc[2t], sc[2t]) or the odd twice.
  const __m256i pick[2] = {dword_shuffle(0x01000100), dword_shuffle(0x03020302)};
  __m256 acc[C];
  #pragma GCC unroll 8
  for (int c = 0; c < C; ++c) acc[c] = _mm256_setzero_ps();
  for (int64_t ib = 0; ib < nb; ++ib) {
    const std::byte* gb = group + ib * kQ6_KGroupBlock;
    const std::byte* xb = x + ib * sizeof(BlockQ8_K);
    prefetch_ahead<kQ6_KGroupBlock>(gb);
    __m256i sumi[C];
    #pragma GCC unroll 8
    for (int c = 0; c < C; ++c) sumi[c] = _mm256_setzero_si256();
    #pragma GCC unroll 1
    for (int hk = 0; hk < 4; ++hk) {  // half h = hk / 2; dwords k = 4 * (hk % 2) .. + 3
      const int h = hk >> 1, kk = hk & 1;
      #pragma GCC unroll 4
      for (int qi = 0; qi < 4; ++qi) {
        // Sub-block 8h + 2qi + kk: scale pair t = 4h + qi, half kk.
        const __m256i sc = _mm256_shuffle_epi8(q6_k_scale_pairs(gb, 4 * h + qi), pick[kk]);
        #pragma GCC unroll 2
        for (int j = 0; j < 2; ++j) {
          const int k = 4 * kk + 2 * j;
          __m256i v0 = q6_k_quarter(gb + (8 * h + k) * 96, qi), v1 = q6_k_quarter(gb + (8 * h + k + 1) * 96, qi);
          keep_after(v0, sumi[C - 1]);
          keep_after(v1, sumi[C - 1]);
          const std::byte* xq = xb + offsetof(BlockQ8_K, qs) + 128 * h + 32 * qi + 4 * k;
          #pragma GCC unroll 8
          for (int c = 0; c < C; ++c) {
            const std::byte* xc = xq + c * xs;
            const __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(v0, bcast_i32(xc)),
                                               _mm256_maddubs_epi16(v1, bcast_i32(xc + 4)));
            sumi[c] = _mm256_add_epi32(sumi[c], _mm256_madd_epi16(p, sc));
            LUMEN_PIN_REG(sumi[c]);
          }
        }
      }
    }
    // The offset: sum_s scales[s] * bsum[s], pairs (bsum[2t], bsum[2t + 1]) straight from q8_K.
    __m256i off[C];
    #pragma GCC unroll 8
    for (int c = 0; c < C; ++c) off[c] = _mm256_setzero_si256();
    #pragma GCC unroll 8
    for (int t = 0; t < 8; ++t) {
      const __m256i sp = q6_k_scale_pairs(gb, t);
      #pragma GCC unroll 8
      for (int c = 0; c < C; ++c)
        off[c] = _mm256_add_epi32(off[c], _mm256_madd_epi16(sp, bcast_i32(xb + c * xs + offsetof(BlockQ8_K, bsums) + 4 * t)));
    }
    const __m256 dw = _mm256_cvtph_ps(load128(gb + 1664));
    #pragma GCC unroll 8
    for (int c = 0; c < C; ++c) {
      float dx;
      std::memcpy(&dx, xb + c * xs + offsetof(BlockQ8_K, d), 4);
      const __m256i s = _mm256_sub_epi32(sumi[c], _mm256_slli_epi32(off[c], 5));
      acc[c] = _mm256_add_ps(acc[c], _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(dx), dw), _mm256_cvtepi32_ps(s)));
    }
  }
  store_rows<C>(acc, n_rows, y, ys);
}

// q6_K against one activation row (decode), the arithmetic of tile_q6_k written for the
// 1-column case: each unit unpacked whole (q6_k_unpack), each half's four scale-pair vectors
// loaded once (both sub-block halves are picked from them), the prefetch spread over the
// block's four steps. Exact int sums and the same float steps, so it equals tile_q6_k (and
// vec_dot) bit for bit.
void tile_q6_k_col(int64_t nb, const std::byte* group, const std::byte* x, int64_t n_rows, float* y) {
  const __m256i pick_even = dword_shuffle(0x01000100), pick_odd = dword_shuffle(0x03020302);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t ib = 0; ib < nb; ++ib) {
    const std::byte* gb = group + ib * kQ6_KGroupBlock;
    const std::byte* xb = x + ib * sizeof(BlockQ8_K);
    __m256i sumi = _mm256_setzero_si256();
    #pragma GCC unroll 1
    for (int h = 0; h < 2; ++h) {
      __m256i sp[4];  // quarter qi: the scale pairs t = 4h + qi, sub-blocks 8h + 2qi (even) and + 1 (odd)
      #pragma GCC unroll 4
      for (int qi = 0; qi < 4; ++qi) sp[qi] = q6_k_scale_pairs(gb, 4 * h + qi);
      #pragma GCC unroll 1
      for (int kk = 0; kk < 2; ++kk) {  // dwords k = 4kk .. 4kk + 3: the even or the odd sub-block
        prefetch_col_step<kQ6_KGroupBlock, 4>(gb, 2 * h + kk);
        __m256i sc[4];
        #pragma GCC unroll 4
        for (int qi = 0; qi < 4; ++qi) sc[qi] = _mm256_shuffle_epi8(sp[qi], kk == 0 ? pick_even : pick_odd);
        #pragma GCC unroll 2
        for (int k = 4 * kk; k < 4 * kk + 4; k += 2) {
          __m256i v[2][4];
          q6_k_unpack(gb + (8 * h + k) * 96, v[0]);
          q6_k_unpack(gb + (8 * h + k + 1) * 96, v[1]);
          const std::byte* xq = xb + offsetof(BlockQ8_K, qs) + 128 * h + 4 * k;
          #pragma GCC unroll 4
          for (int qi = 0; qi < 4; ++qi) {
            const std::byte* xc = xq + 32 * qi;
            const __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(v[0][qi], bcast_i32(xc)),
                                               _mm256_maddubs_epi16(v[1][qi], bcast_i32(xc + 4)));
            sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p, sc[qi]));
          }
        }
      }
    }
    __m256i off = _mm256_setzero_si256();
    #pragma GCC unroll 8
    for (int t = 0; t < 8; ++t)
      off = _mm256_add_epi32(off, _mm256_madd_epi16(q6_k_scale_pairs(gb, t), bcast_i32(xb + offsetof(BlockQ8_K, bsums) + 4 * t)));
    const __m256 dw = _mm256_cvtph_ps(load128(gb + 1664));
    float dx;
    std::memcpy(&dx, xb + offsetof(BlockQ8_K, d), 4);
    const __m256i si = _mm256_sub_epi32(sumi, _mm256_slli_epi32(off, 5));
    acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(dx), dw), _mm256_cvtepi32_ps(si)));
  }
  store_rows<1>(&acc, n_rows, y, 0);
}

// iq4_xs (the i-quants' S, iq_blocks.h): acc += (d_x * d_w) * (float)S per block, S =
// sum_b sc[b] * (v . q8 over sub-block b), v = kIq4nlValues[code] (int8 in [-127, 113]).
// maddubs(|q8|, v with q8's signs) gives pairs up to 2 * 127 * 127, so each is widened and
// scaled at once by a madd against the rows' (sc, sc) pairs.
// iq4_xs against C >= 2 activation rows (prefill, verify), the arithmetic above with
// |q8| taken from the broadcast activation dword (vpabsb; |-128| is 128 unsigned, as the
// side data has it) instead of a second broadcast from the side data: on AVX2 a broadcast
// load costs about as much as two vector ops, and the tile is bound by them. The int sums
// are exact, so this equals vec_dot (and the reference) bit for bit.
template <int C>
void tile_iq4_xs_cols(int64_t nb, const std::byte* group, const std::byte* x, size_t xs, const std::byte* /*side*/,
                      size_t /*ss*/, int64_t n_rows, float* y, int64_t ys) {
  static_assert(C >= 2);
  const __m256i m4 = _mm256_set1_epi8(15);
  const __m256i table = _mm256_broadcastsi128_si256(load128(kIq4nlValues));
  __m256 acc[C];
  #pragma GCC unroll 8
  for (int c = 0; c < C; ++c) acc[c] = _mm256_setzero_ps();
  for (int64_t ib = 0; ib < nb; ++ib) {
    const std::byte* gb = group + ib * kIQ4_XSGroupBlock;
    const std::byte* xq = x + ib * sizeof(BlockQ8_K) + offsetof(BlockQ8_K, qs);
    prefetch_ahead<kIQ4_XSGroupBlock>(gb);
    __m256i sumi[C];
    #pragma GCC unroll 8
    for (int c = 0; c < C; ++c) sumi[c] = _mm256_setzero_si256();
    #pragma GCC unroll 1
    for (int b = 0; b < 8; ++b) {
      // (sc, sc) int16 pairs per row's dword.
      const __m256i sc32 = _mm256_cvtepu16_epi32(_mm_cvtepi8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(gb + 1024 + 8 * b))));
      const __m256i scp = _mm256_or_si256(sc32, _mm256_slli_epi32(sc32, 16));
      #pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) {
        const __m256i q = load256(gb + (4 * b + k) * 32);
        __m256i vl = _mm256_shuffle_epi8(table, _mm256_and_si256(q, m4));
        __m256i vh = _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(q, 4), m4));
        keep_after(vl, sumi[C - 1]);
        keep_after(vh, sumi[C - 1]);
        #pragma GCC unroll 8
        for (int c = 0; c < C; ++c) {
          const std::byte* xc = xq + c * xs + 32 * b + 4 * k;
          const __m256i xl = bcast_i32(xc), xh = bcast_i32(xc + 16);
          const __m256i pl = _mm256_maddubs_epi16(_mm256_abs_epi8(xl), _mm256_sign_epi8(vl, xl));
          const __m256i ph = _mm256_maddubs_epi16(_mm256_abs_epi8(xh), _mm256_sign_epi8(vh, xh));
          sumi[c] = _mm256_add_epi32(sumi[c], _mm256_add_epi32(_mm256_madd_epi16(pl, scp), _mm256_madd_epi16(ph, scp)));
          LUMEN_PIN_REG(sumi[c]);
        }
      }
    }
    const __m256 dw = _mm256_cvtph_ps(load128(gb + 1088));
    #pragma GCC unroll 8
    for (int c = 0; c < C; ++c) {
      float dx;
      std::memcpy(&dx, x + c * xs + ib * sizeof(BlockQ8_K) + offsetof(BlockQ8_K, d), 4);
      acc[c] = _mm256_add_ps(acc[c], _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(dx), dw), _mm256_cvtepi32_ps(sumi[c])));
    }
  }
  store_rows<C>(acc, n_rows, y, ys);
}

// iq4_xs, two groups (16 rows, the second group_stride bytes after the first) against C
// columns: tile_iq4_xs_cols with each broadcast activation dword and its |q8| meeting both
// groups' values (half the broadcasts and vpabsb of two tile_iq4_xs_cols calls). Same int
// sums and float steps per row, so each row equals tile_iq4_xs_cols's bit for bit. The
// second group may be short.
template <int C>
void tile_iq4_xs_pair(int64_t nb, const std::byte* group, size_t group_stride, const std::byte* x, size_t xs,
                      int64_t n_rows, float* y, int64_t ys) {
  const __m256i m4 = _mm256_set1_epi8(15);
  const __m256i table = _mm256_broadcastsi128_si256(load128(kIq4nlValues));
  __m256 acc[2][C];
  #pragma GCC unroll 8
  for (int c = 0; c < C; ++c) acc[0][c] = acc[1][c] = _mm256_setzero_ps();
  for (int64_t ib = 0; ib < nb; ++ib) {
    const std::byte* gb[2] = {group + ib * kIQ4_XSGroupBlock, group + group_stride + ib * kIQ4_XSGroupBlock};
    const std::byte* xq = x + ib * sizeof(BlockQ8_K) + offsetof(BlockQ8_K, qs);
    prefetch_ahead<kIQ4_XSGroupBlock>(gb[0]);
    prefetch_ahead<kIQ4_XSGroupBlock>(gb[1]);
    __m256i sumi[2][C];
    #pragma GCC unroll 8
    for (int c = 0; c < C; ++c) sumi[0][c] = sumi[1][c] = _mm256_setzero_si256();
    #pragma GCC unroll 1
    for (int b = 0; b < 8; ++b) {
      __m256i scp[2];  // (sc, sc) int16 pairs per row's dword
      #pragma GCC unroll 2
      for (int g = 0; g < 2; ++g) {
        const __m256i sc32 = _mm256_cvtepu16_epi32(_mm_cvtepi8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(gb[g] + 1024 + 8 * b))));
        scp[g] = _mm256_or_si256(sc32, _mm256_slli_epi32(sc32, 16));
      }
      #pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) {
        #pragma GCC unroll 2
        for (int hi = 0; hi < 2; ++hi) {  // low nibbles: elements 32b + 4k ..; high: 32b + 16 + 4k ..
          __m256i v[2];
          #pragma GCC unroll 2
          for (int g = 0; g < 2; ++g) {
            const __m256i q = load256(gb[g] + (4 * b + k) * 32);
            v[g] = _mm256_shuffle_epi8(table, _mm256_and_si256(hi == 0 ? q : _mm256_srli_epi16(q, 4), m4));
            keep_after(v[g], sumi[1][C - 1]);
          }
          #pragma GCC unroll 8
          for (int c = 0; c < C; ++c) {
            const __m256i xv = bcast_i32(xq + c * xs + 32 * b + 16 * hi + 4 * k);
            const __m256i ax = _mm256_abs_epi8(xv);
            #pragma GCC unroll 2
            for (int g = 0; g < 2; ++g) {
              const __m256i p = _mm256_maddubs_epi16(ax, _mm256_sign_epi8(v[g], xv));
              sumi[g][c] = _mm256_add_epi32(sumi[g][c], _mm256_madd_epi16(p, scp[g]));
              LUMEN_PIN_REG(sumi[g][c]);
            }
          }
        }
      }
    }
    #pragma GCC unroll 2
    for (int g = 0; g < 2; ++g) {
      const __m256 dw = _mm256_cvtph_ps(load128(gb[g] + 1088));
      #pragma GCC unroll 8
      for (int c = 0; c < C; ++c) {
        float dx;
        std::memcpy(&dx, x + c * xs + ib * sizeof(BlockQ8_K) + offsetof(BlockQ8_K, d), 4);
        acc[g][c] = _mm256_add_ps(acc[g][c], _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(dx), dw), _mm256_cvtepi32_ps(sumi[g][c])));
      }
    }
  }
  store_rows<C>(acc[0], kRows, y, ys);
  store_rows<C>(acc[1], n_rows - kRows, y + kRows, ys);
}

// iq4_xs against one activation row (decode), the arithmetic of tile_iq4_xs_cols with the
// prefetch spread over the block's 8 sub-block steps (bit-exact with it).
void tile_iq4_xs_col(int64_t nb, const std::byte* group, const std::byte* x, const std::byte* side, int64_t n_rows,
                     float* y) {
  const __m256i m4 = _mm256_set1_epi8(15);
  const __m256i table = _mm256_broadcastsi128_si256(load128(kIq4nlValues));
  __m256 acc = _mm256_setzero_ps();
  for (int64_t ib = 0; ib < nb; ++ib) {
    const std::byte* gb = group + ib * kIQ4_XSGroupBlock;
    const std::byte* xq = x + ib * sizeof(BlockQ8_K) + offsetof(BlockQ8_K, qs);
    const std::byte* sb0 = side + ib * kQkK;
    __m256i sumi = _mm256_setzero_si256();
    #pragma GCC unroll 1
    for (int b = 0; b < 8; ++b) {
      prefetch_col_step<kIQ4_XSGroupBlock, 8>(gb, b);
      const __m256i sc32 = _mm256_cvtepu16_epi32(_mm_cvtepi8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(gb + 1024 + 8 * b))));
      const __m256i scp = _mm256_or_si256(sc32, _mm256_slli_epi32(sc32, 16));
      #pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) {
        const __m256i q = load256(gb + (4 * b + k) * 32);
        const __m256i vl = _mm256_shuffle_epi8(table, _mm256_and_si256(q, m4));
        const __m256i vh = _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(q, 4), m4));
        const size_t e = 32 * b + 4 * k;
        const __m256i pl = _mm256_maddubs_epi16(bcast_i32(sb0 + e), _mm256_sign_epi8(vl, bcast_i32(xq + e)));
        const __m256i ph = _mm256_maddubs_epi16(bcast_i32(sb0 + e + 16), _mm256_sign_epi8(vh, bcast_i32(xq + e + 16)));
        sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(_mm256_madd_epi16(pl, scp), _mm256_madd_epi16(ph, scp)));
      }
    }
    const __m256 dw = _mm256_cvtph_ps(load128(gb + 1088));
    float dx;
    std::memcpy(&dx, x + ib * sizeof(BlockQ8_K) + offsetof(BlockQ8_K, d), 4);
    acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(dx), dw), _mm256_cvtepi32_ps(sumi)));
  }
  store_rows<1>(&acc, n_rows, y, 0);
}

template <int C> struct TileIQ4_XS {
  static void run(int64_t nb, const std::byte* g, const std::byte* x, size_t xs, const std::byte* s, size_t ss,
                  int64_t n_rows, float* y, int64_t ys) {
    if constexpr (C == 1) {
      tile_iq4_xs_col(nb, g, x, s, n_rows, y);
    } else {
      tile_iq4_xs_cols<C>(nb, g, x, xs, s, ss, n_rows, y, ys);
    }
  }
  // Two groups: the pair tile from 2 columns on; one column (a tail) as two 1-column tiles.
  static void run2(int64_t nb, const std::byte* g, size_t gs, const std::byte* x, size_t xs, const std::byte* s, size_t /*ss*/,
                   int64_t n_rows, float* y, int64_t ys) {
    if constexpr (C == 1) {
      tile_iq4_xs_col(nb, g, x, s, kRows, y);
      tile_iq4_xs_col(nb, g + gs, x, s, n_rows - kRows, y + kRows);
    } else {
      tile_iq4_xs_pair<C>(nb, g, gs, x, xs, n_rows, y, ys);
    }
  }
};
template <int C> struct TileQ8_0 {
  static void run(int64_t nb, const std::byte* g, const std::byte* x, size_t xs, const std::byte* s, size_t ss,
                  int64_t n_rows, float* y, int64_t ys) { tile_q8<false, C>(nb, g, x, xs, s, ss, n_rows, y, ys); }
};
template <int C> struct TileQ4_0 {
  static void run(int64_t nb, const std::byte* g, const std::byte* x, size_t xs, const std::byte* s, size_t ss,
                  int64_t n_rows, float* y, int64_t ys) { tile_q8<true, C>(nb, g, x, xs, s, ss, n_rows, y, ys); }
  static void run2(int64_t nb, const std::byte* g, size_t gs, const std::byte* x, size_t xs, const std::byte* s, size_t ss,
                   int64_t n_rows, float* y, int64_t ys) { tile_q4_0_pair<C>(nb, g, gs, x, xs, s, ss, n_rows, y, ys); }
};
template <int C> struct TileQ5_0 {
  static void run(int64_t nb, const std::byte* g, const std::byte* x, size_t xs, const std::byte* s, size_t ss,
                  int64_t n_rows, float* y, int64_t ys) { tile_q5_0<C>(nb, g, x, xs, s, ss, n_rows, y, ys); }
};
// q4_K (kQ5 false) / q5_K: the 1-column tile for decode, tile_kmin_cols from 2 columns on;
// two groups through the pair tile from 2 columns on, one column (a tail) as two run calls.
template <bool kQ5, int C> struct TileKMin {
  static void run(int64_t nb, const std::byte* g, const std::byte* x, size_t xs, const std::byte* s, size_t ss,
                  int64_t n_rows, float* y, int64_t ys) {
    if constexpr (C == 1) {
      tile_kmin_col<kQ5>(nb, g, x, s, n_rows, y);
    } else {
      tile_kmin_cols<kQ5, C>(nb, g, x, xs, s, ss, n_rows, y, ys);
    }
  }
  static void run2(int64_t nb, const std::byte* g, size_t gs, const std::byte* x, size_t xs, const std::byte* s, size_t ss,
                   int64_t n_rows, float* y, int64_t ys) {
    if constexpr (C == 1) {
      tile_kmin_col<kQ5>(nb, g, x, s, kRows, y);
      tile_kmin_col<kQ5>(nb, g + gs, x, s, n_rows - kRows, y + kRows);
    } else {
      tile_kmin_pair<kQ5, C>(nb, g, gs, x, xs, s, ss, n_rows, y, ys);
    }
  }
};
template <int C> struct TileQ4_K : TileKMin<false, C> {};
template <int C> struct TileQ5_K : TileKMin<true, C> {};

template <int C> struct TileQ6_K {
  static void run(int64_t nb, const std::byte* g, const std::byte* x, size_t xs, const std::byte* s, size_t ss,
                  int64_t n_rows, float* y, int64_t ys) {
    if constexpr (C == 1) {
      tile_q6_k_col(nb, g, x, n_rows, y);
    } else {
      tile_q6_k<C>(nb, g, x, xs, s, ss, n_rows, y, ys);
    }
  }
};

// A tile type with a two-group form: Tile<C>::run2(nb, g, group_stride, x, xs, side, ss,
// n_rows, y, ys) computes rows 0 .. n_rows - 1 (8 < n_rows <= 16) of the groups at g and
// g + group_stride, bit for bit as two run calls.
template <template <int> class Tile>
concept PairTile = requires { &Tile<1>::run2; };

// One tile of c columns: run(...) of one group, or run2(...) of two (group_stride != 0).
template <int C, template <int> class Tile>
[[gnu::always_inline]] inline void run_tile(int64_t nb, const std::byte* g, size_t group_stride, const std::byte* x,
                                            size_t xs, const std::byte* side, size_t ss, int64_t rows, float* y, int64_t ys) {
  if constexpr (PairTile<Tile>) {
    if (group_stride != 0) {
      Tile<C>::run2(nb, g, group_stride, x, xs, side, ss, rows, y, ys);
      return;
    }
  }
  Tile<C>::run(nb, g, x, xs, side, ss, rows, y, ys);
}

// The row of tiles of one group (or pair) across all n_cols columns: kCols at a time, the
// c = rest < kCols columns left over by one narrower tile.
template <int kCols, template <int> class Tile>
void run_tile_row(int64_t nb, const std::byte* g, size_t group_stride, const std::byte* x, size_t xs,
                  const std::byte* side, size_t ss, int64_t rows, int64_t n_cols, float* y, int64_t ys) {
  int64_t c0 = 0;
  for (; c0 + kCols <= n_cols; c0 += kCols)
    run_tile<kCols, Tile>(nb, g, group_stride, x + c0 * xs, xs, side + c0 * ss, ss, rows, y + c0 * ys, ys);
  const int64_t rest = n_cols - c0;
  [&]<int... kC>(std::integer_sequence<int, kC...>) {
    ((rest == kC + 1 ? run_tile<kC + 1, Tile>(nb, g, group_stride, x + c0 * xs, xs, side + c0 * ss, ss, rows, y + c0 * ys, ys)
                     : void()),
     ...);
  }(std::make_integer_sequence<int, kCols - 1>{});
}

// n_rows rows = consecutive groups from `groups`, each against every activation row; two
// groups at a time while more than one is left, for tiles that have that form and from 2
// columns on (one column, decode, reads each group once either way).
template <int kBlock, size_t kGroupBlock, int kCols, template <int> class Tile>
void gemm_groups(int64_t n, const std::byte* groups, int64_t n_rows, const std::byte* x, size_t xs,
                 const std::byte* side, size_t ss, int64_t n_cols, float* y, int64_t ys) {
  static_assert(kCols >= 1 && kCols <= 8);
  const int64_t nb = n / kBlock;
  const size_t stride = static_cast<size_t>(nb) * kGroupBlock;
  int64_t r0 = 0;
  if (PairTile<Tile> && n_cols >= 2) {
    for (; r0 + kRows < n_rows; r0 += 2 * kRows)
      run_tile_row<kCols, Tile>(nb, groups + (r0 / kRows) * stride, stride, x, xs, side, ss,
                                std::min<int64_t>(n_rows - r0, 2 * kRows), n_cols, y + r0, ys);
  }
  for (; r0 < n_rows; r0 += kRows)
    run_tile_row<kCols, Tile>(nb, groups + (r0 / kRows) * stride, 0, x, xs, side, ss, n_rows - r0, n_cols, y + r0, ys);
}

size_t no_side_bytes(int64_t) { return 0; }

}  // namespace

// Bit-exact with ref::quantize_row_q8_k: the first element of the largest magnitude gives
// max (NaNs never do), iscale = -127 / max, q = nearest_int(iscale * x) as ggml rounds it
// (the product, then + 1.5 * 2^23 as a separate add: fp-contract is off here), capped at
// 127 and stored as its low byte (iscale overflows to inf for subnormal blocks: the values
// are then garbage, but the reference's); bsums from the stored quants, d = 1 / iscale.
void quantize_row_q8_k_avx2(const float* x, std::byte* y, int64_t n) {
  auto* b = reinterpret_cast<BlockQ8_K*>(y);
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256i perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (int64_t ib = 0; ib < n / kQkK; ++ib, x += kQkK) {
    __m256 amax = _mm256_setzero_ps();
    for (int k = 0; k < kQkK / 8; ++k) amax = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(x + 8 * k), abs_mask), amax);
    __m128 m4 = _mm_max_ps(_mm256_extractf128_ps(amax, 1), _mm256_castps256_ps128(amax));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const float amax_s = _mm_cvtss_f32(m4);
    if (amax_s == 0.0f) {
      std::memset(&b[ib], 0, sizeof(BlockQ8_K));
      continue;
    }
    const __m256 av = _mm256_set1_ps(amax_s);
    float max = 0.0f;
    for (int k = 0; k < kQkK / 8; ++k) {
      const __m256 v = _mm256_loadu_ps(x + 8 * k);
      const int hit = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_and_ps(v, abs_mask), av, _CMP_EQ_OQ));
      if (hit != 0) {
        max = x[8 * k + __builtin_ctz(static_cast<unsigned>(hit))];
        break;
      }
    }
    const float iscale = -127.0f / max;
    const __m256 is = _mm256_set1_ps(iscale), magic = _mm256_set1_ps(12582912.0f);
    const __m256i mant = _mm256_set1_epi32(0x007fffff), half = _mm256_set1_epi32(0x00400000), cap = _mm256_set1_epi32(127);
    for (int k4 = 0; k4 < kQkK / 32; ++k4) {
      __m256i q[4];
      for (int k = 0; k < 4; ++k) {
        const __m256 f = _mm256_add_ps(_mm256_mul_ps(is, _mm256_loadu_ps(x + 32 * k4 + 8 * k)), magic);
        const __m256i v = _mm256_min_epi32(_mm256_sub_epi32(_mm256_and_si256(_mm256_castps_si256(f), mant), half), cap);
        q[k] = _mm256_srai_epi32(_mm256_slli_epi32(v, 24), 24);  // int8_t(v): its low byte, as the reference stores it
      }
      // Sub-blocks 2 k4 and 2 k4 + 1 of 16 quants each.
      b[ib].bsums[2 * k4] = static_cast<int16_t>(hsum_i32(_mm256_add_epi32(q[0], q[1])));
      b[ib].bsums[2 * k4 + 1] = static_cast<int16_t>(hsum_i32(_mm256_add_epi32(q[2], q[3])));
      // packs interleave 128-bit lanes: (0 1 4 5 | 2 3 6 7) in 32-bit groups; undo that.
      const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(b[ib].qs + 32 * k4), _mm256_permutevar8x32_epi32(p, perm));
    }
    b[ib].d = 1.0f / iscale;
  }
}

void mm_q8_0_avx2(MatmulKernels& mk) {
  mk.vec_dot = &vec_dot_cols<PlainKernel<BlockQ8_0>>;
  mk.gemm = &gemm_cols<PlainKernel<BlockQ8_0>>;
  mk.interleaved = {"q8_0x8", kRows, &group_bytes<kQ8_0GroupBlock, kQk>, &q8_side_bytes, &prepare_side_q8<0>,
                    &pack_q8<BlockQ8_0, kQ8_0GroupBlock, 32>, &gemm_groups<kQk, kQ8_0GroupBlock, 6, TileQ8_0>};
}
void mm_q4_0_avx2(MatmulKernels& mk) {
  mk.vec_dot = &vec_dot_cols<PlainKernel<BlockQ4_0>>;
  mk.gemm = &gemm_cols<PlainKernel<BlockQ4_0>>;
  mk.interleaved = {"q4_0x8", kRows, &group_bytes<kQ4_0GroupBlock, kQk>, &q8_side_bytes, &prepare_side_q8<8>,
                    &pack_q8<BlockQ4_0, kQ4_0GroupBlock, 16>, &gemm_groups<kQk, kQ4_0GroupBlock, 6, TileQ4_0>};
}
void mm_q5_0_avx2(MatmulKernels& mk) {
  mk.vec_dot = &vec_dot_cols<PlainKernel<BlockQ5_0>>;
  mk.gemm = &gemm_cols<PlainKernel<BlockQ5_0>>;
  mk.interleaved = {"q5_0x8t", kRows, &group_bytes<kQ5_0GroupBlock, kQk>, &q8_side_bytes, &prepare_side_q8<16>,
                    &pack_q5_0, &gemm_groups<kQk, kQ5_0GroupBlock, 6, TileQ5_0>};
}
void mm_q4_k_avx2(MatmulKernels& mk) {
  mk.vec_dot = &vec_dot_cols<PlainKMinKernel<BlockQ4_K>>;
  mk.gemm = &gemm_cols<PlainKMinKernel<BlockQ4_K>>;
  mk.interleaved = {"q4_Kx8", kRows, &group_bytes<kQ4_KGroupBlock, kQkK>, &q4_k_side_bytes, &prepare_side_q4_k,
                    &pack_kmin<BlockQ4_K>, &gemm_groups<kQkK, kQ4_KGroupBlock, 4, TileQ4_K>};
}

void mm_q5_k_avx2(MatmulKernels& mk) {
  mk.vec_dot = &vec_dot_cols<PlainKMinKernel<BlockQ5_K>>;
  mk.gemm = &gemm_cols<PlainKMinKernel<BlockQ5_K>>;
  mk.interleaved = {"q5_Kx8", kRows, &group_bytes<kQ5_KGroupBlock, kQkK>, &q4_k_side_bytes, &prepare_side_q4_k,
                    &pack_kmin<BlockQ5_K>, &gemm_groups<kQkK, kQ5_KGroupBlock, 4, TileQ5_K>};
}

// iq4_xs: the row kernels are the i-quants' (iq_simd.h), the interleaved layout is here.
void mm_iq4_xs_avx2(MatmulKernels& mk) {
  mk.vec_dot = &vec_dot_cols<IqKKernel<WidenIQ4_XS>>;
  mk.gemm = &gemm_cols<IqKKernel<WidenIQ4_XS>>;
  mk.interleaved = {"iq4_xsx8", kRows, &group_bytes<kIQ4_XSGroupBlock, kQkK>, &iq4_xs_side_bytes, &prepare_side_iq4_xs,
                    &pack_iq4_xs, &gemm_groups<kQkK, kIQ4_XSGroupBlock, 4, TileIQ4_XS>};
}

void mm_q6_k_avx2(MatmulKernels& mk) {
  mk.vec_dot = &vec_dot_cols<PlainQ6_KKernel>;
  mk.gemm = &gemm_cols<PlainQ6_KKernel>;
  mk.interleaved = {"q6_Kx8p", kRows, &group_bytes<kQ6_KGroupBlock, kQkK>, &no_side_bytes, nullptr,
                    &pack_q6_k, &gemm_groups<kQkK, kQ6_KGroupBlock, 6, TileQ6_K>};
}

}  // namespace lumen::kernels
