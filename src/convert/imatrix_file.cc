#include "convert/imatrix_file.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <optional>
#include <span>

#include "gguf/gguf_writer.h"
#include "gguf/model_file.h"

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

// The last step of an atomic write: the finished temporary file takes the path's place.
Status move_into_place(const std::string& tmp, const std::string& path) {
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return error("cannot rename '" + tmp + "' to '" + path + "'");
  }
  return Status();
}

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

namespace {

// llama-imatrix's GGUF form (newer llama.cpp; the file starts with "GGUF"): per weight matrix
// NAME an f32 tensor NAME.in_sum2 [n_columns, n_mat] (sum of x^2 over the tokens that met
// each of the n_mat matrices: 1, or the experts of a 3-D weight) and NAME.counts [1, n_mat]
// (those token counts), optionally NAME.in_sum (sum of x, not used), with the keys
// imatrix.datasets, imatrix.chunk_count and imatrix.chunk_size. llama-quantize reads the
// importance of each column as in_sum2 / count in f32, and 1 for a matrix with count 0 (no
// calibration token reached that expert); that is what is stored here, with n_calls = 1.
Result<Imatrix> parse_imatrix_gguf(std::string_view bytes) {
  auto file = gguf::parse_gguf(std::span(reinterpret_cast<const std::byte*>(bytes.data()), bytes.size()), "imatrix");
  if (!file.ok()) return error("GGUF: " + file.message());
  for (const char* key : {"imatrix.datasets", "imatrix.chunk_count", "imatrix.chunk_size"})
    if (file->find(key) == nullptr) return error(std::string("GGUF: no '") + key + "' (not an importance matrix?)");
  Imatrix m;
  const std::optional<int64_t> n_chunks = file->get_int("imatrix.chunk_count");
  if (!n_chunks || *n_chunks < 0 || *n_chunks > INT32_MAX) return error("GGUF: imatrix.chunk_count is not a count");
  m.n_chunks = static_cast<int32_t>(*n_chunks);
  if (const std::vector<std::string>* sets = file->get_string_array("imatrix.datasets"); sets && !sets->empty())
    m.dataset = sets->front();
  std::map<std::string, std::pair<const gguf::TensorInfo*, const gguf::TensorInfo*>> parts;  // sums, counts
  for (const gguf::TensorInfo& t : file->tensors()) {
    std::string_view name = t.name;
    if (name.ends_with(".in_sum2")) parts[std::string(name.substr(0, name.size() - 8))].first = &t;
    else if (name.ends_with(".counts")) parts[std::string(name.substr(0, name.size() - 7))].second = &t;
  }
  if (parts.empty()) return error("GGUF: no NAME.in_sum2 / NAME.counts tensors");
  for (const auto& [name, p] : parts) {
    const auto [sums, counts] = p;
    if (!sums || !counts) return error("GGUF: '" + name + "' has " + (sums ? "in_sum2 but no counts" : "counts but no in_sum2"));
    if (sums->view.dtype != DType::kF32 || counts->view.dtype != DType::kF32)
      return error("GGUF: '" + name + "': in_sum2 and counts must be f32");
    const int64_t n_mat = sums->view.n_dims > 1 ? sums->view.ne[1] : 1;
    const int64_t n_col = sums->view.ne[0];
    if (sums->view.n_dims > 2 || counts->view.n_elements() != n_mat || n_col < 1 || n_mat < 1)
      return error("GGUF: '" + name + "': in_sum2 " + sums->view.shape_string() + " and counts " +
                   counts->view.shape_string() + " do not fit ([columns, matrices] and [1, matrices])");
    const float* sum = reinterpret_cast<const float*>(sums->view.data);
    const float* count = reinterpret_cast<const float*>(counts->view.data);
    ImatrixEntry e;
    e.n_calls = 1;
    e.values.resize(static_cast<size_t>(n_col * n_mat));
    for (int64_t j = 0; j < n_mat; ++j) {
      float c = 0;
      std::memcpy(&c, count + j, 4);
      if (!std::isfinite(c) || c < 0) return error("GGUF: '" + name + "': count " + std::to_string(c));
      for (int64_t i = 0; i < n_col; ++i) {
        float v = 0;
        std::memcpy(&v, sum + j * n_col + i, 4);
        if (!std::isfinite(v) || v < 0)
          return error("GGUF: '" + name + "': in_sum2 value " + std::to_string(j * n_col + i) + " is " + std::to_string(v) +
                       " (sums of squares are finite and >= 0)");
        e.values[static_cast<size_t>(j * n_col + i)] = c > 0 ? v / c : 1.0f;
      }
    }
    m.entries.emplace(name, std::move(e));
  }
  return m;
}

}  // namespace

Result<Imatrix> parse_imatrix(std::string_view bytes) {
  if (bytes.starts_with("GGUF")) return parse_imatrix_gguf(bytes);
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
  return move_into_place(tmp, path);
}

Status write_imatrix_gguf(const std::string& path, const std::map<std::string, ImatrixSums>& sums,
                          const std::string& dataset, int32_t n_chunks, int32_t chunk_size) {
  gguf::GgufWriter w;
  w.set("general.type", gguf::MetaValue::of_string("imatrix"));
  w.set("imatrix.datasets", gguf::MetaValue::of_string_array({dataset}));
  w.set("imatrix.chunk_count", gguf::MetaValue::of_u32(static_cast<uint32_t>(std::max(n_chunks, 0))));
  w.set("imatrix.chunk_size", gguf::MetaValue::of_u32(static_cast<uint32_t>(std::max(chunk_size, 0))));
  for (const auto& [name, e] : sums) {  // std::map: sorted names, as llama-imatrix writes them
    const int64_t n_mat = static_cast<int64_t>(e.counts.size());
    if (n_mat < 1 || e.in_sum2.empty() || e.in_sum2.size() % e.counts.size() != 0)
      return error("imatrix '" + name + "': " + std::to_string(e.in_sum2.size()) + " sums do not split into " +
                   std::to_string(n_mat) + " matrices");
    const int64_t n_col = static_cast<int64_t>(e.in_sum2.size()) / n_mat;
    LUMEN_TRY(w.add_tensor(name + ".in_sum2", DType::kF32, {n_col, n_mat}, std::as_bytes(std::span(e.in_sum2))));
    LUMEN_TRY(w.add_tensor(name + ".counts", DType::kF32, {1, n_mat}, std::as_bytes(std::span(e.counts))));
  }
  const std::string tmp = path + ".tmp";
  LUMEN_TRY(w.write_file(tmp));
  return move_into_place(tmp, path);
}

}  // namespace lumen::convert
