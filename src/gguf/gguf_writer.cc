#include "gguf/gguf_writer.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "base/check.h"
#include "gguf/gguf_util.h"

namespace lumen::gguf {
namespace {

constexpr uint32_t kDefaultAlignment = 32;

class ByteSink {
 public:
  explicit ByteSink(std::vector<std::byte>* out) : out_(out) {}
  void raw(const void* p, size_t n) {
    if (n == 0) return;
    const size_t at = out_->size();
    out_->resize(at + n);
    std::memcpy(out_->data() + at, p, n);
  }
  template <typename T>
  void pod(T v) { raw(&v, sizeof(T)); }
  void str(std::string_view s) {
    pod<uint64_t>(s.size());
    raw(s.data(), s.size());
  }

 private:
  std::vector<std::byte>* out_;
};

void write_scalar(ByteSink& sink, ValueType type, const MetaValue& v) {
  switch (type) {
    case ValueType::kU8: sink.pod(static_cast<uint8_t>(v.i)); break;
    case ValueType::kI8: sink.pod(static_cast<int8_t>(v.i)); break;
    case ValueType::kU16: sink.pod(static_cast<uint16_t>(v.i)); break;
    case ValueType::kI16: sink.pod(static_cast<int16_t>(v.i)); break;
    case ValueType::kU32: sink.pod(static_cast<uint32_t>(v.i)); break;
    case ValueType::kI32: sink.pod(static_cast<int32_t>(v.i)); break;
    case ValueType::kU64: sink.pod(static_cast<uint64_t>(v.i)); break;
    case ValueType::kI64: sink.pod(v.i); break;
    case ValueType::kF32: sink.pod(static_cast<float>(v.f)); break;
    case ValueType::kF64: sink.pod(v.f); break;
    case ValueType::kBool: sink.pod(static_cast<uint8_t>(v.b ? 1 : 0)); break;
    case ValueType::kString: sink.str(v.s); break;
    case ValueType::kArray: LUMEN_CHECK_MSG(false, "write_scalar on an array"); break;
  }
}

void write_value(ByteSink& sink, const MetaValue& v) {
  sink.pod(static_cast<uint32_t>(v.type));
  if (v.type != ValueType::kArray) {
    write_scalar(sink, v.type, v);
    return;
  }
  sink.pod(static_cast<uint32_t>(v.array_type));
  sink.pod(static_cast<uint64_t>(v.array_size()));
  if (v.array_type == ValueType::kString) {
    for (const std::string& s : v.arr_str) sink.str(s);
  } else if (is_float_type(v.array_type)) {
    MetaValue e;
    for (double f : v.arr_float) { e.f = f; write_scalar(sink, v.array_type, e); }
  } else if (v.array_type != ValueType::kArray) {
    MetaValue e;
    for (int64_t i : v.arr_int) { e.i = i; e.b = i != 0; write_scalar(sink, v.array_type, e); }
  }
}

uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

}  // namespace

GgufWriter::GgufWriter(uint32_t alignment) : alignment_(alignment) {
  LUMEN_CHECK_MSG(alignment != 0 && std::has_single_bit(alignment), "alignment must be a power of two");
}

void GgufWriter::set(std::string key, MetaValue value) {
  for (auto& [k, v] : meta_) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  meta_.emplace_back(std::move(key), std::move(value));
}

void GgufWriter::set_all(const ModelFile& file) {
  for (const auto& [k, v] : file.metadata())
    if (k != "general.alignment") set(k, v);
}

Status GgufWriter::add_tensor(std::string name, DType dtype, std::span<const int64_t> ne,
                              std::span<const std::byte> data) {
  if (ne.empty() || ne.size() > 4)
    return error("gguf writer: tensor '" + name + "': " + std::to_string(ne.size()) + " dims, expected 1..4");
  for (const PendingTensor& t : tensors_)
    if (t.name == name) return error("gguf writer: duplicate tensor '" + name + "'");
  uint64_t ne_u[4] = {1, 1, 1, 1};
  for (size_t d = 0; d < ne.size(); ++d) {
    if (ne[d] < 0) return error("gguf writer: tensor '" + name + "': negative dimension");
    ne_u[d] = static_cast<uint64_t>(ne[d]);
  }
  Result<uint64_t> size = tensor_bytes(dtype_info(dtype), ne_u, static_cast<uint32_t>(ne.size()));
  if (!size.ok()) return error("gguf writer: tensor '" + name + "': " + size.message());
  if (*size != data.size())
    return error("gguf writer: tensor '" + name + "': data has " + std::to_string(data.size()) +
                 " bytes, shape needs " + std::to_string(*size));
  PendingTensor t{std::move(name), dtype, static_cast<int>(ne.size()), {1, 1, 1, 1}, data, data_bytes_};
  for (size_t d = 0; d < ne.size(); ++d) t.ne[d] = ne[d];
  data_bytes_ = align_up(data_bytes_ + data.size(), alignment_);
  tensors_.push_back(std::move(t));
  return Status();
}

Status GgufWriter::add_tensor_copy(std::string name, DType dtype, std::span<const int64_t> ne,
                                   std::span<const std::byte> data) {
  auto buf = std::make_unique<std::byte[]>(data.empty() ? 1 : data.size());
  if (!data.empty()) std::memcpy(buf.get(), data.data(), data.size());
  LUMEN_TRY(add_tensor(std::move(name), dtype, ne, std::span<const std::byte>(buf.get(), data.size())));
  owned_.push_back(std::move(buf));
  return Status();
}

std::vector<std::byte> GgufWriter::header_bytes() const {
  std::vector<std::byte> out;
  ByteSink sink(&out);
  bool has_alignment_key = false;
  for (const auto& kv : meta_) has_alignment_key |= kv.first == "general.alignment";
  const bool add_alignment_key = alignment_ != kDefaultAlignment && !has_alignment_key;
  sink.raw("GGUF", 4);
  sink.pod<uint32_t>(3);
  sink.pod<uint64_t>(tensors_.size());
  sink.pod<uint64_t>(meta_.size() + (add_alignment_key ? 1 : 0));
  for (const auto& [key, value] : meta_) {
    if (key == "general.alignment") {  // always the writer's real alignment
      sink.str(key);
      write_value(sink, MetaValue::of_u32(alignment_));
      continue;
    }
    sink.str(key);
    write_value(sink, value);
  }
  if (add_alignment_key) {
    sink.str("general.alignment");
    write_value(sink, MetaValue::of_u32(alignment_));
  }
  for (const PendingTensor& t : tensors_) {
    sink.str(t.name);
    sink.pod<uint32_t>(static_cast<uint32_t>(t.n_dims));
    for (int d = 0; d < t.n_dims; ++d) sink.pod<uint64_t>(static_cast<uint64_t>(t.ne[d]));
    sink.pod<uint32_t>(static_cast<uint32_t>(t.dtype));
    sink.pod<uint64_t>(t.offset);
  }
  out.resize(align_up(out.size(), alignment_));
  return out;
}

template <typename Sink>
void GgufWriter::write_all(Sink&& sink) const {
  const std::vector<std::byte> header = header_bytes();
  sink(header.data(), header.size());
  static constexpr std::byte kZeros[256] = {};
  uint64_t pos = 0;
  for (const PendingTensor& t : tensors_) {
    for (; pos < t.offset;) {  // padding up to the tensor's aligned offset
      const uint64_t n = std::min<uint64_t>(sizeof(kZeros), t.offset - pos);
      sink(kZeros, n);
      pos += n;
    }
    sink(t.data.data(), t.data.size());
    pos += t.data.size();
  }
  for (; pos < data_bytes_;) {
    const uint64_t n = std::min<uint64_t>(sizeof(kZeros), data_bytes_ - pos);
    sink(kZeros, n);
    pos += n;
  }
}

std::vector<std::byte> GgufWriter::serialize() const {
  std::vector<std::byte> out;
  ByteSink sink(&out);
  write_all([&](const void* p, size_t n) { sink.raw(p, n); });
  return out;
}

Status GgufWriter::write_file(const std::string& path) const {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return error("gguf writer: cannot create '" + path + "': " + std::strerror(errno));
  bool ok = true;
  write_all([&](const void* p, size_t n) {
    if (ok && n > 0 && std::fwrite(p, 1, n, f) != n) ok = false;
  });
  const std::string write_err = ok ? "" : std::strerror(errno);
  if (std::fclose(f) != 0 && ok) return error("gguf writer: cannot close '" + path + "': " + std::strerror(errno));
  if (!ok) return error("gguf writer: write to '" + path + "' failed: " + write_err);
  return Status();
}

}  // namespace lumen::gguf
