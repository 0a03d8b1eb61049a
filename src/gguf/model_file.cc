// ModelFile accessors and builders, value-type names, and open_model's format detection.
#include "gguf/model_file.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <limits>
#include <set>
#include <utility>

#include "base/check.h"

namespace lumen::gguf {

std::string_view value_type_name(ValueType type) {
  switch (type) {
    case ValueType::kU8: return "u8";
    case ValueType::kI8: return "i8";
    case ValueType::kU16: return "u16";
    case ValueType::kI16: return "i16";
    case ValueType::kU32: return "u32";
    case ValueType::kI32: return "i32";
    case ValueType::kF32: return "f32";
    case ValueType::kBool: return "bool";
    case ValueType::kString: return "string";
    case ValueType::kArray: return "array";
    case ValueType::kU64: return "u64";
    case ValueType::kI64: return "i64";
    case ValueType::kF64: return "f64";
  }
  return "unknown";
}

bool is_integer_type(ValueType type) {
  switch (type) {
    case ValueType::kU8: case ValueType::kI8: case ValueType::kU16: case ValueType::kI16:
    case ValueType::kU32: case ValueType::kI32: case ValueType::kU64: case ValueType::kI64:
      return true;
    default:
      return false;
  }
}

bool is_float_type(ValueType type) { return type == ValueType::kF32 || type == ValueType::kF64; }

size_t MetaValue::array_size() const {
  if (type != ValueType::kArray) return 0;
  if (array_type == ValueType::kString) return arr_str.size();
  if (is_float_type(array_type)) return arr_float.size();
  if (is_integer_type(array_type) || array_type == ValueType::kBool) return arr_int.size();
  return 0;  // nested arrays are exposed as empty
}

MetaValue MetaValue::of_int(ValueType type, int64_t v) {
  LUMEN_DCHECK(is_integer_type(type));
  MetaValue m;
  m.type = type;
  m.i = v;
  return m;
}

MetaValue MetaValue::of_float(ValueType type, double v) {
  LUMEN_DCHECK(is_float_type(type));
  MetaValue m;
  m.type = type;
  m.f = v;
  return m;
}

MetaValue MetaValue::of_bool(bool v) {
  MetaValue m;
  m.type = ValueType::kBool;
  m.b = v;
  return m;
}

MetaValue MetaValue::of_string(std::string v) {
  MetaValue m;
  m.type = ValueType::kString;
  m.s = std::move(v);
  return m;
}

MetaValue MetaValue::of_string_array(std::vector<std::string> v) {
  MetaValue m;
  m.type = ValueType::kArray;
  m.array_type = ValueType::kString;
  m.arr_str = std::move(v);
  return m;
}

MetaValue MetaValue::of_int_array(ValueType element_type, std::vector<int64_t> v) {
  LUMEN_DCHECK(is_integer_type(element_type) || element_type == ValueType::kBool);
  MetaValue m;
  m.type = ValueType::kArray;
  m.array_type = element_type;
  m.arr_int = std::move(v);
  return m;
}

MetaValue MetaValue::of_float_array(ValueType element_type, std::vector<double> v) {
  LUMEN_DCHECK(is_float_type(element_type));
  MetaValue m;
  m.type = ValueType::kArray;
  m.array_type = element_type;
  m.arr_float = std::move(v);
  return m;
}

// Aliases (a tied token_embd.weight that is a view of output.weight's bytes) count once.
uint64_t ModelFile::data_bytes() const {
  uint64_t total = 0;
  std::set<std::pair<const std::byte*, size_t>> seen;
  for (const TensorInfo& t : tensors_)
    if (seen.emplace(t.view.data, t.view.n_bytes).second) total += t.view.n_bytes;
  return total;
}

const MetaValue* ModelFile::find(std::string_view key) const {
  auto it = meta_.find(key);
  return it == meta_.end() ? nullptr : &it->second;
}

std::optional<int64_t> ModelFile::get_int(std::string_view key) const {
  const MetaValue* v = find(key);
  if (!v) return std::nullopt;
  if (is_integer_type(v->type)) return v->i;
  if (v->type == ValueType::kBool) return v->b ? 1 : 0;
  return std::nullopt;
}

std::optional<double> ModelFile::get_float(std::string_view key) const {
  const MetaValue* v = find(key);
  if (!v) return std::nullopt;
  if (is_float_type(v->type)) return v->f;
  if (v->type == ValueType::kU64) return static_cast<double>(static_cast<uint64_t>(v->i));
  if (is_integer_type(v->type)) return static_cast<double>(v->i);
  return std::nullopt;
}

std::optional<bool> ModelFile::get_bool(std::string_view key) const {
  const MetaValue* v = find(key);
  if (!v || v->type != ValueType::kBool) return std::nullopt;
  return v->b;
}

std::optional<std::string_view> ModelFile::get_string(std::string_view key) const {
  const MetaValue* v = find(key);
  if (!v || v->type != ValueType::kString) return std::nullopt;
  return std::string_view(v->s);
}

const std::vector<std::string>* ModelFile::get_string_array(std::string_view key) const {
  const MetaValue* v = find(key);
  if (!v || v->type != ValueType::kArray || v->array_type != ValueType::kString) return nullptr;
  return &v->arr_str;
}

const std::vector<int64_t>* ModelFile::get_int_array(std::string_view key) const {
  const MetaValue* v = find(key);
  if (!v || v->type != ValueType::kArray) return nullptr;
  if (!is_integer_type(v->array_type) && v->array_type != ValueType::kBool) return nullptr;
  return &v->arr_int;
}

const std::vector<double>* ModelFile::get_float_array(std::string_view key) const {
  const MetaValue* v = find(key);
  if (!v || v->type != ValueType::kArray || !is_float_type(v->array_type)) return nullptr;
  return &v->arr_float;
}

const TensorInfo* ModelFile::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

// Precondition: no tensor named info.name yet (readers reject duplicates before adding).
void ModelFile::add_tensor(TensorInfo info) {
  LUMEN_CHECK_MSG(tensor_index_.find(info.name) == tensor_index_.end(), "duplicate tensor name");
  tensor_index_.emplace(info.name, tensors_.size());
  tensors_.push_back(std::move(info));
}

std::byte* ModelFile::own_buffer(size_t n_bytes) {
  // new[] of std::byte is aligned to __STDCPP_DEFAULT_NEW_ALIGNMENT__ (16), enough for
  // every element type; a zero-byte request still gets a distinct valid pointer.
  owned_.push_back(std::make_unique<std::byte[]>(n_bytes == 0 ? 1 : n_bytes));
  return owned_.back().get();
}

Result<ModelFile> open_model(const std::string& path) {
  struct stat st {};
  if (path.empty()) return error("model path is empty");
  if (::stat(path.c_str(), &st) != 0)
    return error("cannot open model '" + path + "': " + std::strerror(errno));
  if (S_ISDIR(st.st_mode)) return open_hf_dir(path);
  if (!S_ISREG(st.st_mode)) return error("model path '" + path + "' is not a file or directory");
  LUMEN_ASSIGN_OR_RETURN(MappedFile file, MappedFile::open(path));
  const auto bytes = file.bytes();
  if (bytes.size() >= 4 && std::memcmp(bytes.data(), "GGUF", 4) == 0) return open_gguf(path);
  // A safetensors file starts with its header's length (u64) and then the JSON header.
  const bool safetensors_name = path.size() > 12 && path.compare(path.size() - 12, 12, ".safetensors") == 0;
  if (safetensors_name || (bytes.size() >= 10 && static_cast<char>(bytes[8]) == '{' && static_cast<char>(bytes[9]) == '"')) {
    const size_t slash = path.find_last_of('/');
    const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash);
    return error("'" + path + "' is a safetensors file: pass the directory that holds it with config.json and "
                 "the tokenizer files (-m " + dir + ")");
  }
  return open_llama2c(path, "");
}

}  // namespace lumen::gguf
