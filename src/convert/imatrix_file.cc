#include "convert/imatrix_file.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>

namespace lumen::convert {
namespace {

constexpr int32_t kMaxNameLen = 4096;

// Sequential little-endian reads over the file's bytes; every read checks what is left.
class Reader {
 public:
  explicit Reader(std::string_view bytes) : bytes_(bytes) {}
  size_t left() const { return bytes_.size() - pos_; }
  size_t pos() const { return pos_; }
  bool i32(int32_t* v) { return raw(v, 4); }
  bool raw(void* out, size_t n) {
    if (left() < n) return false;
    std::memcpy(out, bytes_.data() + pos_, n);
    pos_ += n;
    return true;
  }

 private:
  std::string_view bytes_;
  size_t pos_ = 0;
};

void put_i32(std::string* out, int32_t v) { out->append(reinterpret_cast<const char*>(&v), 4); }

}  // namespace

std::vector<float> Imatrix::weights(std::string_view name) const {
  auto it = entries.find(std::string(name));
  if (it == entries.end()) return {};
  std::vector<float> w = it->second.values;
  // llama-quantize: v /= ncall in f32 when ncall > 0.
  if (it->second.n_calls > 0)
    for (float& v : w) v /= static_cast<float>(it->second.n_calls);
  return w;
}

Result<Imatrix> parse_imatrix(std::string_view bytes) {
  Reader r(bytes);
  auto at = [&](const std::string& what) { return what + " at byte " + std::to_string(r.pos()); };
  int32_t n_entries = 0;
  if (!r.i32(&n_entries)) return error("truncated: no entry count");
  if (n_entries < 1) return error("entry count " + std::to_string(n_entries) + " (need at least 1)");
  Imatrix m;
  for (int32_t i = 0; i < n_entries; ++i) {
    const std::string entry = "entry " + std::to_string(i);
    int32_t len = 0;
    if (!r.i32(&len)) return error(at(entry + ": truncated name length"));
    if (len < 1 || len > kMaxNameLen)
      return error(at(entry + ": name length " + std::to_string(len) + " is not in [1, 4096]"));
    std::string name(static_cast<size_t>(len), '\0');
    if (!r.raw(name.data(), name.size())) return error(at(entry + ": truncated name"));
    ImatrixEntry e;
    int32_t n_values = 0;
    if (!r.i32(&e.n_calls) || !r.i32(&n_values)) return error(at(entry + " '" + name + "': truncated header"));
    if (e.n_calls < 0) return error(entry + " '" + name + "': negative call count " + std::to_string(e.n_calls));
    if (n_values < 1 || static_cast<uint64_t>(n_values) * 4 > r.left())
      return error(at(entry + " '" + name + "': " + std::to_string(n_values) + " values do not fit in the " +
                      std::to_string(r.left()) + " bytes left"));
    e.values.resize(static_cast<size_t>(n_values));
    r.raw(e.values.data(), e.values.size() * 4);
    for (size_t j = 0; j < e.values.size(); ++j)
      if (!std::isfinite(e.values[j]) || e.values[j] < 0)
        return error(entry + " '" + name + "': value " + std::to_string(j) + " is " + std::to_string(e.values[j]) +
                     " (importance weights are finite and >= 0)");
    if (!m.entries.emplace(name, std::move(e)).second) return error(entry + ": duplicate name '" + name + "'");
  }
  if (r.left() == 0) return m;
  int32_t dataset_len = 0;
  if (!r.i32(&m.n_chunks) || !r.i32(&dataset_len)) return error(at("truncated chunk count / dataset name"));
  if (dataset_len < 0 || static_cast<size_t>(dataset_len) > r.left())
    return error(at("dataset name length " + std::to_string(dataset_len) + " does not fit"));
  m.dataset.resize(static_cast<size_t>(dataset_len));
  r.raw(m.dataset.data(), m.dataset.size());
  if (r.left() != 0) return error(at(std::to_string(r.left()) + " unexpected trailing bytes"));
  return m;
}

Result<Imatrix> read_imatrix(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return error("cannot open imatrix file '" + path + "'");
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  Result<Imatrix> m = parse_imatrix(bytes);
  if (!m.ok()) return error("imatrix file '" + path + "': " + m.message());
  return m;
}

std::string serialize_imatrix(const Imatrix& m) {
  std::string out;
  put_i32(&out, static_cast<int32_t>(m.entries.size()));
  for (const auto& [name, e] : m.entries) {
    put_i32(&out, static_cast<int32_t>(name.size()));
    out += name;
    put_i32(&out, e.n_calls);
    put_i32(&out, static_cast<int32_t>(e.values.size()));
    out.append(reinterpret_cast<const char*>(e.values.data()), e.values.size() * 4);
  }
  put_i32(&out, m.n_chunks);
  put_i32(&out, static_cast<int32_t>(m.dataset.size()));
  out += m.dataset;
  return out;
}

Status write_imatrix(const std::string& path, const Imatrix& m) {
  const std::string bytes = serialize_imatrix(m);
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return error("cannot write '" + tmp + "'");
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!out) {
      std::remove(tmp.c_str());
      return error("writing '" + tmp + "' failed");
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return error("cannot rename '" + tmp + "' to '" + path + "'");
  }
  return Status();
}

}  // namespace lumen::convert
