#include "server/routing_key.h"

#include <algorithm>
#include <cstdio>

namespace lumen::server {
namespace {

// FNV-1a, 64 bits: stable across builds and machines (the key is shared with balancers).
constexpr uint64_t kFnvOffset = 14695981039346656037ull;
constexpr uint64_t kFnvPrime = 1099511628211ull;

uint64_t fnv1a(uint64_t h, const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * kFnvPrime;
  return h;
}

std::string keyed(std::string_view source, const void* data, size_t n) {
  uint64_t h = fnv1a(kFnvOffset, source.data(), source.size());
  h = fnv1a(h, data, n);
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return std::string(source) + "-" + hex;
}

}  // namespace

std::string routing_key(std::string_view session_id, std::string_view user, std::string_view cache_salt,
                        std::span<const int32_t> prompt_ids) {
  if (!session_id.empty()) return keyed("session", session_id.data(), session_id.size());
  if (!user.empty()) return keyed("user", user.data(), user.size());
  if (!cache_salt.empty()) return keyed("salt", cache_salt.data(), cache_salt.size());
  // Little-endian int32 ids, as the block hash chain sees them.
  const size_t n = std::min<size_t>(prompt_ids.size(), kRoutingBlockTokens);
  unsigned char bytes[kRoutingBlockTokens * 4];
  for (size_t i = 0; i < n; ++i)
    for (int b = 0; b < 4; ++b) bytes[i * 4 + b] = static_cast<unsigned char>(static_cast<uint32_t>(prompt_ids[i]) >> (8 * b));
  return keyed("prefix", bytes, n * 4);
}

}  // namespace lumen::server
