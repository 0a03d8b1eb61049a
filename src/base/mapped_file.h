// A read-only memory-mapped file. Move-only; unmaps on destruction.
#pragma once

#include <cstddef>
#include <cstdint>
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

  // For a file streamed in full every step (the interleaved weights): advises the mapping
  // onto 2 MiB pages, faults all of it in, and if under 90% of it ended up on 2 MiB pages
  // (the page cache held the file in small folios: it was written, copied or read without
  // the hint), drops our pages and the file's unmapped clean page cache and faults it in
  // again, so that readahead fills 2 MiB folios. Returns the fraction of the mapping on
  // 2 MiB pages afterwards (0 where the kernel maps files on 4 KiB pages only, or another
  // process keeps the small folios mapped).
  double populate_on_huge_pages() const;

 private:
  const std::byte* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
};

// Bytes of the mappings overlapping [p, p + n) that are backed by 2 MiB pages (file or
// anonymous), from /proc/self/smaps; 0 where that cannot be read.
int64_t huge_page_bytes(const void* p, size_t n);

// populate_on_huge_pages for [begin, begin + n) of a mapping of the file at `path`: the
// page cache is dropped and re-read when under `enough` of the range's whole 2 MiB pages
// are mapped so. Returns the fraction on 2 MiB pages afterwards.
double populate_range_on_huge_pages(const std::string& path, const std::byte* begin, size_t n, double enough);

// Reads a whole (small) file into a string, e.g. a JSON config.
Result<std::string> read_text_file(const std::string& path);

}  // namespace lumen
