#include "gguf/safetensors.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <limits>

#include "gguf/gguf_util.h"
#include "gguf/json_util.h"

namespace lumen::gguf {
namespace {

// The safetensors format itself caps the header at 100 MB.
constexpr uint64_t kMaxHeaderBytes = 100u << 20;
constexpr size_t kMaxDims = 4;  // TensorView's limit; llama / qwen2 weights have <= 2

const DTypeInfo* safetensors_dtype(std::string_view s) {
  if (s == "F32") return &dtype_info(DType::kF32);
  if (s == "F16") return &dtype_info(DType::kF16);
  if (s == "BF16") return &dtype_info(DType::kBF16);
  return nullptr;
}

struct Parsed {
  SafetensorsTensor tensor;
  uint64_t begin;
  uint64_t end;
};

class SafetensorsParser {
 public:
  SafetensorsParser(std::span<const std::byte> bytes, const std::string& name) : bytes_(bytes), name_(name) {}
  Result<SafetensorsFile> parse();

 private:
  Status fail(const std::string& msg) const { return error("safetensors: " + msg + " (in '" + name_ + "')"); }
  Status parse_tensor(const std::string& key, const nlohmann::json& entry, Parsed* out) const;
  Status parse_metadata(const nlohmann::json& meta, SafetensorsFile* out) const;

  std::span<const std::byte> bytes_;
  const std::string& name_;
  uint64_t data_start_ = 0;
  uint64_t data_bytes_ = 0;
};

Status SafetensorsParser::parse_tensor(const std::string& key, const nlohmann::json& entry, Parsed* out) const {
  const std::string what = "tensor '" + quote(key) + "'";
  if (!entry.is_object()) return fail(what + ": entry is not an object");
  const auto dtype_it = entry.find("dtype");
  if (dtype_it == entry.end() || !dtype_it->is_string()) return fail(what + ": missing string 'dtype'");
  const std::string dtype_name = dtype_it->get<std::string>();
  const DTypeInfo* dtype = safetensors_dtype(dtype_name);
  if (!dtype)
    return fail(what + ": dtype " + quote(dtype_name) + " is not supported (only F32, F16, BF16)");
  const auto shape_it = entry.find("shape");
  if (shape_it == entry.end() || !shape_it->is_array()) return fail(what + ": missing array 'shape'");
  if (shape_it->size() > kMaxDims)
    return fail(what + ": " + std::to_string(shape_it->size()) + " dims, at most " + std::to_string(kMaxDims));
  uint64_t n_elements = 1;
  for (const nlohmann::json& d : *shape_it) {
    if (!d.is_number_unsigned() && !(d.is_number_integer() && d.get<int64_t>() >= 0))
      return fail(what + ": shape entries must be non-negative integers");
    const uint64_t dim = d.get<uint64_t>();
    if (dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) || !checked_mul(n_elements, dim, &n_elements) ||
        n_elements > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      return fail(what + ": shape element count overflows");
    out->tensor.shape.push_back(static_cast<int64_t>(dim));
  }
  uint64_t n_bytes = 0;
  if (!checked_mul(n_elements, dtype->block_bytes, &n_bytes)) return fail(what + ": byte size overflows");
  const auto offsets_it = entry.find("data_offsets");
  if (offsets_it == entry.end() || !offsets_it->is_array() || offsets_it->size() != 2 ||
      !(*offsets_it)[0].is_number_unsigned() || !(*offsets_it)[1].is_number_unsigned())
    return fail(what + ": 'data_offsets' must be [begin, end] of non-negative integers");
  out->begin = (*offsets_it)[0].get<uint64_t>();
  out->end = (*offsets_it)[1].get<uint64_t>();
  if (out->begin > out->end || out->end > data_bytes_)
    return fail(what + ": data_offsets [" + std::to_string(out->begin) + ", " + std::to_string(out->end) +
                "] out of the data section's " + std::to_string(data_bytes_) + " bytes");
  if (out->end - out->begin != n_bytes)
    return fail(what + ": data_offsets span " + std::to_string(out->end - out->begin) + " bytes, but shape and " +
                dtype_name + " need " + std::to_string(n_bytes));
  out->tensor.name = key;
  out->tensor.dtype = dtype->dtype;
  out->tensor.data = bytes_.subspan(data_start_ + out->begin, n_bytes);
  return Status();
}

Status SafetensorsParser::parse_metadata(const nlohmann::json& meta, SafetensorsFile* out) const {
  if (meta.is_null()) return Status();
  if (!meta.is_object()) return fail("'__metadata__' is not an object");
  for (const auto& [k, v] : meta.items())
    if (v.is_string()) out->metadata.emplace(k, v.get<std::string>());  // non-strings: ignored
  return Status();
}

Result<SafetensorsFile> SafetensorsParser::parse() {
  if (bytes_.size() < 8) return fail("file too small (" + std::to_string(bytes_.size()) + " bytes) for the header length");
  uint64_t header_bytes = 0;
  std::memcpy(&header_bytes, bytes_.data(), 8);
  if (header_bytes > bytes_.size() - 8)
    return fail("header length " + std::to_string(header_bytes) + " exceeds the file size " + std::to_string(bytes_.size()));
  if (header_bytes > kMaxHeaderBytes)
    return fail("header length " + std::to_string(header_bytes) + " exceeds the 100 MB limit");
  data_start_ = 8 + header_bytes;
  data_bytes_ = bytes_.size() - data_start_;
  const std::string_view header(reinterpret_cast<const char*>(bytes_.data() + 8), header_bytes);
  Result<nlohmann::json> json = parse_json(header, "safetensors header of '" + name_ + "'");
  if (!json.ok()) return json.status();
  if (!json->is_object()) return fail("header is not a JSON object");
  SafetensorsFile file;
  std::vector<Parsed> parsed;
  for (const auto& [key, value] : json->items()) {
    if (key == "__metadata__") {
      LUMEN_TRY(parse_metadata(value, &file));
      continue;
    }
    Parsed p;
    LUMEN_TRY(parse_tensor(key, value, &p));
    parsed.push_back(std::move(p));
  }
  std::sort(parsed.begin(), parsed.end(), [](const Parsed& a, const Parsed& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  for (size_t i = 1; i < parsed.size(); ++i) {
    if (parsed[i].begin < parsed[i - 1].end)
      return fail("tensors '" + quote(parsed[i - 1].tensor.name) + "' and '" + quote(parsed[i].tensor.name) +
                  "' overlap in the data section");
  }
  file.tensors.reserve(parsed.size());
  for (Parsed& p : parsed) file.tensors.push_back(std::move(p.tensor));
  return file;
}

}  // namespace

Result<SafetensorsFile> parse_safetensors(std::span<const std::byte> bytes, const std::string& name) {
  try {
    SafetensorsParser parser(bytes, name);
    return parser.parse();
  } catch (const std::exception& e) {  // nlohmann type errors, bad_alloc: never escape the layer
    return error("safetensors: cannot read '" + name + "': " + quote(e.what()));
  }
}

}  // namespace lumen::gguf
