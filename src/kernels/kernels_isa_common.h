// Building blocks shared by the kernel translation units (scalar and per-ISA). Everything
// is in an anonymous namespace on purpose: each TU gets its own copy compiled with its own
// ISA flags, and no symbol can be shared (and mixed up by the linker) between them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/kernel_table.h"
#include "kernels/quant_blocks.h"

namespace lumen::kernels {
namespace {  // NOLINT(google-build-namespaces): deliberate, see above

// A gemm tile made of vec_dot calls: rows outer so each weight row is read once per tile
// and stays in L1 while it meets every activation row of the tile.
template <VecDotFn kVecDot>
void gemm_from_vec_dot(int64_t n, const std::byte* w, size_t w_stride, int64_t n_rows,
                       const std::byte* x, size_t x_stride, int64_t n_cols, float* y,
                       int64_t y_stride) {
  for (int64_t r = 0; r < n_rows; ++r)
    for (int64_t t = 0; t < n_cols; ++t)
      y[t * y_stride + r] = kVecDot(n, w + r * w_stride, x + t * x_stride);
}

// Kernel::cols<NC>(n, w, x, x_stride, out): out[c] = dot(w, x + c * x_stride), c < NC,
// with per-column arithmetic independent of NC (so gemm_cols == vec_dot_cols bit for bit).
constexpr int kMaxCols = 4;

template <typename Kernel>
float vec_dot_cols(int64_t n, const std::byte* w, const std::byte* x) {
  float out;
  Kernel::template cols<1>(n, w, x, 0, &out);
  return out;
}

template <typename Kernel>
void gemm_cols(int64_t n, const std::byte* w, size_t w_stride, int64_t n_rows,
               const std::byte* x, size_t x_stride, int64_t n_cols, float* y,
               int64_t y_stride) {
  float out[kMaxCols];
  for (int64_t r = 0; r < n_rows; ++r) {
    const std::byte* wr = w + r * w_stride;
    int64_t t = 0;
    for (; t + kMaxCols <= n_cols; t += kMaxCols) {
      Kernel::template cols<kMaxCols>(n, wr, x + t * x_stride, x_stride, out);
      for (int c = 0; c < kMaxCols; ++c) y[(t + c) * y_stride + r] = out[c];
    }
    const int64_t rest = n_cols - t;
    const std::byte* xt = x + t * x_stride;
    if (rest == 3) Kernel::template cols<3>(n, wr, xt, x_stride, out);
    if (rest == 2) Kernel::template cols<2>(n, wr, xt, x_stride, out);
    if (rest == 1) Kernel::template cols<1>(n, wr, xt, x_stride, out);
    for (int64_t c = 0; c < rest; ++c) y[(t + c) * y_stride + r] = out[c];
  }
}

// Group attention entries made of the single-head ones (tables without a dedicated
// group kernel): bit for bit the single-head results by construction.
template <AttnScoresF32Fn kOne>
void attn_scores_group_loop(const float* k, int64_t n, const float* q, int32_t n_heads, int32_t hd,
                            float scale, float* scores, size_t s_stride) {
  for (int32_t h = 0; h < n_heads; ++h) kOne(k, n, q + static_cast<int64_t>(h) * hd, hd, scale, scores + h * s_stride);
}
template <AttnAccumF32Fn kOne>
void attn_accum_group_loop(const float* p, size_t p_stride, const float* v, int64_t n, int32_t n_heads,
                           int32_t hd, float* acc, size_t a_stride) {
  for (int32_t h = 0; h < n_heads; ++h) kOne(p + h * p_stride, v, n, hd, acc + h * a_stride);
}

// All 8 scales and mins of a q4_K block (= q4_k_scale_min for j = 0..7), four at a time
// with 32-bit masks: bytes 0..3 hold sc[0..3] (low 6 bits) and the top bits of sc[4..7],
// bytes 4..7 m[0..3] and the top bits of m[4..7], bytes 8..11 the low nibbles of
// sc[4..7] (low) and m[4..7] (high).
inline void unpack_q4_k_scales(const uint8_t* packed, uint8_t sc[8], uint8_t m[8]) {
  uint32_t u[3];
  std::memcpy(u, packed, 12);
  constexpr uint32_t kLow6 = 0x3f3f3f3f, kLow4 = 0x0f0f0f0f, kLow2 = 0x03030303;
  const uint32_t sc_lo = u[0] & kLow6;
  const uint32_t m_lo = u[1] & kLow6;
  const uint32_t sc_hi = (u[2] & kLow4) | (((u[0] >> 6) & kLow2) << 4);
  const uint32_t m_hi = ((u[2] >> 4) & kLow4) | (((u[1] >> 6) & kLow2) << 4);
  std::memcpy(sc, &sc_lo, 4);
  std::memcpy(sc + 4, &sc_hi, 4);
  std::memcpy(m, &m_lo, 4);
  std::memcpy(m + 4, &m_hi, 4);
}

}  // namespace
}  // namespace lumen::kernels
