#include "base/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>

namespace lumen {

MappedFile::~MappedFile() {
  if (data_ && size_) munmap(const_cast<std::byte*>(data_), size_);
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      path_(std::move(other.path_)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    if (data_ && size_) munmap(const_cast<std::byte*>(data_), size_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    path_ = std::move(other.path_);
  }
  return *this;
}

Result<MappedFile> MappedFile::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return error("cannot open '" + path + "': " + std::strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    std::string msg = std::strerror(errno);
    ::close(fd);
    return error("cannot stat '" + path + "': " + msg);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return error("'" + path + "' is not a regular file");
  }
  MappedFile mf;
  mf.path_ = path;
  mf.size_ = static_cast<size_t>(st.st_size);
  if (mf.size_ > 0) {
    void* p = mmap(nullptr, mf.size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      std::string msg = std::strerror(errno);
      ::close(fd);
      return error("cannot mmap '" + path + "': " + msg);
    }
    mf.data_ = static_cast<const std::byte*>(p);
  }
  ::close(fd);
  return mf;
}

void MappedFile::advise_hugepages() const {
#ifdef MADV_HUGEPAGE
  if (data_ && size_) madvise(const_cast<std::byte*>(data_), size_, MADV_HUGEPAGE);
#endif
}

int64_t huge_page_bytes(const void* p, size_t n) {
  const auto lo = reinterpret_cast<uintptr_t>(p), hi = lo + n;
  std::ifstream in("/proc/self/smaps");
  std::string line;
  bool inside = false;
  int64_t kib = 0;
  while (std::getline(in, line)) {
    unsigned long a = 0, b = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &a, &b) == 2 && line.find(':') > line.find(' ')) {
      inside = a < hi && b > lo;
    } else if (inside && (line.rfind("FilePmdMapped:", 0) == 0 || line.rfind("AnonHugePages:", 0) == 0)) {
      kib += std::atol(line.c_str() + line.find(':') + 1);
    }
  }
  return kib * 1024;
}

double populate_range_on_huge_pages(const std::string& path, const std::byte* begin, size_t n, double enough) {
  if (begin == nullptr || n == 0) return 0;
  auto* p = const_cast<std::byte*>(begin);
#ifdef MADV_HUGEPAGE
  madvise(p, n, MADV_HUGEPAGE);
#endif
  auto fraction = [&] { return std::min(1.0, static_cast<double>(huge_page_bytes(p, n)) / static_cast<double>(n)); };
#ifdef MADV_POPULATE_READ
  if (madvise(p, n, MADV_POPULATE_READ) != 0) return fraction();
  // Only whole 2 MiB pages can be mapped so: a file of a few MiB never reaches 90%.
  const size_t whole = n & ~((size_t{2} << 20) - 1);
  if (static_cast<double>(huge_page_bytes(p, n)) >= enough * static_cast<double>(whole)) return fraction();
  // Unmap our pages, drop the file's clean page cache (pages mapped elsewhere stay), read
  // it again through the MADV_HUGEPAGE mapping: readahead then fills 2 MiB folios.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return fraction();
  madvise(p, n, MADV_DONTNEED);
  // A file just written (or downloaded) is still dirty in the page cache, and dirty pages
  // are not dropped: write them back first.
  (void)::fdatasync(fd);
  (void)::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
  madvise(p, n, MADV_POPULATE_READ);
#endif
  return fraction();
}

double MappedFile::populate_on_huge_pages() const { return populate_range_on_huge_pages(path_, data_, size_, 0.9); }

Result<std::string> read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return error("cannot open '" + path + "': " + std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return error("cannot read '" + path + "'");
  return ss.str();
}

}  // namespace lumen
