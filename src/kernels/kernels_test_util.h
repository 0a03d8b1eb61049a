// Helpers shared by the kernels tests: random raw blocks of every weight format and
// double-precision references. Test-only (included from *_test.cc).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

#include "base/fp16.h"
#include "kernels/kernels_ref.h"
#include "kernels/quant_blocks.h"
#include "tensor/dtype.h"

namespace lumen::kernels::testing {

inline std::vector<float> random_floats(std::mt19937& rng, int64_t n, float scale = 1.0f) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& f : v) f = dist(rng);
  return v;
}

// Random raw bytes for n_rows rows of n elements of `dtype`, with every fp16 scale set to a
// finite value of magnitude ~`scale` (random bytes would give inf/nan scales). Every
// bit pattern of the quants is valid, so this covers all nibble / high-bit combinations.
inline std::vector<std::byte> random_weights(std::mt19937& rng, DType dtype, int64_t n_rows,
                                             int64_t n, float scale = 0.05f) {
  const size_t bytes = row_bytes(dtype, n) * static_cast<size_t>(n_rows);
  std::vector<std::byte> w(bytes);
  std::uniform_int_distribution<int> byte_dist(0, 255);
  for (std::byte& b : w) b = static_cast<std::byte>(byte_dist(rng));
  std::uniform_real_distribution<float> sc(0.25f * scale, scale);
  auto f16 = [&] { return f32_to_fp16(sc(rng)); };
  const int64_t n_elems = n * n_rows;
  switch (dtype) {
    case DType::kF32: {
      auto* f = reinterpret_cast<float*>(w.data());
      std::normal_distribution<float> nd(0.0f, 1.0f);
      for (int64_t i = 0; i < n_elems; ++i) f[i] = nd(rng);
      break;
    }
    case DType::kF16: {
      auto* h = reinterpret_cast<uint16_t*>(w.data());
      std::normal_distribution<float> nd(0.0f, 1.0f);
      for (int64_t i = 0; i < n_elems; ++i) h[i] = f32_to_fp16(nd(rng));
      break;
    }
    case DType::kBF16: {
      auto* h = reinterpret_cast<uint16_t*>(w.data());
      std::normal_distribution<float> nd(0.0f, 1.0f);
      for (int64_t i = 0; i < n_elems; ++i) h[i] = f32_to_bf16(nd(rng));
      break;
    }
    case DType::kQ8_0: {
      auto* b = reinterpret_cast<BlockQ8_0*>(w.data());
      for (int64_t i = 0; i < n_elems / kQk; ++i) b[i].d_f16 = f16();
      break;
    }
    case DType::kQ4_0: {
      auto* b = reinterpret_cast<BlockQ4_0*>(w.data());
      for (int64_t i = 0; i < n_elems / kQk; ++i) b[i].d_f16 = f16();
      break;
    }
    case DType::kQ4_K: {
      auto* b = reinterpret_cast<BlockQ4_K*>(w.data());
      for (int64_t i = 0; i < n_elems / kQkK; ++i) {
        b[i].d_f16 = f32_to_fp16(sc(rng) / 16);
        b[i].dmin_f16 = f32_to_fp16(sc(rng) / 32);
      }
      break;
    }
    case DType::kQ6_K: {
      auto* b = reinterpret_cast<BlockQ6_K*>(w.data());
      for (int64_t i = 0; i < n_elems / kQkK; ++i) b[i].d_f16 = f32_to_fp16(sc(rng) / 16);
      break;
    }
    default: break;
  }
  return w;
}

inline std::vector<float> dequantize(DType dtype, const std::byte* src, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n));
  ref::dequantize_row(dtype, src, out.data(), n);
  return out;
}

inline double dot_double(const float* a, const float* b, int64_t n) {
  double s = 0.0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}

inline double abs_dot_double(const float* a, const float* b, int64_t n) {
  double s = 0.0;
  for (int64_t i = 0; i < n; ++i) s += std::fabs(static_cast<double>(a[i]) * b[i]);
  return s;
}

// Packs 8 six-bit scales and mins the way GGUF q4_K stores them (inverse of q4_k_scale_min).
inline void pack_q4_k_scales(const uint8_t sc[8], const uint8_t m[8], uint8_t out[12]) {
  for (int i = 0; i < 12; ++i) out[i] = 0;
  for (int j = 0; j < 8; ++j) {
    if (j < 4) {
      out[j] = sc[j] & 63;
      out[j + 4] = m[j] & 63;
    } else {
      out[j + 4] = static_cast<uint8_t>((sc[j] & 15) | ((m[j] & 15) << 4));
      out[j - 4] |= static_cast<uint8_t>((sc[j] >> 4) << 6);
      out[j] |= static_cast<uint8_t>((m[j] >> 4) << 6);
    }
  }
}

}  // namespace lumen::kernels::testing
