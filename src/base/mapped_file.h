// A read-only memory-mapped file. Move-only; unmaps on destruction.
#pragma once

#include <cstddef>
#include <span>
#include <string>

#include "base/status.h"

namespace lumen {

class MappedFile {
 public:
  MappedFile() = default;
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  // Maps the whole file read-only (MAP_PRIVATE). An empty file maps to an empty span.
  static Result<MappedFile> open(const std::string& path);

  std::span<const std::byte> bytes() const { return {data_, size_}; }
  const std::byte* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

  // Hints the kernel to back the mapping with transparent huge pages where possible.
  void advise_hugepages() const;

 private:
  const std::byte* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
};

// Reads a whole (small) file into a string, e.g. a JSON config.
Result<std::string> read_text_file(const std::string& path);

}  // namespace lumen
