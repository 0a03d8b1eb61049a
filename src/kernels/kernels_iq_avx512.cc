// AVX-512 (VNNI) prefill panels of the 256-element i-quants: the type table's AVX-512 entries
// (isa_kernels.h). Compiled with the AVX-512 flags; only reached when
// cpu_features().has_avx512_vnni(). Each row's 32-element chunks are unpacked as iq_simd.h
// does (iq_block_values) and stored as u = v + 128 in the 16-element sub-block panel of
// matmul_avx512_common.h (offset shift 7); the result is then multiplied by kScaleMul, as
// the reference's is. Bit for bit the scalar reference.
//
// Decode (vec_dot, gemm tiles) is iq_simd.h's row kernel compiled here: the grid types'
// signs go onto the activations by one masked subtract (AVX-512BW) and the scale step is
// vpdpwssd. iq4_xs keeps the AVX2 table's row kernel (compiled here it measured no faster,
// 1 column: 0.88-1.07x) and its interleaved layout (iq4_xsx16) in
// matmul_interleaved_avx512.cc; IQ4_NL
// (32-element blocks, q8_0 activations) is with the q8_0 / q4_0 kernels in matmul_avx512.cc.
#include "kernels/matmul_avx512_common.h"
// matmul_avx512_common.h first: its pragmas must precede <immintrin.h>.
#include "kernels/iq_simd.h"
#include "kernels/isa_kernels.h"

namespace lumen::kernels {
namespace {

size_t iq_panel_bytes(int64_t n) { return static_cast<size_t>(n / kQkK) * kQ6KPanelBlockBytes; }
size_t iq_no_side_bytes(int64_t) { return 0; }

template <typename W>
void pack_iq_panel(int64_t n, const std::byte* w, size_t w_stride, int64_t n_rows, std::byte* panel) {
  using Block = typename W::Block;
  const int64_t nb = n / kQkK;
  const __m256i bias = _mm256_set1_epi8(static_cast<char>(0x80));
  const Block* rows[kRows];
  for (int r = 0; r < kRows; ++r) rows[r] = reinterpret_cast<const Block*>(w + (r < n_rows ? r : n_rows - 1) * w_stride);
  for (int64_t ib = 0; ib < nb; ++ib) {
    prefetch_rows_ahead(rows, ib, nb);
    std::byte* pb = panel + ib * kQ6KPanelBlockBytes;
    // Chunk k (elements 32k .. 32k+31) is sub-blocks 2k, 2k + 1: 8 dwords in the panel's
    // [s][g] order.
    __m256i v[kRows][8];
    for (int r = 0; r < kRows; ++r) iq_block_values<W>(rows[r][ib], v[r]);
    for (int k = 0; k < 8; ++k) {
      __m256i u[kRows];
      for (int r = 0; r < kRows; ++r) u[r] = _mm256_xor_si256(v[r][k], bias);
      store_panel_group(u, pb + k * 512);
    }
    for (int r = 0; r < kRows; ++r) {
      const Block& b = rows[r][ib];
      int16_t sc[16];
      W::scales(b, sc);
      for (int s = 0; s < 16; ++s) {
        const int32_t scv = sc[s];
        std::memcpy(pb + 4096 + s * 64 + r * 4, &scv, 4);
      }
      for (int k = 0; k < 8; ++k) {
        const uint32_t pair =
            static_cast<uint16_t>(sc[2 * k]) | static_cast<uint32_t>(static_cast<uint16_t>(sc[2 * k + 1])) << 16;
        std::memcpy(pb + 5120 + k * 64 + r * 4, &pair, 4);
      }
      const float d = f16(W::d_bits(b));
      std::memcpy(pb + 5632 + r * 4, &d, 4);
    }
  }
}

template <int C> struct TileIq {
  static void run(int64_t nb, const std::byte* p, const std::byte* x, size_t xs, const std::byte* s, size_t ss,
                  __mmask16 m, float* y, int64_t ys) { panel_tile_k16<C, 7>(nb, p, x, xs, s, ss, m, y, ys); }
};

// The reference's result is acc * kScaleMul: the same product of the same floats here.
template <typename W>
void panel_gemm_iq(int64_t n, const std::byte* panel, int64_t n_rows, const std::byte* x, size_t xs,
                   const std::byte* side, size_t ss, int64_t n_cols, float* y, int64_t ys) {
  TileSet<4, TileIq>::run(n / kQkK, panel, n_rows, x, xs, side, ss, n_cols, y, ys);
  if constexpr (W::kScaleMul != 1.0f) {
    const __mmask16 mask = row_mask(n_rows);
    const __m512 mul = _mm512_set1_ps(W::kScaleMul);
    for (int64_t c = 0; c < n_cols; ++c)
      _mm512_mask_storeu_ps(y + c * ys, mask, _mm512_mul_ps(_mm512_maskz_loadu_ps(mask, y + c * ys), mul));
  }
}

// Below this many activation rows the row kernels win (packing is not amortised).
constexpr int32_t kIqPanelMinCols = 8;

template <typename W>
void set_iq_k(MatmulKernels& mk) {
  mk.vec_dot = &vec_dot_cols<IqKKernel<W>>;
  mk.gemm = &gemm_cols<IqKKernel<W>>;
  mk.panel = {kRows, kIqPanelMinCols, &iq_panel_bytes, &iq_no_side_bytes, nullptr, &pack_iq_panel<W>,
              &panel_gemm_iq<W>};
}

}  // namespace

void mm_iq4_xs_avx512(MatmulKernels& mk) { set_iq_k<WidenIQ4_XS>(mk); }
void mm_iq3_s_avx512(MatmulKernels& mk) { set_iq_k<WidenIQ3_S>(mk); }
void mm_iq3_xxs_avx512(MatmulKernels& mk) { set_iq_k<WidenIQ3_XXS>(mk); }
void mm_iq2_s_avx512(MatmulKernels& mk) { set_iq_k<WidenIQ2_S>(mk); }
void mm_iq2_xs_avx512(MatmulKernels& mk) { set_iq_k<WidenIQ2_XS>(mk); }
void mm_iq2_xxs_avx512(MatmulKernels& mk) { set_iq_k<WidenIQ2_XXS>(mk); }
void mm_iq1_s_avx512(MatmulKernels& mk) { set_iq_k<WidenIQ1_S>(mk); }
void mm_iq1_m_avx512(MatmulKernels& mk) { set_iq_k<WidenIQ1_M>(mk); }

}  // namespace lumen::kernels
