// The DType table: the format facts of every GGML tensor type (values equal GGML's type
// ids, so a GGUF tensor's type field maps 1:1). The list is the file format's and complete:
// a type that lumen learns to compute with gets a row in kernels/type_table.cc (its
// activation type, dequantizer, quantizer and kernels per ISA); nothing here changes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace lumen {

enum class DType : uint8_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kIQ2_XXS = 16,
  kIQ2_XS = 17,
  kIQ3_XXS = 18,
  kIQ1_S = 19,
  kIQ4_NL = 20,
  kIQ3_S = 21,
  kIQ2_S = 22,
  kIQ4_XS = 23,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kIQ1_M = 29,
  kBF16 = 30,
  kTQ1_0 = 34,
  kTQ2_0 = 35,
};

// One more than the largest GGML type id above: arrays indexed by DType have this size.
inline constexpr size_t kDTypeIdLimit = 36;

struct DTypeInfo {
  DType dtype;
  std::string_view name;   // GGML's name: "f32", "q4_0", "q6_K", "iq4_xs", ...
  uint32_t block_size;     // elements per block (1 for plain types)
  uint32_t block_bytes;    // bytes per block
  bool is_quantized;
  // Byte offsets in a block of its fp16 scale fields (d, and dmin / m / s where the format
  // has one); -1: none. iq1_m spreads its fp16 scale over the scale nibbles: none listed.
  int16_t f16_offsets[2];
};

// nullptr for an id that is not a known GGML type.
const DTypeInfo* find_dtype_info(uint32_t ggml_type_id);
const DTypeInfo& dtype_info(DType dtype);
inline std::string_view dtype_name(DType dtype) { return dtype_info(dtype).name; }
inline size_t dtype_index(DType dtype) { return static_cast<size_t>(dtype); }
// Looks a type up by name (case-insensitive: "q4_k" == "q4_K"); nullptr if unknown.
const DTypeInfo* find_dtype_by_name(std::string_view name);

// Bytes of a row of n elements; n must be a multiple of the block size.
inline size_t row_bytes(DType dtype, int64_t n) {
  const DTypeInfo& info = dtype_info(dtype);
  return static_cast<size_t>(n / info.block_size) * info.block_bytes;
}

}  // namespace lumen
