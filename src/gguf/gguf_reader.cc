// GGUF v2/v3 reader: parse + validate an in-memory image; tensor views point into it.
//
// File layout (all little-endian):
//
//   "GGUF" | u32 version | u64 n_tensors | u64 n_kv
//   n_kv      x { string key | u32 value_type | value }
//   n_tensors x { string name | u32 n_dims | u64 ne[n_dims] | u32 ggml_type | u64 offset }
//   padding to general.alignment (default 32)
//   data section: tensor i at data_start + offset_i (offset_i % alignment == 0)
//
//   string = u64 length | bytes (no terminator)
//   array  = u32 element_type | u64 count | elements
//
// Every count and length is checked against the bytes that remain before anything is
// allocated, so a hostile count (2^60) costs nothing but an error message.
#include <bit>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "gguf/gguf_util.h"
#include "gguf/model_file.h"

namespace lumen::gguf {
namespace {

static_assert(std::endian::native == std::endian::little, "GGUF reader assumes a little-endian host");

constexpr uint64_t kMaxKeyBytes = 65535;       // GGUF spec: keys are at most 2^16-1 bytes
constexpr uint64_t kMaxTensorNameBytes = 65535;
constexpr int kMaxArrayDepth = 8;              // nested arrays (never produced by real files)
constexpr uint64_t kMaxAlignment = uint64_t{1} << 30;
constexpr uint32_t kDefaultAlignment = 32;
// Caps far above real files (vocabularies and merge lists have < 2^21 entries, models
// < 2^16 tensors) that bound memory for a huge file whose bytes merely parse: counts are
// also bounded by the bytes left, but that alone would allow ~4x a multi-GB file.
constexpr uint64_t kMaxArrayElements = uint64_t{1} << 24;
constexpr uint64_t kMaxTensors = uint64_t{1} << 20;
constexpr uint64_t kMaxKvs = uint64_t{1} << 20;
// Smallest encodings, used to bound counts by the bytes that remain.
constexpr uint64_t kMinKvBytes = 8 + 4 + 1;                 // key length, type, 1-byte value
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 8 + 4 + 8;  // name length, n_dims, 1 dim, type, offset

bool valid_value_type(uint32_t t) { return t <= static_cast<uint32_t>(ValueType::kF64); }

// Bytes of the smallest encoding of one element of type t.
uint64_t min_value_bytes(ValueType t) {
  switch (t) {
    case ValueType::kU8: case ValueType::kI8: case ValueType::kBool: return 1;
    case ValueType::kU16: case ValueType::kI16: return 2;
    case ValueType::kU32: case ValueType::kI32: case ValueType::kF32: return 4;
    case ValueType::kU64: case ValueType::kI64: case ValueType::kF64: return 8;
    case ValueType::kString: return 8;
    case ValueType::kArray: return 12;
  }
  return 1;
}

struct RawTensorInfo {
  std::string name;
  uint32_t n_dims = 0;
  uint64_t ne[4] = {1, 1, 1, 1};
  const DTypeInfo* dtype = nullptr;
  uint64_t offset = 0;
};

class GgufParser {
 public:
  GgufParser(std::span<const std::byte> bytes, const std::string& name) : bytes_(bytes), name_(name) {}

  Result<ModelFile> parse();

 private:
  Status fail(const std::string& msg) const { return error("gguf: " + msg + " (in '" + name_ + "')"); }
  // Error messages name `context_` (the kv or tensor being read, set once per item, so
  // the happy path builds no strings per field) and the field.
  std::string where(std::string_view field) const {
    if (context_.empty()) return std::string(field);
    return field.empty() ? context_ : context_ + " " + std::string(field);
  }
  Status truncated(std::string_view field, uint64_t need) const {
    return fail("file truncated: " + where(field) + " at offset " + std::to_string(pos_) +
                " needs " + std::to_string(need) + " bytes, file size is " + std::to_string(bytes_.size()));
  }
  uint64_t remaining() const { return bytes_.size() - pos_; }

  template <typename T>
  Status read_pod(T* out, std::string_view field) {
    if (remaining() < sizeof(T)) return truncated(field, sizeof(T));
    std::memcpy(out, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return Status();
  }
  // Reads a length-prefixed string; `max_bytes` bounds the length beyond the file size.
  Status read_string(std::string* out, std::string_view field, uint64_t max_bytes);

  Status read_header();
  Status read_kv(uint64_t kv_idx);
  Status read_value(ValueType type, const std::string& key, MetaValue* out);
  Status read_array(const std::string& key, int depth, MetaValue* out);
  Status read_tensor_info(uint64_t tensor_idx, RawTensorInfo* out);
  Result<uint64_t> read_alignment() const;
  Status add_tensor(const RawTensorInfo& info, uint64_t data_start, uint64_t alignment);

  std::span<const std::byte> bytes_;
  const std::string& name_;
  uint64_t pos_ = 0;
  uint32_t version_ = 0;
  uint64_t n_tensors_ = 0;
  uint64_t n_kv_ = 0;
  std::string context_;  // "metadata 'key'" / "tensor 'name'" while reading that item
  ModelFile file_;
};

Status GgufParser::read_string(std::string* out, std::string_view field, uint64_t max_bytes) {
  uint64_t len = 0;
  if (remaining() < 8) return truncated(field.empty() ? "length" : std::string(field) + " length", 8);
  std::memcpy(&len, bytes_.data() + pos_, 8);
  pos_ += 8;
  if (len > remaining())
    return fail(where(field) + ": string length " + std::to_string(len) + " exceeds the " +
                std::to_string(remaining()) + " bytes left in the file");
  if (len > max_bytes)
    return fail(where(field) + ": string length " + std::to_string(len) + " exceeds the limit " +
                std::to_string(max_bytes));
  out->assign(reinterpret_cast<const char*>(bytes_.data() + pos_), len);
  pos_ += len;
  return Status();
}

Status GgufParser::read_header() {
  if (bytes_.size() < 4) return fail("file too small (" + std::to_string(bytes_.size()) + " bytes) for a GGUF header");
  if (std::memcmp(bytes_.data(), "GGUF", 4) != 0)
    return fail("bad magic " + quote(std::string_view(reinterpret_cast<const char*>(bytes_.data()), 4)) +
                ", expected 'GGUF'");
  pos_ = 4;
  LUMEN_TRY(read_pod(&version_, "version"));
  if (version_ == 1)
    return fail("GGUF version 1 is not supported (only versions 2 and 3); re-convert the model with a newer llama.cpp");
  if (version_ == 0x02000000u || version_ == 0x03000000u)
    return fail("version field is " + std::to_string(version_) + ": a big-endian GGUF file, which is not supported");
  if (version_ != 2 && version_ != 3)
    return fail("unsupported GGUF version " + std::to_string(version_) + " (supported: 2, 3)");
  LUMEN_TRY(read_pod(&n_tensors_, "tensor count"));
  LUMEN_TRY(read_pod(&n_kv_, "metadata kv count"));
  if (n_kv_ > kMaxKvs) return fail("metadata kv count " + std::to_string(n_kv_) + " exceeds the limit 2^20");
  if (n_tensors_ > kMaxTensors) return fail("tensor count " + std::to_string(n_tensors_) + " exceeds the limit 2^20");
  if (n_kv_ > remaining() / kMinKvBytes)
    return fail("metadata kv count " + std::to_string(n_kv_) + " cannot fit in the " + std::to_string(remaining()) +
                " bytes left in the file (truncated or corrupt)");
  if (n_tensors_ > remaining() / kMinTensorInfoBytes)
    return fail("tensor count " + std::to_string(n_tensors_) + " cannot fit in the " + std::to_string(remaining()) +
                " bytes left in the file (truncated or corrupt)");
  return Status();
}

Status GgufParser::read_value(ValueType type, const std::string& key, MetaValue* out) {
  out->type = type;
  const char* what = "value";
  switch (type) {
    case ValueType::kU8: { uint8_t v = 0; LUMEN_TRY(read_pod(&v, what)); out->i = v; return Status(); }
    case ValueType::kI8: { int8_t v = 0; LUMEN_TRY(read_pod(&v, what)); out->i = v; return Status(); }
    case ValueType::kU16: { uint16_t v = 0; LUMEN_TRY(read_pod(&v, what)); out->i = v; return Status(); }
    case ValueType::kI16: { int16_t v = 0; LUMEN_TRY(read_pod(&v, what)); out->i = v; return Status(); }
    case ValueType::kU32: { uint32_t v = 0; LUMEN_TRY(read_pod(&v, what)); out->i = v; return Status(); }
    case ValueType::kI32: { int32_t v = 0; LUMEN_TRY(read_pod(&v, what)); out->i = v; return Status(); }
    case ValueType::kU64: { uint64_t v = 0; LUMEN_TRY(read_pod(&v, what)); out->i = static_cast<int64_t>(v); return Status(); }
    case ValueType::kI64: { int64_t v = 0; LUMEN_TRY(read_pod(&v, what)); out->i = v; return Status(); }
    case ValueType::kF32: { float v = 0; LUMEN_TRY(read_pod(&v, what)); out->f = v; return Status(); }
    case ValueType::kF64: { double v = 0; LUMEN_TRY(read_pod(&v, what)); out->f = v; return Status(); }
    case ValueType::kBool: {
      uint8_t v = 0;
      LUMEN_TRY(read_pod(&v, what));
      if (v > 1) return fail(context_ + ": bool value " + std::to_string(v) + " is not 0 or 1");
      out->b = v != 0;
      return Status();
    }
    case ValueType::kString: return read_string(&out->s, what, std::numeric_limits<uint64_t>::max());
    case ValueType::kArray: return read_array(key, 0, out);
  }
  return fail(context_ + ": unknown value type");
}

// Reads one array (type tag already consumed). Nested arrays are parsed (to find where
// they end) and exposed as empty.
Status GgufParser::read_array(const std::string& key, int depth, MetaValue* out) {
  const std::string& what = context_;
  if (depth >= kMaxArrayDepth)
    return fail(what + ": arrays nested deeper than " + std::to_string(kMaxArrayDepth));
  uint32_t elem_raw = 0;
  uint64_t count = 0;
  LUMEN_TRY(read_pod(&elem_raw, "array element type"));
  if (!valid_value_type(elem_raw))
    return fail(what + ": unknown array element type " + std::to_string(elem_raw));
  LUMEN_TRY(read_pod(&count, "array count"));
  const ValueType elem = static_cast<ValueType>(elem_raw);
  out->type = ValueType::kArray;
  out->array_type = elem;
  if (count > kMaxArrayElements)
    return fail(what + ": array count " + std::to_string(count) + " exceeds the limit 2^24");
  if (count > remaining() / min_value_bytes(elem))
    return fail(what + ": array count " + std::to_string(count) + " of " + std::string(value_type_name(elem)) +
                " exceeds what the " + std::to_string(remaining()) + " bytes left in the file can hold");
  const std::byte* p = bytes_.data();
  switch (elem) {
    case ValueType::kString: {
      out->arr_str.reserve(count);
      for (uint64_t i = 0; i < count; ++i) {
        uint64_t len = 0;
        if (remaining() < 8) return truncated("element " + std::to_string(i) + " length", 8);
        std::memcpy(&len, p + pos_, 8);
        pos_ += 8;
        if (len > remaining())
          return fail(what + ": element " + std::to_string(i) + " string length " + std::to_string(len) +
                      " exceeds the " + std::to_string(remaining()) + " bytes left in the file");
        out->arr_str.emplace_back(reinterpret_cast<const char*>(p + pos_), len);
        pos_ += len;
      }
      return Status();
    }
    case ValueType::kArray: {
      for (uint64_t i = 0; i < count; ++i) {
        MetaValue nested;
        LUMEN_TRY(read_array(key, depth + 1, &nested));
      }
      return Status();  // exposed as empty
    }
    case ValueType::kF32: case ValueType::kF64: {
      out->arr_float.resize(count);
      for (uint64_t i = 0; i < count; ++i) {
        if (elem == ValueType::kF32) {
          float v;
          std::memcpy(&v, p + pos_, 4);
          out->arr_float[i] = v;
          pos_ += 4;
        } else {
          std::memcpy(&out->arr_float[i], p + pos_, 8);
          pos_ += 8;
        }
      }
      return Status();
    }
    default: {  // integers and bool; the count check above guarantees the bytes exist
      out->arr_int.resize(count);
      for (uint64_t i = 0; i < count; ++i) {
        int64_t v = 0;
        switch (elem) {
          case ValueType::kU8: v = static_cast<uint8_t>(p[pos_]); pos_ += 1; break;
          case ValueType::kI8: v = static_cast<int8_t>(p[pos_]); pos_ += 1; break;
          case ValueType::kBool: {
            const uint8_t b = static_cast<uint8_t>(p[pos_]);
            if (b > 1) return fail(what + ": element " + std::to_string(i) + " bool value " + std::to_string(b) + " is not 0 or 1");
            v = b;
            pos_ += 1;
            break;
          }
          case ValueType::kU16: { uint16_t x; std::memcpy(&x, p + pos_, 2); v = x; pos_ += 2; break; }
          case ValueType::kI16: { int16_t x; std::memcpy(&x, p + pos_, 2); v = x; pos_ += 2; break; }
          case ValueType::kU32: { uint32_t x; std::memcpy(&x, p + pos_, 4); v = x; pos_ += 4; break; }
          case ValueType::kI32: { int32_t x; std::memcpy(&x, p + pos_, 4); v = x; pos_ += 4; break; }
          case ValueType::kU64: case ValueType::kI64: std::memcpy(&v, p + pos_, 8); pos_ += 8; break;
          default: return fail(what + ": unexpected array element type");
        }
        out->arr_int[i] = v;
      }
      return Status();
    }
  }
}

Status GgufParser::read_kv(uint64_t kv_idx) {
  std::string key;
  context_ = "metadata key #" + std::to_string(kv_idx);
  LUMEN_TRY(read_string(&key, "", kMaxKeyBytes));
  if (key.empty()) return fail(context_ + " is empty");
  context_ = "metadata '" + quote(key) + "'";
  if (file_.find(key)) return fail("duplicate metadata key '" + quote(key) + "'");
  uint32_t type_raw = 0;
  LUMEN_TRY(read_pod(&type_raw, "value type"));
  if (!valid_value_type(type_raw)) return fail(context_ + ": unknown value type " + std::to_string(type_raw));
  MetaValue value;
  LUMEN_TRY(read_value(static_cast<ValueType>(type_raw), key, &value));
  file_.set_meta(std::move(key), std::move(value));
  return Status();
}

Status GgufParser::read_tensor_info(uint64_t tensor_idx, RawTensorInfo* out) {
  context_ = "tensor #" + std::to_string(tensor_idx);
  LUMEN_TRY(read_string(&out->name, "name", kMaxTensorNameBytes));
  context_ = "tensor '" + quote(out->name) + "'";
  const std::string& what = context_;
  LUMEN_TRY(read_pod(&out->n_dims, "n_dims"));
  if (out->n_dims < 1 || out->n_dims > 4)
    return fail(what + ": n_dims " + std::to_string(out->n_dims) + " out of range [1, 4]");
  for (uint32_t d = 0; d < out->n_dims; ++d) {
    LUMEN_TRY(read_pod(&out->ne[d], "ne"));
    if (out->ne[d] > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      return fail(what + ": ne[" + std::to_string(d) + "] = " + std::to_string(out->ne[d]) + " is too large");
  }
  uint32_t type_id = 0;
  LUMEN_TRY(read_pod(&type_id, "type"));
  out->dtype = find_dtype_info(type_id);
  if (!out->dtype) return fail(what + ": unknown ggml type id " + std::to_string(type_id));
  LUMEN_TRY(read_pod(&out->offset, "offset"));
  return Status();
}

Result<uint64_t> GgufParser::read_alignment() const {
  const MetaValue* v = file_.find("general.alignment");
  if (!v) return uint64_t{kDefaultAlignment};
  if (!is_integer_type(v->type))
    return fail("general.alignment has type " + std::string(value_type_name(v->type)) + ", expected an integer");
  const uint64_t a = static_cast<uint64_t>(v->i);
  if (v->i <= 0 || a > kMaxAlignment || !std::has_single_bit(a))
    return fail("general.alignment = " + std::to_string(v->i) + " is not a power of two in [1, 2^30]");
  return a;
}

Status GgufParser::add_tensor(const RawTensorInfo& info, uint64_t data_start, uint64_t alignment) {
  const std::string what = "tensor '" + quote(info.name) + "'";
  if (file_.find_tensor(info.name)) return fail("duplicate " + what);
  Result<uint64_t> size = tensor_bytes(*info.dtype, info.ne, info.n_dims);
  if (!size.ok()) return fail(what + ": " + size.message());
  if (info.offset % alignment != 0)
    return fail(what + ": data offset " + std::to_string(info.offset) + " is not a multiple of the alignment " +
                std::to_string(alignment));
  const uint64_t data_size = bytes_.size() - data_start;
  if (info.offset > data_size || *size > data_size - info.offset)
    return fail(what + ": data [offset " + std::to_string(info.offset) + " + data section " +
                std::to_string(data_start) + ", " + std::to_string(*size) +
                " bytes] extends past end of file (size " + std::to_string(bytes_.size()) + ")");
  TensorInfo t;
  t.name = info.name;
  t.view.dtype = info.dtype->dtype;
  t.view.n_dims = static_cast<int>(info.n_dims);
  for (int d = 0; d < 4; ++d) t.view.ne[d] = static_cast<int64_t>(info.ne[d]);
  t.view.data = bytes_.data() + data_start + info.offset;
  t.view.n_bytes = static_cast<size_t>(*size);
  file_.add_tensor(std::move(t));
  return Status();
}

Result<ModelFile> GgufParser::parse() {
  LUMEN_TRY(read_header());
  for (uint64_t i = 0; i < n_kv_; ++i) LUMEN_TRY(read_kv(i));
  context_.clear();
  if (n_tensors_ > remaining() / kMinTensorInfoBytes)
    return fail("tensor count " + std::to_string(n_tensors_) + " cannot fit in the " + std::to_string(remaining()) +
                " bytes left after the metadata (truncated or corrupt)");
  std::vector<RawTensorInfo> infos(n_tensors_);
  for (uint64_t i = 0; i < n_tensors_; ++i) LUMEN_TRY(read_tensor_info(i, &infos[i]));
  context_.clear();
  LUMEN_ASSIGN_OR_RETURN(const uint64_t alignment, read_alignment());
  // pos_ <= size and alignment <= 2^30, so this cannot overflow.
  const uint64_t data_start = (pos_ + alignment - 1) / alignment * alignment;
  if (n_tensors_ > 0 && data_start > bytes_.size())
    return fail("data section would start at offset " + std::to_string(data_start) + ", past end of file (size " +
                std::to_string(bytes_.size()) + ")");
  for (const RawTensorInfo& info : infos) LUMEN_TRY(add_tensor(info, data_start, alignment));
  file_.set_container("gguf", name_);
  file_.set_gguf_version(version_);
  return std::move(file_);
}

}  // namespace

Result<ModelFile> parse_gguf(std::span<const std::byte> bytes, const std::string& name) {
  GgufParser parser(bytes, name);
  return parser.parse();
}

Result<ModelFile> open_gguf(const std::string& path) {
  LUMEN_ASSIGN_OR_RETURN(MappedFile mapped, MappedFile::open(path));
  LUMEN_ASSIGN_OR_RETURN(ModelFile file, parse_gguf(mapped.bytes(), path));
  file.keep_mapping(std::move(mapped));  // the mapping (and so every view) lives as long as `file`
  return file;
}

}  // namespace lumen::gguf
