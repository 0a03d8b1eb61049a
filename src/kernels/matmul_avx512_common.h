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

__m512i bcast_i32(const void* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof(v));
  return _mm512_set1_epi32(v);
}
__m512 bcast_f32(const void* p) {
  float v;
  std::memcpy(&v, p, sizeof(v));
  return _mm512_set1_ps(v);
}
__m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
__m128i load128(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }
__m512i load512(const void* p) { return _mm512_loadu_si512(p); }
float f16(uint16_t h) { return _cvtsh_ss(h); }

__mmask16 row_mask(int64_t n_rows) {
  return n_rows >= kRows ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << n_rows) - 1);
}

// Side data of a q8_0 activation row for the q8_0 / q4_0 panel and interleaved kernels,
// per 32-element block ib (8 bytes): f32 d_x, int32 -offset * sum(q_x) with offset =
// 1 << kOffsetShift (the unsigned weights' bias: 128 for q8_0, 8 for q4_0).
size_t q8_side_bytes(int64_t n) { return static_cast<size_t>(n / kQk) * 8; }
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
// The reference's float step of a q8_0 / q4_0 block for C activation rows (side: the block's
// prepare_side_q8 data, row c at side + c * ss): acc += (float)sumi * (d_w * d_x).
template <int C>
[[gnu::always_inline]] inline void add_q8_block(__m512* acc, const std::byte* side, size_t ss, __m512 dw,
                                                const __m512i* sumi) {
  #pragma GCC unroll 8
  for (int c = 0; c < C; ++c)
    acc[c] = _mm512_add_ps(acc[c], _mm512_mul_ps(_mm512_cvtepi32_ps(sumi[c]), _mm512_mul_ps(dw, bcast_f32(side + c * ss))));
}
// y[c * ys + r] = acc[c] lane r (+ acc_m[c] lane r when given), for the rows in mask.
template <int C>
[[gnu::always_inline]] inline void store_cols(const __m512* acc, const __m512* acc_m, __mmask16 mask, float* y,
                                              int64_t ys) {
  #pragma GCC unroll 8
  for (int c = 0; c < C; ++c)
    _mm512_mask_storeu_ps(y + c * ys, mask, acc_m ? _mm512_add_ps(acc[c], acc_m[c]) : acc[c]);
}

// A panel of up to 16 rows against n_cols activation rows, kCols at a time, the tail by the
// narrower tiles: Tile<C>::run(nb, panel, x, xs, side, ss, mask, y, ys) handles C columns.
template <int kCols, template <int> class Tile>
struct TileSet {
  static void run(int64_t nb, const std::byte* panel, int64_t n_rows, const std::byte* x, size_t xs,
                  const std::byte* side, size_t ss, int64_t n_cols, float* y, int64_t ys) {
    const __mmask16 mask = row_mask(n_rows);
    int64_t c0 = 0;
    for (; c0 + kCols <= n_cols; c0 += kCols)
      Tile<kCols>::run(nb, panel, x + c0 * xs, xs, side + c0 * ss, ss, mask, y + c0 * ys, ys);
    const int64_t rest = n_cols - c0;
    if (rest > 0) tail(rest, nb, panel, x + c0 * xs, xs, side + c0 * ss, ss, mask, y + c0 * ys, ys);
  }
  template <int C = kCols - 1>
  static void tail(int64_t rest, int64_t nb, const std::byte* panel, const std::byte* x, size_t xs,
                   const std::byte* side, size_t ss, __mmask16 mask, float* y, int64_t ys) {
    if constexpr (C >= 1) {
      if (rest == C) {
        Tile<C>::run(nb, panel, x, xs, side, ss, mask, y, ys);
      } else {
        tail<C - 1>(rest, nb, panel, x, xs, side, ss, mask, y, ys);
      }
    }
  }
};

}  // namespace
}  // namespace lumen::kernels
