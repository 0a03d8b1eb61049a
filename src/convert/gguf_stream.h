// GgufStreamWriter: writes a GGUF v3 file in one pass whose tensor bytes are produced on
// demand, tensor by tensor, so converting or synthesising a model never holds the model in
// memory (gguf::GgufWriter needs every tensor's bytes in memory at write time).
//
//   GgufStreamWriter w;
//   w.set("general.architecture", MetaValue::of_string("llama"));
//   LUMEN_TRY(w.add_tensor("token_embd.weight", DType::kQ8_0, {64, 512}));
//   LUMEN_TRY(w.write_file(path, [&](size_t tensor_idx, TensorSink& sink) -> Status {
//     ... sink.write(row_bytes, n) for every row, in order ...
//   }));
//
// The file layout is the same as GgufWriter's (metadata in insertion order, tensor infos,
// padding to the alignment, tensor data at aligned offsets in declaration order), and the
// file is written to "<path>.tmp" and renamed into place only when complete.
// Not thread-safe.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"
#include "gguf/model_file.h"
#include "tensor/dtype.h"

namespace lumen::convert {

// Where a tensor's bytes go; counts them so the writer can check the producer wrote
// exactly the tensor's size.
class TensorSink {
 public:
  explicit TensorSink(std::FILE* f) : f_(f) {}
  // Appends n bytes. Returns false (and remembers the error) if the write failed.
  bool write(const void* data, size_t n);
  uint64_t n_written() const { return n_written_; }
  bool failed() const { return failed_; }

 private:
  std::FILE* f_;
  uint64_t n_written_ = 0;
  bool failed_ = false;
};

class GgufStreamWriter {
 public:
  struct TensorDecl {
    std::string name;
    DType dtype;
    std::vector<int64_t> ne;  // GGML order, 1..4 dims
    uint64_t n_bytes;
    uint64_t offset;          // within the data section, aligned
  };
  using ProduceFn = std::function<Status(size_t tensor_idx, TensorSink& sink)>;

  explicit GgufStreamWriter(uint32_t alignment = 32);

  // Metadata keeps insertion order; setting a key again replaces its value in place.
  void set(std::string key, gguf::MetaValue value);
  void erase(std::string_view key);
  const gguf::MetaValue* find(std::string_view key) const;
  const std::vector<std::pair<std::string, gguf::MetaValue>>& metadata() const { return meta_; }

  // Declares the next tensor. Errors (naming the tensor) on a duplicate name, a bad rank or
  // a row length that is not a multiple of the type's block size.
  Status add_tensor(std::string name, DType dtype, std::vector<int64_t> ne);
  const std::vector<TensorDecl>& tensors() const { return tensors_; }

  // Size of the whole file.
  uint64_t file_bytes() const;

  // Writes the file, calling produce(i, sink) for tensor i = 0, 1, ... in order; produce
  // must write exactly tensors()[i].n_bytes bytes. On any error the partial file is removed.
  Status write_file(const std::string& path, const ProduceFn& produce) const;

 private:
  std::vector<std::byte> header_bytes() const;  // everything before the data section, padded

  uint32_t alignment_;
  std::vector<std::pair<std::string, gguf::MetaValue>> meta_;
  std::vector<TensorDecl> tensors_;
  uint64_t data_bytes_ = 0;  // running, aligned end of the data section
};

}  // namespace lumen::convert
