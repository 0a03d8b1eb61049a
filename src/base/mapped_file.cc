#include "base/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
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

Result<std::string> read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return error("cannot open '" + path + "': " + std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return error("cannot read '" + path + "'");
  return ss.str();
}

}  // namespace lumen
