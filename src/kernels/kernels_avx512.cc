// AVX-512 (F/BW/VL/DQ + VNNI) kernels. Compiled with the AVX-512 flags (cmake/lumen.cmake);
// only reached when cpu_features().has_avx512_vnni(). Entries without an AVX-512 version
// keep their AVX2 one (the table is built scalar -> avx2 -> avx512).
//
// Internal linkage only, no external inline functions from headers (see quant_blocks.h).
//
// Numerics against the scalar reference:
//   q8_0 / q4_0 x q8_0   integer products exact (VNNI, unsigned-offset form below); the
//                        f32 block terms accumulate in 8 lanes
//   q4_K / q6_K x q8_K   as the AVX2 kernels, with vpdpwssd for the scale multiply-add
//   f32 / f16 / bf16     AVX2 kernels kept: 16-lane versions measured slower on Zen 4
//                        (512-bit ops are double-pumped there), and vdpbf16ps would
//                        flush subnormals
// Within this table gemm and vec_dot are bit-identical (same per-(row, column) arithmetic
// whatever the tile shape), so a token's result never depends on the batch it came in.
#include <immintrin.h>

#include <cstdint>

#include "kernels/kernel_table.h"
#include "kernels/kernels_isa_common.h"
#include "kernels/quant_blocks.h"

namespace lumen::kernels {
namespace {

float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

float hsum128(__m128 s) {
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

float f16(uint16_t h) { return _cvtsh_ss(h); }
__m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
__m128i load128(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }

// ---- q8_0 / q4_0 weights x q8_0 activations: register-tiled VNNI ------------------------
//
// vpdpbusd multiplies unsigned by signed bytes, so the weights go in with an offset:
//   q4_0:  u = q       (0..15),  w = u - 8    ->  sum w x = sum u x - 8 * sum x
//   q8_0:  u = q ^ 0x80 (0..255), w = u - 128  ->  sum w x = sum u x - 128 * sum x
// The correction -k * sum x (per lane, from vpdpbusd(1, x)) depends only on the activation
// block, so it is computed once per column and used as the accumulator input of every
// row's vpdpbusd. Each lane's int32 is exact; lanes accumulate (d_w * d_x) * lane in f32.

struct WeightsQ4_0 {
  using Block = BlockQ4_0;
  static constexpr int kOffsetShift = 3;  // 8
  static __m256i unsigned_quants(const BlockQ4_0& b) {
    const __m128i q = load128(b.qs);
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), _mm256_set1_epi8(15));
  }
};

struct WeightsQ8_0 {
  using Block = BlockQ8_0;
  static constexpr int kOffsetShift = 7;  // 128
  static __m256i unsigned_quants(const BlockQ8_0& b) {
    return _mm256_xor_si256(load256(b.qs), _mm256_set1_epi8(static_cast<char>(0x80)));
  }
};

// y[c * y_stride + r] = dot(w row r, x row c) for r < R, c < C.
template <typename W, int R, int C>
void tile_q8_0(int64_t n, const std::byte* w, size_t ws, const std::byte* x, size_t xs, float* y,
               int64_t y_stride) {
  using Block = typename W::Block;
  const __m256i ones = _mm256_set1_epi8(1);
  __m256 acc[R][C];
  #pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
    #pragma GCC unroll 8
    for (int c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_ps();
  for (int64_t ib = 0; ib < n / kQk; ++ib) {
    __m256i xq[C], corr[C];
    __m256 dx[C];
    #pragma GCC unroll 8
    for (int c = 0; c < C; ++c) {
      const BlockQ8_0& bx = reinterpret_cast<const BlockQ8_0*>(x + c * xs)[ib];
      xq[c] = load256(bx.qs);
      const __m256i sum_x = _mm256_dpbusd_epi32(_mm256_setzero_si256(), ones, xq[c]);
      corr[c] = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(sum_x, W::kOffsetShift));
      dx[c] = _mm256_set1_ps(f16(bx.d_f16));
    }
    #pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const Block& bw = reinterpret_cast<const Block*>(w + r * ws)[ib];
      const __m256i qu = W::unsigned_quants(bw);
      const __m256 dw = _mm256_set1_ps(f16(bw.d_f16));
      #pragma GCC unroll 8
      for (int c = 0; c < C; ++c) {
        const __m256i s = _mm256_dpbusd_epi32(corr[c], qu, xq[c]);
        acc[r][c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(dw, dx[c]), acc[r][c]);
      }
    }
  }
  #pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
    #pragma GCC unroll 8
    for (int c = 0; c < C; ++c) y[c * y_stride + r] = hsum(acc[r][c]);
}

template <typename W>
float vec_dot_q8_0_tiled(int64_t n, const std::byte* w, const std::byte* x) {
  float out;
  tile_q8_0<W, 1, 1>(n, w, 0, x, 0, &out, 1);
  return out;
}

constexpr int kTileRows = 4;
constexpr int kTileCols = 4;

template <typename W, int R>
void tile_rows_all_cols(int64_t n, const std::byte* w, size_t ws, const std::byte* x, size_t xs,
                        int64_t n_cols, float* y, int64_t y_stride) {
  int64_t c0 = 0;
  for (; c0 + kTileCols <= n_cols; c0 += kTileCols)
    tile_q8_0<W, R, kTileCols>(n, w, ws, x + c0 * xs, xs, y + c0 * y_stride, y_stride);
  const std::byte* xc = x + c0 * xs;
  float* yc = y + c0 * y_stride;
  switch (n_cols - c0) {
    case 3: tile_q8_0<W, R, 3>(n, w, ws, xc, xs, yc, y_stride); break;
    case 2: tile_q8_0<W, R, 2>(n, w, ws, xc, xs, yc, y_stride); break;
    case 1: tile_q8_0<W, R, 1>(n, w, ws, xc, xs, yc, y_stride); break;
    default: break;
  }
}

template <typename W>
void gemm_q8_0_tiled(int64_t n, const std::byte* w, size_t ws, int64_t n_rows, const std::byte* x,
                     size_t xs, int64_t n_cols, float* y, int64_t y_stride) {
  int64_t r0 = 0;
  for (; r0 + kTileRows <= n_rows; r0 += kTileRows)
    tile_rows_all_cols<W, kTileRows>(n, w + r0 * ws, ws, x, xs, n_cols, y + r0, y_stride);
  const std::byte* wr = w + r0 * ws;
  switch (n_rows - r0) {
    case 3: tile_rows_all_cols<W, 3>(n, wr, ws, x, xs, n_cols, y + r0, y_stride); break;
    case 2: tile_rows_all_cols<W, 2>(n, wr, ws, x, xs, n_cols, y + r0, y_stride); break;
    case 1: tile_rows_all_cols<W, 1>(n, wr, ws, x, xs, n_cols, y + r0, y_stride); break;
    default: break;
  }
}

// ---- K-quants: the AVX2 structure with vpdpwssd for the 16-bit scale multiply-add -------

struct Q4_KKernel {
  template <int NC>
  static void cols(int64_t n, const std::byte* w, const std::byte* x, size_t xs, float* out) {
    const auto* bw = reinterpret_cast<const BlockQ4_K*>(w);
    const __m256i m4 = _mm256_set1_epi8(15);
    __m256 acc[NC];
    __m128 acc_m[NC];
    #pragma GCC unroll 8
    for (int c = 0; c < NC; ++c) {
      acc[c] = _mm256_setzero_ps();
      acc_m[c] = _mm_setzero_ps();
    }
    for (int64_t ib = 0; ib < n / kQkK; ++ib) {
      const BlockQ4_K& b = bw[ib];
      uint8_t sc[8], mn[8];
      unpack_q4_k_scales(b.scales, sc, mn);
      const __m128i mins = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(mn)));
      const float dw = f16(b.d_f16), dminw = f16(b.dmin_f16);
      __m256i sumi[NC];
      #pragma GCC unroll 8
      for (int c = 0; c < NC; ++c) sumi[c] = _mm256_setzero_si256();
      for (int j = 0; j < 4; ++j) {
        const __m256i q4 = load256(b.qs + 32 * j);
        const __m256i q4l = _mm256_and_si256(q4, m4);
        const __m256i q4h = _mm256_and_si256(_mm256_srli_epi16(q4, 4), m4);
        const __m256i scl = _mm256_set1_epi16(sc[2 * j]);
        const __m256i sch = _mm256_set1_epi16(sc[2 * j + 1]);
        #pragma GCC unroll 8
        for (int c = 0; c < NC; ++c) {
          const int8_t* q8 = reinterpret_cast<const BlockQ8_K*>(x + c * xs)[ib].qs + 64 * j;
          sumi[c] = _mm256_dpwssd_epi32(sumi[c], scl, _mm256_maddubs_epi16(q4l, load256(q8)));
          sumi[c] = _mm256_dpwssd_epi32(sumi[c], sch, _mm256_maddubs_epi16(q4h, load256(q8 + 32)));
        }
      }
      #pragma GCC unroll 8
      for (int c = 0; c < NC; ++c) {
        const BlockQ8_K& bx = reinterpret_cast<const BlockQ8_K*>(x + c * xs)[ib];
        const __m128i q8s = _mm_hadd_epi16(load128(bx.bsums), load128(bx.bsums + 8));
        const __m128i prod = _mm_madd_epi16(mins, q8s);
        acc_m[c] = _mm_fmadd_ps(_mm_set1_ps(-bx.d * dminw), _mm_cvtepi32_ps(prod), acc_m[c]);
        acc[c] = _mm256_fmadd_ps(_mm256_set1_ps(bx.d * dw), _mm256_cvtepi32_ps(sumi[c]), acc[c]);
      }
    }
    #pragma GCC unroll 8
    for (int c = 0; c < NC; ++c) out[c] = hsum(acc[c]) + hsum128(acc_m[c]);
  }
};

void unpack_q6_k_half(const uint8_t* ql, const uint8_t* qh, __m256i q[4]) {
  const __m256i m4 = _mm256_set1_epi8(15);
  const __m256i m2 = _mm256_set1_epi8(3);
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

struct Q6_KKernel {
  template <int NC>
  static void cols(int64_t n, const std::byte* w, const std::byte* x, size_t xs, float* out) {
    const auto* bw = reinterpret_cast<const BlockQ6_K*>(w);
    __m256 acc[NC];
    #pragma GCC unroll 8
    for (int c = 0; c < NC; ++c) acc[c] = _mm256_setzero_ps();
    for (int64_t ib = 0; ib < n / kQkK; ++ib) {
      const BlockQ6_K& b = bw[ib];
      const __m256i scales16 = _mm256_cvtepi8_epi16(load128(b.scales));
      __m256i sumi[NC];
      #pragma GCC unroll 8
      for (int c = 0; c < NC; ++c) sumi[c] = _mm256_setzero_si256();
      for (int h = 0; h < 2; ++h) {
        __m256i q[4];
        unpack_q6_k_half(b.ql + 64 * h, b.qh + 32 * h, q);
        for (int k = 0; k < 4; ++k) {
          const int s = 8 * h + 2 * k;
          const __m256i sv = _mm256_set_m128i(_mm_set1_epi16(b.scales[s + 1]), _mm_set1_epi16(b.scales[s]));
          #pragma GCC unroll 8
          for (int c = 0; c < NC; ++c) {
            const int8_t* q8 = reinterpret_cast<const BlockQ8_K*>(x + c * xs)[ib].qs + 128 * h + 32 * k;
            sumi[c] = _mm256_dpwssd_epi32(sumi[c], sv, _mm256_maddubs_epi16(q[k], load256(q8)));
          }
        }
      }
      #pragma GCC unroll 8
      for (int c = 0; c < NC; ++c) {
        const BlockQ8_K& bx = reinterpret_cast<const BlockQ8_K*>(x + c * xs)[ib];
        const __m256i offset = _mm256_slli_epi32(_mm256_madd_epi16(load256(bx.bsums), scales16), 5);
        const __m256i s = _mm256_sub_epi32(sumi[c], offset);
        acc[c] = _mm256_fmadd_ps(_mm256_set1_ps(bx.d * f16(b.d_f16)), _mm256_cvtepi32_ps(s), acc[c]);
      }
    }
    #pragma GCC unroll 8
    for (int c = 0; c < NC; ++c) out[c] = hsum(acc[c]);
  }
};

}  // namespace

void override_kernels_avx512(KernelTable& t, bool /*has_bf16*/) {
  t.name = "avx512";
  t.mm_q8_0.vec_dot = &vec_dot_q8_0_tiled<WeightsQ8_0>;
  t.mm_q8_0.gemm = &gemm_q8_0_tiled<WeightsQ8_0>;
  t.mm_q4_0.vec_dot = &vec_dot_q8_0_tiled<WeightsQ4_0>;
  t.mm_q4_0.gemm = &gemm_q8_0_tiled<WeightsQ4_0>;
  t.mm_q4_k.vec_dot = &vec_dot_cols<Q4_KKernel>;
  t.mm_q4_k.gemm = &gemm_cols<Q4_KKernel>;
  t.mm_q6_k.vec_dot = &vec_dot_cols<Q6_KKernel>;
  t.mm_q6_k.gemm = &gemm_cols<Q6_KKernel>;
}

}  // namespace lumen::kernels
