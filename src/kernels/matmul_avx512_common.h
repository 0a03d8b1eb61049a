// Building blocks shared by the AVX-512 matmul translation units (matmul_avx512.cc,
// matmul_interleaved_avx512.cc). Include only from *_avx512.cc files (they are compiled
// with the AVX-512 flags); like kernels_isa_common.h, everything is in an anonymous
// namespace so that no AVX-512 symbol can be merged with a baseline one by the linker.
//
// GCC 12 reports the `__Y = __Y` self-initialisation inside _mm512_undefined_*() (used by
// many AVX-512 intrinsics as a don't-care pass-through) as uninitialised use once inlined
// at -O3 (GCC bug 105593, fixed in GCC 13). The pragma must precede <immintrin.h>.
#pragma once
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// C++ defaults to -ffp-contract=fast, which would fuse the reference's separate multiply
// and add into an FMA (and not in the baseline-ISA reference): keep them separate.
#pragma GCC optimize("fp-contract=off")
#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/quant_blocks.h"

namespace lumen::kernels {
namespace {  // NOLINT(google-build-namespaces): deliberate, see above

constexpr int kRows = 16;  // weight rows per decode group and per panel (one zmm of f32)

inline __m512i bcast_i32(const void* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof(v));
  return _mm512_set1_epi32(v);
}
// acc + dpbusd(w, the int32 at p broadcast): the broadcast folded into the instruction as
// an EVEX embedded broadcast ({1to16}), one load-op where _mm512_set1_epi32 of a loaded
// value gives a separate vpbroadcastd (GCC does not fold it). In the one-column q4_K tile:
// 1.08-1.09x (docs/perf.md, session 22).
inline __m512i dpbusd_bcast(__m512i acc, __m512i w, const void* p) {
  asm("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*static_cast<const int32_t*>(p)));
  return acc;
}
inline __m512 bcast_f32(const void* p) {
  float v;
  std::memcpy(&v, p, sizeof(v));
  return _mm512_set1_ps(v);
}
inline __m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
inline __m128i load128(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }
inline __m512i load512(const void* p) { return _mm512_loadu_si512(p); }
inline float f16(uint16_t h) { return _cvtsh_ss(h); }

inline __mmask16 row_mask(int64_t n_rows) {
  return n_rows >= kRows ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << n_rows) - 1);
}

// Side data of a q8_0 activation row for the q8_0 / q4_0 panel and interleaved kernels,
// per 32-element block ib (8 bytes): f32 d_x, int32 -offset * sum(q_x) with offset =
// 1 << kOffsetShift (the unsigned weights' bias: 128 for q8_0, 8 for q4_0).
inline size_t q8_side_bytes(int64_t n) { return static_cast<size_t>(n / kQk) * 8; }
template <int kOffsetShift>
void prepare_side_q8(const std::byte* xq, int64_t n, std::byte* side) {
  const auto* bx = reinterpret_cast<const BlockQ8_0*>(xq);
  const __m256i ones = _mm256_set1_epi8(1);
  for (int64_t ib = 0; ib < n / kQk; ++ib) {
    // sum of the 32 signed quants: vpdpbusd(1, q) gives 8 partial sums.
    const __m256i s8 = _mm256_dpbusd_epi32(_mm256_setzero_si256(), ones, load256(bx[ib].qs));
    __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s8), _mm256_extracti128_si256(s8, 1));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, _MM_SHUFFLE(1, 0, 3, 2)));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, _MM_SHUFFLE(2, 3, 0, 1)));
    const int32_t corr = -(_mm_cvtsi128_si32(s4) * (1 << kOffsetShift));
    const float d = f16(bx[ib].d_f16);
    std::memcpy(side + ib * 8, &d, 4);
    std::memcpy(side + ib * 8 + 4, &corr, 4);
  }
}

// Side data of a q8_1 activation row for the q4_1 / q5_1 panel and interleaved kernels, per
// 32-element block ib (8 bytes, q8_side_bytes): f32 d_x, f32 s_x (the block's two fp16
// widened once per row, not once per weight row group). q4_1 / q5_1 quants are unsigned
// already (w = d * q + m), so there is no offset correction: the min term m_w * s_x is a
// float step of its own (add_min_block).
inline void prepare_side_q8_1(const std::byte* xq, int64_t n, std::byte* side) {
  const auto* bx = reinterpret_cast<const BlockQ8_1*>(xq);
  for (int64_t ib = 0; ib < n / kQk; ++ib) {
    const float d = f16(bx[ib].d_f16), s = f16(bx[ib].s_f16);
    std::memcpy(side + ib * 8, &d, 4);
    std::memcpy(side + ib * 8 + 4, &s, 4);
  }
}

// The reference's float steps of a K-format block for C activation rows (lane r = row r;
// xb: the block's q8_K activation, row c at xb + c * xs), with sign = +1 or -1 (exact):
//   acc   += (d_x * d_w) * (float)sumi          add_k_block<C>(acc, xb, xs, +1, dw, sumi)
//   acc_m += (-d_x * dmin_w) * (float)summ      add_k_block<C>(acc_m, xb, xs, -1, dminw, summ)
template <int C>
[[gnu::always_inline]] inline void add_k_block(__m512* acc, const std::byte* xb, size_t xs, float sign, __m512 d,
                                               const __m512i* sum) {
  #pragma GCC unroll 8
  for (int c = 0; c < C; ++c) {
    float dx;
    std::memcpy(&dx, xb + c * xs + offsetof(BlockQ8_K, d), 4);
    acc[c] = _mm512_add_ps(acc[c], _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(sign * dx), d), _mm512_cvtepi32_ps(sum[c])));
  }
}
// The reference's float step of a q8_0 / q4_0 (q4_1 / q5_1) block for C activation rows
// (side: the block's prepare_side_q8 (prepare_side_q8_1) data, row c at side + c * ss; d_x
// first): acc += (float)sumi * (d_w * d_x).
template <int C>
[[gnu::always_inline]] inline void add_q8_block(__m512* acc, const std::byte* side, size_t ss, __m512 dw,
                                                const __m512i* sumi) {
  #pragma GCC unroll 8
  for (int c = 0; c < C; ++c)
    acc[c] = _mm512_add_ps(acc[c], _mm512_mul_ps(_mm512_cvtepi32_ps(sumi[c]), _mm512_mul_ps(dw, bcast_f32(side + c * ss))));
}
// The reference's min step of a q4_1 / q5_1 block for C activation rows (side: the block's
// prepare_side_q8_1 data, row c at side + c * ss): acc_m += m_w * s_x.
template <int C>
[[gnu::always_inline]] inline void add_min_block(__m512* acc_m, const std::byte* side, size_t ss, __m512 mw) {
  #pragma GCC unroll 8
  for (int c = 0; c < C; ++c) acc_m[c] = _mm512_add_ps(acc_m[c], _mm512_mul_ps(mw, bcast_f32(side + c * ss + 4)));
}
// y[c * ys + r] = acc[c] lane r (+ acc_m[c] lane r when given), for the rows in mask.
template <int C>
[[gnu::always_inline]] inline void store_cols(const __m512* acc, const __m512* acc_m, __mmask16 mask, float* y,
                                              int64_t ys) {
  #pragma GCC unroll 8
  for (int c = 0; c < C; ++c)
    _mm512_mask_storeu_ps(y + c * ys, mask, acc_m ? _mm512_add_ps(acc[c], acc_m[c]) : acc[c]);
}

// Packing reads the weights from memory (each byte once per matmul) in 16 interleaved row
// streams: fetch each row kPackAheadBytes ahead of the block being packed.
constexpr size_t kPackAheadBytes = 512;
template <typename Block>
void prefetch_rows_ahead(const Block* const rows[kRows], int64_t ib, int64_t nb) {
  const int64_t ahead = ib + static_cast<int64_t>(kPackAheadBytes / sizeof(Block)) + 1;
  if (ahead >= nb) return;
  for (int r = 0; r < kRows; ++r) _mm_prefetch(reinterpret_cast<const char*>(rows[r] + ahead), _MM_HINT_T0);
}

// Panel stores: 16 rows' 32 bytes (8 dwords each) of one block into [g = 0..7][r = 0..15]
// dwords (64-byte groups), i.e. a 16 x 8 dword transpose: two 8 x 8 register transposes
// (rows 0-7 and 8-15), each group's halves stored side by side.
inline void transpose8x8(const __m256i* r, __m256i* out) {
  __m256i t[8], s8[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 2; ++i) {
    s8[4 * i + 0] = _mm256_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
    s8[4 * i + 1] = _mm256_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
    s8[4 * i + 2] = _mm256_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    s8[4 * i + 3] = _mm256_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
  for (int g = 0; g < 4; ++g) {
    out[g] = _mm256_permute2x128_si256(s8[g], s8[4 + g], 0x20);
    out[g + 4] = _mm256_permute2x128_si256(s8[g], s8[4 + g], 0x31);
  }
}
inline void store_panel_group(const __m256i u[kRows], std::byte* pb) {
  __m256i lo[8], hi[8];
  transpose8x8(u, lo);
  transpose8x8(u + 8, hi);
  for (int g = 0; g < 8; ++g) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(pb + g * 64), lo[g]);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(pb + g * 64 + 32), hi[g]);
  }
}

// ---- the 16-element sub-block panel (q6_K, the 256-element i-quants) -------------------
//
// Per 256-element block ib (5696 bytes):
//   [s = 0..15][g = 0..3][r] 4 bytes  unsigned quants u of elements 16s + 4g .. +3  4096
//   [s][r] int32                      scale sc[s] of sub-block s                    1024
//   [k = 0..7][r] int32               sc[2k], sc[2k+1] as two int16                  512
//   [r] f32 d_w                                                                      64
// with w = d_w * sc[s] * (u - (1 << kOffsetShift)): per block and row the tile forms
//   sumi = sum_s sc[s] * (u . q8 over s) - (1 << kOffsetShift) * sum_s sc[s] * bsums[s]
// (exact int32), then the reference's float step acc += (d_x * d_w) * (float)sumi.
constexpr size_t kQ6KPanelBlockBytes = 4096 + 1024 + 512 + 64;

// sumi[c] = sum_s sc[s] * (u . q8 over sub-block s), exact int32, for panels whose block
// starts with kSub sub-blocks of kGroups x 64 bytes of unsigned quants (4 per row and
// group) followed by [s][r] int32 scales at byte 4096: the q6_K / i-quant panel (16 x 4)
// and the q4_K panel (8 x 8).
template <int C, int kSub, int kGroups>
[[gnu::always_inline]] inline void scaled_subblock_sums(const std::byte* pb, const std::byte* xb, size_t xs,
                                                        __m512i* sumi) {
  static_assert(kSub * kGroups * 64 == 4096);
  #pragma GCC unroll 8
  for (int c = 0; c < C; ++c) sumi[c] = _mm512_setzero_si512();
  for (int s = 0; s < kSub; ++s) {
    __m512i t[C];
    #pragma GCC unroll 8
    for (int c = 0; c < C; ++c) t[c] = _mm512_setzero_si512();
    const std::byte* ps = pb + s * kGroups * 64;
    const std::byte* xs_ = xb + offsetof(BlockQ8_K, qs) + 4 * kGroups * s;
    #pragma GCC unroll 8
    for (int gi = 0; gi < kGroups; ++gi) {
      const __m512i wv = load512(ps + 64 * gi);
      #pragma GCC unroll 8
      for (int c = 0; c < C; ++c) t[c] = dpbusd_bcast(t[c], wv, xs_ + c * xs + 4 * gi);
    }
    const __m512i scv = load512(pb + 4096 + s * 64);
    #pragma GCC unroll 8
    for (int c = 0; c < C; ++c) sumi[c] = _mm512_add_epi32(sumi[c], _mm512_mullo_epi32(t[c], scv));
  }
}

// out[c] = sum_k (int16 pairs at w + 64 k) . (bsums pair k of column c), k = 0 .. 7, exact
// int32: the panels' scale (q6_K / i-quant offset) or min (q4_K) products with the
// activations' 16 sub-block sums.
template <int C>
[[gnu::always_inline]] inline void bsum_pair_dots(const std::byte* w, const std::byte* xb, size_t xs, __m512i* out) {
  #pragma GCC unroll 8
  for (int c = 0; c < C; ++c) out[c] = _mm512_setzero_si512();
  #pragma GCC unroll 8
  for (int k = 0; k < 8; ++k) {
    const __m512i sv = load512(w + k * 64);
    #pragma GCC unroll 8
    for (int c = 0; c < C; ++c)
      out[c] = _mm512_dpwssd_epi32(out[c], sv, bcast_i32(xb + c * xs + offsetof(BlockQ8_K, bsums) + 4 * k));
  }
}

template <int C, int kOffsetShift>
void panel_tile_k16(int64_t nb, const std::byte* panel, const std::byte* x, size_t xs,
                    const std::byte*, size_t, __mmask16 mask, float* y, int64_t ys) {
  __m512 acc[C];
  #pragma GCC unroll 8
  for (int c = 0; c < C; ++c) acc[c] = _mm512_setzero_ps();
  for (int64_t ib = 0; ib < nb; ++ib) {
    const std::byte* pb = panel + ib * kQ6KPanelBlockBytes;
    const std::byte* xb = x + ib * sizeof(BlockQ8_K);
    __m512i sumi[C];
    scaled_subblock_sums<C, 16, 4>(pb, xb, xs, sumi);
    // The offset: (1 << kOffsetShift) * sum_s sc[s] * bsums[s].
    __m512i bs[C];
    bsum_pair_dots<C>(pb + 5120, xb, xs, bs);
    #pragma GCC unroll 8
    for (int c = 0; c < C; ++c) sumi[c] = _mm512_sub_epi32(sumi[c], _mm512_slli_epi32(bs[c], kOffsetShift));
    add_k_block<C>(acc, xb, xs, 1.0f, _mm512_loadu_ps(reinterpret_cast<const float*>(pb + 5632)), sumi);
  }
  store_cols<C>(acc, nullptr, mask, y, ys);
}

// A panel of up to 16 rows against n_cols activation rows in chunks of at most kCols,
// as equal as they can be (9 columns at kCols 4: 3 + 3 + 3, not 4 + 4 + 1: a narrow tile
// unpacks the weights for fewer columns, and a speculative verify's 9 columns would pay a
// whole extra unpack for one): Tile<C>::run(nb, panel, x, xs, side, ss, mask, y, ys)
// handles C columns. Each column's arithmetic is the same in every width.
template <int kCols, template <int> class Tile>
struct TileSet {
  static void run(int64_t nb, const std::byte* panel, int64_t n_rows, const std::byte* x, size_t xs,
                  const std::byte* side, size_t ss, int64_t n_cols, float* y, int64_t ys) {
    const __mmask16 mask = row_mask(n_rows);
    for (int64_t c0 = 0; c0 < n_cols;) {
      const int64_t rest = n_cols - c0, n_chunks = (rest + kCols - 1) / kCols;
      const int64_t width = (rest + n_chunks - 1) / n_chunks;
      run_width(width, nb, panel, x + c0 * xs, xs, side + c0 * ss, ss, mask, y + c0 * ys, ys);
      c0 += width;
    }
  }
  template <int C = kCols>
  static void run_width(int64_t width, int64_t nb, const std::byte* panel, const std::byte* x, size_t xs,
                        const std::byte* side, size_t ss, __mmask16 mask, float* y, int64_t ys) {
    if constexpr (C >= 1) {
      if (width == C) {
        Tile<C>::run(nb, panel, x, xs, side, ss, mask, y, ys);
      } else {
        run_width<C - 1>(width, nb, panel, x, xs, side, ss, mask, y, ys);
      }
    }
  }
};

}  // namespace
}  // namespace lumen::kernels
