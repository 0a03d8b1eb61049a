// GgufWriter: builds a GGUF v3 file (metadata + tensors) and writes it with alignment.
// Used by tests (round trips, hostile variants), `lumen synth` and `lumen quantize`.
//
//   GgufWriter w;
//   w.set("general.architecture", MetaValue::of_string("llama"));
//   LUMEN_TRY(w.add_tensor("token_embd.weight", DType::kF32, {64, 512}, bytes));
//   LUMEN_TRY(w.write_file("/tmp/m.gguf"));
//
// Metadata keeps insertion order (setting a key again replaces its value in place).
// Tensor data is either borrowed (add_tensor: the span must stay valid until the write)
// or copied (add_tensor_copy). Not thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "gguf/model_file.h"
#include "tensor/dtype.h"

namespace lumen::gguf {

class GgufWriter {
 public:
  // alignment: a power of two; written as general.alignment when it is not the default 32.
  explicit GgufWriter(uint32_t alignment = 32);

  void set(std::string key, MetaValue value);
  // Copies every metadata entry of `file` (e.g. to re-write a model with new tensors);
  // general.alignment is skipped (the writer's own alignment is used).
  void set_all(const ModelFile& file);

  // ne in GGML order (ne[0] innermost), 1..4 dims; data.size() must equal the tensor's
  // byte size. Errors on a duplicate name or a size mismatch.
  Status add_tensor(std::string name, DType dtype, std::span<const int64_t> ne,
                    std::span<const std::byte> data);
  Status add_tensor(std::string name, DType dtype, std::initializer_list<int64_t> ne,
                    std::span<const std::byte> data) {
    return add_tensor(std::move(name), dtype, std::span<const int64_t>(ne.begin(), ne.size()), data);
  }
  Status add_tensor_copy(std::string name, DType dtype, std::span<const int64_t> ne,
                         std::span<const std::byte> data);
  Status add_tensor_copy(std::string name, DType dtype, std::initializer_list<int64_t> ne,
                         std::span<const std::byte> data) {
    return add_tensor_copy(std::move(name), dtype, std::span<const int64_t>(ne.begin(), ne.size()), data);
  }

  // The whole file in memory.
  std::vector<std::byte> serialize() const;
  // Streams the file to `path` (tensor data is not staged in memory).
  Status write_file(const std::string& path) const;

  size_t n_tensors() const { return tensors_.size(); }

 private:
  struct PendingTensor {
    std::string name;
    DType dtype;
    int n_dims;
    int64_t ne[4];
    std::span<const std::byte> data;
    uint64_t offset;  // within the data section, aligned
  };
  std::vector<std::byte> header_bytes() const;  // everything before the data section, padded
  template <typename Sink>
  void write_all(Sink&& sink) const;

  uint32_t alignment_;
  std::vector<std::pair<std::string, MetaValue>> meta_;
  std::vector<PendingTensor> tensors_;
  uint64_t data_bytes_ = 0;  // running, aligned end of the data section
  std::vector<std::unique_ptr<std::byte[]>> owned_;
};

}  // namespace lumen::gguf
