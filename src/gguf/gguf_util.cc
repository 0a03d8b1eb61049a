#include "gguf/gguf_util.h"

#include <limits>

namespace lumen::gguf {

std::string quote(std::string_view s) {
  constexpr size_t kMaxBytes = 96;
  std::string out;
  const size_t n = s.size() < kMaxBytes ? s.size() : kMaxBytes;
  out.reserve(n + 8);
  static constexpr char kHex[] = "0123456789abcdef";
  for (size_t i = 0; i < n; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out.push_back(static_cast<char>(c));
    } else {
      out += "\\x";
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  if (n < s.size()) out += "...";
  return out;
}

Result<uint64_t> tensor_bytes(const DTypeInfo& dtype, const uint64_t ne[4], uint32_t n_dims) {
  constexpr uint64_t kMaxI64 = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  std::string shape = "[";
  for (uint32_t d = 0; d < n_dims; ++d) shape += (d ? ", " : "") + std::to_string(ne[d]);
  shape += "]";
  uint64_t n_elements_nonzero = 1;
  for (int d = 0; d < 4; ++d) {
    if (ne[d] > kMaxI64) return error("shape " + shape + ": dimension too large");
    const uint64_t dim = ne[d] == 0 ? 1 : ne[d];
    if (!checked_mul(n_elements_nonzero, dim, &n_elements_nonzero) || n_elements_nonzero > kMaxI64)
      return error("shape " + shape + ": element count overflows");
  }
  if (ne[0] % dtype.block_size != 0)
    return error("shape " + shape + ": ne[0] = " + std::to_string(ne[0]) + " is not a multiple of the " +
                 std::string(dtype.name) + " block size " + std::to_string(dtype.block_size));
  uint64_t bytes = 0;
  if (!checked_mul(ne[0] / dtype.block_size, dtype.block_bytes, &bytes))
    return error("shape " + shape + ": byte size overflows");
  for (int d = 1; d < 4; ++d)
    if (!checked_mul(bytes, ne[d], &bytes)) return error("shape " + shape + ": byte size overflows");
  if (bytes > kMaxI64) return error("shape " + shape + ": byte size overflows");
  return bytes;
}

}  // namespace lumen::gguf
