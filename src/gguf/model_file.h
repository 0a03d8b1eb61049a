// ModelFile: one in-memory description of a model container, whatever its format.
//
//   GGUF v2/v3 (.gguf)                  -> metadata as stored, tensors as stored (mmap)
//   Hugging Face dir (config.json +     -> metadata translated to GGUF keys
//     *.safetensors [+ index])             ("llama.embedding_length", ...), tensors renamed to
//                                          GGUF names ("blk.0.attn_q.weight"), mmap'd
//   llama2.c (.bin + tokenizer.bin)     -> metadata + GGUF-style SPM tokenizer arrays,
//                                          tensors renamed to GGUF names, mmap'd
//
// Tensor data is never copied when the file can serve it (mmap, zero-copy views).
// Everything read from a file is validated: a truncated, corrupted or hostile file gives
// a Status naming what is wrong, never a crash or an out-of-bounds read.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "base/mapped_file.h"
#include "base/status.h"
#include "tensor/tensor_view.h"

namespace lumen::gguf {

// GGUF metadata value types (numeric values as in the GGUF spec).
enum class ValueType : uint32_t {
  kU8 = 0, kI8 = 1, kU16 = 2, kI16 = 3, kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7,
  kString = 8, kArray = 9, kU64 = 10, kI64 = 11, kF64 = 12,
};
std::string_view value_type_name(ValueType type);
bool is_integer_type(ValueType type);  // u8..i64 (not bool)
bool is_float_type(ValueType type);    // f32 / f64

// One metadata value. Scalars keep their GGUF type; integers are widened into i64/u64
// storage, floats into double. Arrays hold elements of one type (no nested arrays are
// produced by real files; nested arrays are parsed but exposed as empty).
struct MetaValue {
  ValueType type = ValueType::kU32;
  ValueType array_type = ValueType::kU32;  // element type when type == kArray
  // scalar storage
  int64_t i = 0;        // signed/unsigned integers (u64 values above INT64_MAX are stored bit-cast)
  double f = 0.0;       // f32 / f64
  bool b = false;
  std::string s;
  // array storage (exactly one is used, by array_type)
  std::vector<int64_t> arr_int;       // integer and bool element types
  std::vector<double> arr_float;      // f32 / f64 element types
  std::vector<std::string> arr_str;   // string element type

  size_t array_size() const;  // 0 for scalars

  // Builders. `type` / `element_type` must be an integer type (int builders; arrays also
  // accept kBool, stored as 0/1) or a float type (float builders).
  static MetaValue of_int(ValueType type, int64_t v);
  static MetaValue of_u32(uint32_t v) { return of_int(ValueType::kU32, v); }
  static MetaValue of_i32(int32_t v) { return of_int(ValueType::kI32, v); }
  static MetaValue of_u64(uint64_t v) { return of_int(ValueType::kU64, static_cast<int64_t>(v)); }
  static MetaValue of_float(ValueType type, double v);
  static MetaValue of_f32(float v) { return of_float(ValueType::kF32, v); }
  static MetaValue of_bool(bool v);
  static MetaValue of_string(std::string v);
  static MetaValue of_string_array(std::vector<std::string> v);
  static MetaValue of_int_array(ValueType element_type, std::vector<int64_t> v);
  static MetaValue of_float_array(ValueType element_type, std::vector<double> v);
};

struct TensorInfo {
  std::string name;   // GGUF naming ("token_embd.weight", "blk.3.ffn_down.weight", ...)
  TensorView view;    // dtype, shape (GGML order), data pointer, n_bytes
};

class ModelFile {
 public:
  ModelFile() = default;
  ModelFile(ModelFile&&) noexcept = default;
  ModelFile& operator=(ModelFile&&) noexcept = default;
  ModelFile(const ModelFile&) = delete;
  ModelFile& operator=(const ModelFile&) = delete;

  // "gguf", "safetensors" or "llama2c".
  std::string_view container() const { return container_; }
  // The path the user gave (file or directory).
  const std::string& path() const { return path_; }
  uint32_t gguf_version() const { return gguf_version_; }  // 0 when not a GGUF file
  uint64_t data_bytes() const;  // total bytes of all tensors (aliased views count once)

  // --- metadata (keys in GGUF naming) ---
  const std::map<std::string, MetaValue, std::less<>>& metadata() const { return meta_; }
  const MetaValue* find(std::string_view key) const;
  // Typed getters: nullopt when missing or of an incompatible type. get_int accepts any
  // integer type (and bool); get_float accepts f32/f64 and integers.
  std::optional<int64_t> get_int(std::string_view key) const;
  std::optional<double> get_float(std::string_view key) const;
  std::optional<bool> get_bool(std::string_view key) const;
  std::optional<std::string_view> get_string(std::string_view key) const;
  // Arrays: nullptr when missing or not an array of the requested kind.
  const std::vector<std::string>* get_string_array(std::string_view key) const;
  const std::vector<int64_t>* get_int_array(std::string_view key) const;
  const std::vector<double>* get_float_array(std::string_view key) const;

  // --- tensors ---
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find_tensor(std::string_view name) const;

  // For Hugging Face directories: the raw text of tokenizer.json and tokenizer_config.json
  // (empty when absent); the tokenizer layer parses them.
  const std::string& hf_tokenizer_json() const { return hf_tokenizer_json_; }
  const std::string& hf_tokenizer_config_json() const { return hf_tokenizer_config_json_; }

  // Builders used by the readers (and by tests / lumen synth).
  void set_container(std::string container, std::string path) {
    container_ = std::move(container);
    path_ = std::move(path);
  }
  void set_gguf_version(uint32_t v) { gguf_version_ = v; }
  void set_meta(std::string key, MetaValue value) { meta_[std::move(key)] = std::move(value); }
  void add_tensor(TensorInfo info);
  void keep_mapping(MappedFile file) { mappings_.push_back(std::move(file)); }
  // Keeps an owned buffer alive for tensors that cannot point into a mapping.
  std::byte* own_buffer(size_t n_bytes);
  void set_hf_tokenizer(std::string tokenizer_json, std::string tokenizer_config_json) {
    hf_tokenizer_json_ = std::move(tokenizer_json);
    hf_tokenizer_config_json_ = std::move(tokenizer_config_json);
  }

 private:
  std::string container_;
  std::string path_;
  uint32_t gguf_version_ = 0;
  std::map<std::string, MetaValue, std::less<>> meta_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
  std::vector<MappedFile> mappings_;
  std::vector<std::unique_ptr<std::byte[]>> owned_;
  std::string hf_tokenizer_json_;
  std::string hf_tokenizer_config_json_;
};

// Readers. Each validates everything it reads.
Result<ModelFile> open_gguf(const std::string& path);
// A directory with config.json and model.safetensors or model.safetensors.index.json.
Result<ModelFile> open_hf_dir(const std::string& dir);
// A llama2.c checkpoint; tokenizer_path defaults to "tokenizer.bin" / "tok<vocab>.bin"
// beside the checkpoint when empty.
Result<ModelFile> open_llama2c(const std::string& bin_path, const std::string& tokenizer_path);
// Detects the container from the path: directory -> HF, GGUF magic -> GGUF,
// otherwise a llama2.c checkpoint.
Result<ModelFile> open_model(const std::string& path);

// Parses a GGUF image from memory (what open_gguf uses after mmap; fuzz tests call it
// directly). Tensor views point into `bytes`, which must outlive the result.
Result<ModelFile> parse_gguf(std::span<const std::byte> bytes, const std::string& name);

// Parses a llama2.c checkpoint image from memory, without its tokenizer (what open_llama2c
// uses after mmap; fuzz tests call it directly). Views point into `bytes`.
Result<ModelFile> parse_llama2c(std::span<const std::byte> bytes, const std::string& name);
// Parses a llama2.c tokenizer.bin image that must hold exactly `vocab_size` tokens into
// GGUF SPM metadata (tokenizer.ggml.model/tokens/scores/token_type, unk/bos/eos ids) of `file`.
Status parse_llama2c_tokenizer(std::span<const std::byte> bytes, const std::string& name,
                               int64_t vocab_size, ModelFile* file);

}  // namespace lumen::gguf
