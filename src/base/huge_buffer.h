// HugeBuffer: an owned, zero-filled anonymous mapping advised onto 2 MiB pages
// (MADV_HUGEPAGE), for large buffers streamed every step (interleaved weights, the KV
// cache): on 4 KiB pages such a stream pays a TLB miss every 4 KiB. Move-only.
#pragma once

#include <cstddef>
#include <string_view>

#include "base/status.h"

namespace lumen {

// Whether anonymous memory advised MADV_HUGEPAGE gets 2 MiB pages (transparent huge pages
// "always" or "madvise" in /sys/kernel/mm/transparent_hugepage/enabled).
bool anonymous_huge_pages_enabled();

class HugeBuffer {
 public:
  HugeBuffer() = default;
  HugeBuffer(HugeBuffer&& other) noexcept;
  HugeBuffer& operator=(HugeBuffer&& other) noexcept;
  HugeBuffer(const HugeBuffer&) = delete;
  HugeBuffer& operator=(const HugeBuffer&) = delete;
  ~HugeBuffer();

  // n_bytes > 0; `what` names the buffer in the error ("kv cache", "interleaved weights").
  static Result<HugeBuffer> allocate(size_t n_bytes, std::string_view what);

  std::byte* data() const { return data_; }
  size_t n_bytes() const { return n_bytes_; }

 private:
  std::byte* data_ = nullptr;
  size_t n_bytes_ = 0;
};

}  // namespace lumen
