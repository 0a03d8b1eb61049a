// Test-only helpers for the gguf layer's tests (not linked into lumen_gguf).
#pragma once

#include <cstddef>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/shared_dir.h"
#include "gguf/model_file.h"

namespace lumen::gguf::testing {

inline std::string stories260k_dir() { return shared_dir() + "/models/stories260K"; }
inline std::string tinystories656k_dir() { return shared_dir() + "/models/TinyStories-656K"; }

inline std::vector<std::byte> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> chars((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> out(chars.size());
  if (!chars.empty()) std::memcpy(out.data(), chars.data(), chars.size());
  return out;
}

inline void write_bytes(const std::string& path, std::span<const std::byte> bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

inline void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

// A fresh, empty temporary directory, removed on destruction.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "lumen_gguf_XXXXXX").string();
    path_ = mkdtemp(tmpl.data()) ? tmpl : std::string();
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// True when every tensor view of `file` lies inside one of `buffers`.
inline bool views_within(const ModelFile& file, std::span<const std::span<const std::byte>> buffers) {
  for (const TensorInfo& t : file.tensors()) {
    bool inside = false;
    for (std::span<const std::byte> b : buffers) {
      const std::byte* begin = b.data();
      const std::byte* end = b.data() + b.size();
      if (t.view.data >= begin && t.view.data <= end &&
          t.view.n_bytes <= static_cast<size_t>(end - t.view.data))
        inside = true;
    }
    if (!inside) return false;
  }
  return true;
}

struct StTensor {
  std::string name;
  std::string dtype;  // "F32", "F16", "BF16", ...
  std::vector<int64_t> shape;
  std::vector<std::byte> data;
};

// A safetensors image: u64 header length | JSON header (padded with spaces to 8 bytes) | data.
inline std::vector<std::byte> make_safetensors(const std::vector<StTensor>& tensors,
                                               const std::map<std::string, std::string>& metadata = {}) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const StTensor& t : tensors) {
    header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.data.size()}}};
    offset += t.data.size();
  }
  std::string text = header.dump();
  while ((8 + text.size()) % 8 != 0) text.push_back(' ');
  std::vector<std::byte> out(8 + text.size());
  const uint64_t n = text.size();
  std::memcpy(out.data(), &n, 8);
  std::memcpy(out.data() + 8, text.data(), text.size());
  for (const StTensor& t : tensors) out.insert(out.end(), t.data.begin(), t.data.end());
  return out;
}

inline std::vector<std::byte> f32_bytes(size_t n, float start = 0.0f) {
  std::vector<std::byte> out(n * 4);
  for (size_t i = 0; i < n; ++i) {
    const float f = start + static_cast<float>(i);
    std::memcpy(out.data() + i * 4, &f, 4);
  }
  return out;
}

}  // namespace lumen::gguf::testing
