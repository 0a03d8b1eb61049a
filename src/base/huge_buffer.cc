#include "base/huge_buffer.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>
#include <utility>

namespace lumen {

HugeBuffer::HugeBuffer(HugeBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), n_bytes_(std::exchange(other.n_bytes_, 0)) {}

HugeBuffer& HugeBuffer::operator=(HugeBuffer&& other) noexcept {
  if (this != &other) {
    if (data_) munmap(data_, n_bytes_);
    data_ = std::exchange(other.data_, nullptr);
    n_bytes_ = std::exchange(other.n_bytes_, 0);
  }
  return *this;
}

HugeBuffer::~HugeBuffer() {
  if (data_) munmap(data_, n_bytes_);
}

bool anonymous_huge_pages_enabled() {
  std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string s;
  std::getline(in, s);
  return s.find("[always]") != std::string::npos || s.find("[madvise]") != std::string::npos;
}

Result<HugeBuffer> HugeBuffer::allocate(size_t n_bytes, std::string_view what) {
  if (n_bytes == 0) return error(std::string(what) + ": cannot allocate 0 bytes");
  void* p = mmap(nullptr, n_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    return error(std::string(what) + ": cannot allocate " + std::to_string(n_bytes) + " bytes: " + std::strerror(errno));
#ifdef MADV_HUGEPAGE
  madvise(p, n_bytes, MADV_HUGEPAGE);
#endif
  HugeBuffer b;
  b.data_ = static_cast<std::byte*>(p);
  b.n_bytes_ = n_bytes;
  return b;
}

}  // namespace lumen
