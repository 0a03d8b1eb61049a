// Helpers shared by the kernels tests: random raw blocks of every weight format and
// double-precision references. Test-only (included from *_test.cc).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "base/check.h"
#include "base/fp16.h"
#include "kernels/quant_blocks.h"
#include "kernels/type_table.h"
#include "tensor/dtype.h"

namespace lumen::kernels::testing {

inline std::vector<float> random_floats(std::mt19937& rng, int64_t n, float scale = 1.0f) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& f : v) f = dist(rng);
  return v;
}

// Whether blocks of dtype have an fp16 block scale d (set_block_d).
inline bool has_block_d(DType dtype) {
  return dtype == DType::kIQ1_M || dtype_info(dtype).f16_offsets[0] >= 0;
}

// Sets the block scale d (fp16 bits) of the block at b: the DType table's first fp16 field,
// or for iq1_m, which has none, the top nibbles of its four 16-bit scale words (word k's
// bits 12..15 are d's bits 4k .. 4k+3). Returns false when the format has no block scale.
inline bool set_block_d(DType dtype, std::byte* b, uint16_t d) {
  if (dtype == DType::kIQ1_M) {
    auto* blk = reinterpret_cast<BlockIQ1_M*>(b);
    uint16_t sc[4];
    std::memcpy(sc, blk->scales, 8);
    for (int k = 0; k < 4; ++k) sc[k] = static_cast<uint16_t>((sc[k] & 0x0fff) | ((d >> (4 * k)) & 15) << 12);
    std::memcpy(blk->scales, sc, 8);
    return true;
  }
  const int off = dtype_info(dtype).f16_offsets[0];
  if (off < 0) return false;
  std::memcpy(b + off, &d, 2);
  return true;
}

// Random raw bytes for n_rows rows of n elements of `dtype`, with every fp16 scale
// (DTypeInfo::f16_offsets, iq1_m's spread d) set to a finite value of magnitude ~`scale`,
// divided by 16 for a super-block's d and by 32 for its dmin, whose products with 6-bit
// sub-block scales make the weights (random bytes would give inf/nan scales). Every bit pattern of the quants is
// valid, so this covers all nibble / high-bit combinations.
inline std::vector<std::byte> random_weights(std::mt19937& rng, DType dtype, int64_t n_rows,
                                             int64_t n, float scale = 0.05f) {
  const size_t bytes = row_bytes(dtype, n) * static_cast<size_t>(n_rows);
  std::vector<std::byte> w(bytes);
  std::uniform_int_distribution<int> byte_dist(0, 255);
  for (std::byte& b : w) b = static_cast<std::byte>(byte_dist(rng));
  std::uniform_real_distribution<float> sc(0.25f * scale, scale);
  const int64_t n_elems = n * n_rows;
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const DTypeInfo& info = dtype_info(dtype);
  switch (dtype) {
    case DType::kF32: {
      auto* f = reinterpret_cast<float*>(w.data());
      for (int64_t i = 0; i < n_elems; ++i) f[i] = nd(rng);
      return w;
    }
    case DType::kF16: {
      auto* h = reinterpret_cast<uint16_t*>(w.data());
      for (int64_t i = 0; i < n_elems; ++i) h[i] = f32_to_fp16(nd(rng));
      return w;
    }
    case DType::kBF16: {
      auto* h = reinterpret_cast<uint16_t*>(w.data());
      for (int64_t i = 0; i < n_elems; ++i) h[i] = f32_to_bf16(nd(rng));
      return w;
    }
    default: break;
  }
  const bool super = info.block_size == static_cast<uint32_t>(kQkK);
  for (size_t ib = 0; ib < bytes / info.block_bytes; ++ib) {
    for (int f = 0; f < 2; ++f) {
      if (f == 1 && info.f16_offsets[f] < 0) continue;
      const float v = super ? sc(rng) / (f == 0 ? 16 : 32) : sc(rng);
      const uint16_t h = f32_to_fp16(v);
      if (f == 0) set_block_d(dtype, w.data() + ib * info.block_bytes, h);
      else std::memcpy(w.data() + ib * info.block_bytes + info.f16_offsets[f], &h, 2);
    }
  }
  return w;
}

// Sets every fp16 scale of the blocks in w to `d` (the block scale, set_block_d) and `dmin`
// (the second fp16 field, where the format has one).
inline void set_f16_scales(DType dtype, std::vector<std::byte>& w, uint16_t d, uint16_t dmin) {
  const DTypeInfo& info = dtype_info(dtype);
  for (size_t ib = 0; ib < w.size() / info.block_bytes; ++ib) {
    std::byte* b = w.data() + ib * info.block_bytes;
    set_block_d(dtype, b, d);
    if (info.f16_offsets[1] >= 0) std::memcpy(b + info.f16_offsets[1], &dmin, 2);
  }
}

inline std::vector<float> dequantize(DType dtype, const std::byte* src, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n));
  const TypeRow* row = find_type_row(dtype);
  LUMEN_CHECK(row != nullptr && row->dequantize != nullptr);
  row->dequantize(src, out.data(), n);
  return out;
}

// The types the type table can multiply (only the quantized ones if quantized_only), in id
// order: what the parity tests run.
inline std::vector<DType> matmul_types(bool quantized_only = false) {
  std::vector<DType> out;
  for (const TypeRow& r : type_rows())
    if (row_can_multiply(r) && (!quantized_only || dtype_info(r.dtype).is_quantized)) out.push_back(r.dtype);
  return out;
}

// q8_1 activations carry their block sums as s = fp16(d * sum(q)), with the f32 d, and the
// q4_1 / q5_1 dots use s for the weights' offset m (as ggml does), not the dequantized
// activations' sum d_f16 * sum(q). This is what a dot of the dequantized rows misses:
//   sum over blocks of m * (s - d_f16 * sum(q)),
// zero unless act_dtype is q8_1 (w_dtype's second fp16 field is its m).
inline double q8_1_sum_correction(DType w_dtype, const std::byte* w, DType act_dtype, const std::byte* xq,
                                  int64_t n) {
  if (act_dtype != DType::kQ8_1) return 0.0;
  const DTypeInfo& info = dtype_info(w_dtype);
  const auto* bx = reinterpret_cast<const BlockQ8_1*>(xq);
  double out = 0.0;
  for (int64_t ib = 0; ib < n / kQk; ++ib) {
    uint16_t m16;
    std::memcpy(&m16, w + ib * info.block_bytes + info.f16_offsets[1], 2);
    int32_t sum = 0;
    for (int i = 0; i < kQk; ++i) sum += bx[ib].qs[i];
    out += static_cast<double>(fp16_to_f32(m16)) *
           (static_cast<double>(fp16_to_f32(bx[ib].s_f16)) - static_cast<double>(fp16_to_f32(bx[ib].d_f16)) * sum);
  }
  return out;
}

// sum over blocks of |m * s|: the magnitude of the offset terms of a q4_1 / q5_1 dot (zero
// unless act_dtype is q8_1), which a dot of the dequantized rows' magnitude does not count.
inline double q8_1_offset_magnitude(DType w_dtype, const std::byte* w, DType act_dtype, const std::byte* xq,
                                    int64_t n) {
  if (act_dtype != DType::kQ8_1) return 0.0;
  const DTypeInfo& info = dtype_info(w_dtype);
  const auto* bx = reinterpret_cast<const BlockQ8_1*>(xq);
  double out = 0.0;
  for (int64_t ib = 0; ib < n / kQk; ++ib) {
    uint16_t m16;
    std::memcpy(&m16, w + ib * info.block_bytes + info.f16_offsets[1], 2);
    out += std::fabs(static_cast<double>(fp16_to_f32(m16)) * fp16_to_f32(bx[ib].s_f16));
  }
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
