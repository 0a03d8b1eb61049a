// safetensors container reader (one file; the HF directory reader combines shards).
//
//   u64 N (little-endian) | N bytes of JSON header | data section
//   header: { "<tensor name>": { "dtype": "F32", "shape": [out, in],
//                                "data_offsets": [begin, end] },   // relative to the data section
//             ..., "__metadata__": { "<string>": "<string>", ... } }   // optional
//
// Shapes are stored outermost first (row-major); TensorView wants GGML order, so the HF
// reader reverses them. Only F32, F16 and BF16 tensors are accepted.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "tensor/dtype.h"

namespace lumen::gguf {

struct SafetensorsTensor {
  std::string name;                 // as stored ("model.layers.0.self_attn.q_proj.weight")
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;       // as stored: outermost first
  std::span<const std::byte> data;  // inside the parsed image; size == product(shape) * elem
};

struct SafetensorsFile {
  std::vector<SafetensorsTensor> tensors;           // sorted by data offset
  std::map<std::string, std::string> metadata;      // "__metadata__" (string values only)
};

// Validates the header and every tensor's bounds (begin <= end <= data size, size equal
// to product(shape) * element size, no two tensors overlap). `name` names the file in
// errors. Never throws.
Result<SafetensorsFile> parse_safetensors(std::span<const std::byte> bytes, const std::string& name);

}  // namespace lumen::gguf
