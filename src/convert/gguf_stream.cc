#include "convert/gguf_stream.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>

#include "base/check.h"

namespace lumen::convert {
namespace {

using gguf::MetaValue;
using gguf::ValueType;

constexpr uint32_t kDefaultAlignment = 32;

uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

class HeaderSink {
 public:
  explicit HeaderSink(std::vector<std::byte>* out) : out_(out) {}
  void raw(const void* p, size_t n) {
    const auto* b = static_cast<const std::byte*>(p);
    out_->insert(out_->end(), b, b + n);
  }
  template <typename T>
  void pod(T v) { raw(&v, sizeof(T)); }
  void str(std::string_view s) {
    pod<uint64_t>(s.size());
    raw(s.data(), s.size());
  }

  // One scalar of `type` from the MetaValue storage (integers in i, floats in f).
  void scalar(ValueType type, int64_t i, double f, bool b, const std::string& s) {
    switch (type) {
      case ValueType::kU8: pod(static_cast<uint8_t>(i)); return;
      case ValueType::kI8: pod(static_cast<int8_t>(i)); return;
      case ValueType::kU16: pod(static_cast<uint16_t>(i)); return;
      case ValueType::kI16: pod(static_cast<int16_t>(i)); return;
      case ValueType::kU32: pod(static_cast<uint32_t>(i)); return;
      case ValueType::kI32: pod(static_cast<int32_t>(i)); return;
      case ValueType::kU64: pod(static_cast<uint64_t>(i)); return;
      case ValueType::kI64: pod(i); return;
      case ValueType::kF32: pod(static_cast<float>(f)); return;
      case ValueType::kF64: pod(f); return;
      case ValueType::kBool: pod(static_cast<uint8_t>(b ? 1 : 0)); return;
      case ValueType::kString: str(s); return;
      case ValueType::kArray: break;
    }
    LUMEN_CHECK_MSG(false, "gguf stream writer: nested arrays are not written");
  }

  void value(const MetaValue& v) {
    pod(static_cast<uint32_t>(v.type));
    if (v.type != ValueType::kArray) {
      scalar(v.type, v.i, v.f, v.b, v.s);
      return;
    }
    pod(static_cast<uint32_t>(v.array_type));
    pod(static_cast<uint64_t>(v.array_size()));
    static const std::string kEmpty;
    if (v.array_type == ValueType::kString) {
      for (const std::string& s : v.arr_str) str(s);
    } else if (gguf::is_float_type(v.array_type)) {
      for (double f : v.arr_float) scalar(v.array_type, 0, f, false, kEmpty);
    } else {
      for (int64_t i : v.arr_int) scalar(v.array_type, i, 0.0, i != 0, kEmpty);
    }
  }

 private:
  std::vector<std::byte>* out_;
};

}  // namespace

bool TensorSink::write(const void* data, size_t n) {
  if (failed_) return false;
  if (n > 0 && std::fwrite(data, 1, n, f_) != n) {
    failed_ = true;
    return false;
  }
  n_written_ += n;
  return true;
}

GgufStreamWriter::GgufStreamWriter(uint32_t alignment) : alignment_(alignment) {
  LUMEN_CHECK_MSG(alignment != 0 && std::has_single_bit(alignment), "alignment must be a power of two");
}

void GgufStreamWriter::set(std::string key, MetaValue value) {
  for (auto& [k, v] : meta_) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  meta_.emplace_back(std::move(key), std::move(value));
}

void GgufStreamWriter::erase(std::string_view key) {
  std::erase_if(meta_, [&](const auto& kv) { return kv.first == key; });
}

const MetaValue* GgufStreamWriter::find(std::string_view key) const {
  for (const auto& [k, v] : meta_)
    if (k == key) return &v;
  return nullptr;
}

Status GgufStreamWriter::add_tensor(std::string name, DType dtype, std::vector<int64_t> ne) {
  if (ne.empty() || ne.size() > 4)
    return error("gguf stream writer: tensor '" + name + "' has " + std::to_string(ne.size()) +
                 " dims, expected 1..4");
  for (const TensorDecl& t : tensors_)
    if (t.name == name) return error("gguf stream writer: duplicate tensor '" + name + "'");
  const DTypeInfo& info = dtype_info(dtype);
  uint64_t n_rows = 1;
  for (size_t d = 0; d < ne.size(); ++d) {
    if (ne[d] <= 0 || ne[d] > (int64_t{1} << 40))
      return error("gguf stream writer: tensor '" + name + "': dimension " + std::to_string(d) + " = " +
                   std::to_string(ne[d]) + " is out of range");
    if (d > 0) n_rows *= static_cast<uint64_t>(ne[d]);
  }
  if (ne[0] % info.block_size != 0)
    return error("gguf stream writer: tensor '" + name + "': row length " + std::to_string(ne[0]) +
                 " is not a multiple of the " + std::string(info.name) + " block size " +
                 std::to_string(info.block_size));
  const uint64_t n_bytes = row_bytes(dtype, ne[0]) * n_rows;
  tensors_.push_back(TensorDecl{std::move(name), dtype, std::move(ne), n_bytes, data_bytes_});
  data_bytes_ = align_up(data_bytes_ + n_bytes, alignment_);
  return Status();
}

std::vector<std::byte> GgufStreamWriter::header_bytes() const {
  std::vector<std::byte> out;
  HeaderSink sink(&out);
  const bool add_alignment_key = alignment_ != kDefaultAlignment && !find("general.alignment");
  sink.raw("GGUF", 4);
  sink.pod<uint32_t>(3);
  sink.pod<uint64_t>(tensors_.size());
  sink.pod<uint64_t>(meta_.size() + (add_alignment_key ? 1 : 0));
  for (const auto& [key, value] : meta_) {
    sink.str(key);
    // general.alignment always states the writer's real alignment.
    sink.value(key == "general.alignment" ? MetaValue::of_u32(alignment_) : value);
  }
  if (add_alignment_key) {
    sink.str("general.alignment");
    sink.value(MetaValue::of_u32(alignment_));
  }
  for (const TensorDecl& t : tensors_) {
    sink.str(t.name);
    sink.pod<uint32_t>(static_cast<uint32_t>(t.ne.size()));
    for (int64_t d : t.ne) sink.pod<uint64_t>(static_cast<uint64_t>(d));
    sink.pod<uint32_t>(static_cast<uint32_t>(t.dtype));
    sink.pod<uint64_t>(t.offset);
  }
  out.resize(align_up(out.size(), alignment_));
  return out;
}

uint64_t GgufStreamWriter::file_bytes() const { return header_bytes().size() + data_bytes_; }

Status GgufStreamWriter::write_file(const std::string& path, const ProduceFn& produce) const {
  const std::string tmp_path = path + ".tmp";
  std::FILE* f = std::fopen(tmp_path.c_str(), "wb");
  if (!f) return error("cannot create '" + tmp_path + "': " + std::strerror(errno));
  auto fail = [&](const std::string& msg) {
    std::fclose(f);
    std::remove(tmp_path.c_str());
    return error(msg);
  };
  static constexpr std::byte kZeros[256] = {};
  TensorSink sink(f);
  const std::vector<std::byte> header = header_bytes();
  sink.write(header.data(), header.size());
  uint64_t pos = 0;  // within the data section
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const TensorDecl& t = tensors_[i];
    while (pos < t.offset) {  // padding up to the tensor's aligned offset
      const uint64_t n = std::min<uint64_t>(sizeof(kZeros), t.offset - pos);
      sink.write(kZeros, n);
      pos += n;
    }
    const uint64_t before = sink.n_written();
    Status st = produce(i, sink);
    if (!st.ok()) return fail(st.message());
    if (sink.failed()) return fail("write to '" + tmp_path + "' failed: " + std::strerror(errno));
    const uint64_t n = sink.n_written() - before;
    if (n != t.n_bytes)
      return fail("internal: tensor '" + t.name + "' produced " + std::to_string(n) + " bytes, expected " +
                  std::to_string(t.n_bytes));
    pos += n;
  }
  while (pos < data_bytes_) {
    const uint64_t n = std::min<uint64_t>(sizeof(kZeros), data_bytes_ - pos);
    sink.write(kZeros, n);
    pos += n;
  }
  if (sink.failed()) return fail("write to '" + tmp_path + "' failed: " + std::strerror(errno));
  if (std::fclose(f) != 0) {
    std::remove(tmp_path.c_str());
    return error("cannot close '" + tmp_path + "': " + std::strerror(errno));
  }
  if (std::rename(tmp_path.c_str(), path.c_str()) != 0) {
    const std::string msg = std::strerror(errno);
    std::remove(tmp_path.c_str());
    return error("cannot rename '" + tmp_path + "' to '" + path + "': " + msg);
  }
  return Status();
}

}  // namespace lumen::convert
