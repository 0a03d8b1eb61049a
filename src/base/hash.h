// FNV-1a, 64-bit: a fast, stable (across runs and machines) hash for fingerprints of bytes in
// tests, goldens and `lumen info --tensors`. Not for hash tables facing untrusted keys.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace lumen {

inline constexpr uint64_t kFnv1a64Offset = 0xCBF29CE484222325ull;

// Continues hash `h` over n bytes at data (start with kFnv1a64Offset).
inline uint64_t fnv1a64(const void* data, size_t n, uint64_t h = kFnv1a64Offset) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 0x100000001B3ull;
  }
  return h;
}

inline uint64_t fnv1a64(std::string_view s, uint64_t h = kFnv1a64Offset) { return fnv1a64(s.data(), s.size(), h); }

}  // namespace lumen
