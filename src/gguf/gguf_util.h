// Helpers shared by the gguf layer's readers (private to src/gguf).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "base/status.h"
#include "tensor/dtype.h"

namespace lumen::gguf {

// `s` made safe for an error message: non-printable bytes as \xNN, cut at 96 bytes.
std::string quote(std::string_view s);

// Bytes of a tensor with `n_dims` dims ne[] (GGML order, unused dims 1). Errors (without
// a prefix: callers add the tensor name) when ne[0] is not a multiple of the block size,
// when the element count does not fit int64 (counting 0-dims as 1, so that n_rows() of an
// empty tensor cannot overflow either) or the byte size overflows.
Result<uint64_t> tensor_bytes(const DTypeInfo& dtype, const uint64_t ne[4], uint32_t n_dims);

// a * b, or nullopt-like false on uint64 overflow.
inline bool checked_mul(uint64_t a, uint64_t b, uint64_t* out) { return !__builtin_mul_overflow(a, b, out); }
inline bool checked_add(uint64_t a, uint64_t b, uint64_t* out) { return !__builtin_add_overflow(a, b, out); }

}  // namespace lumen::gguf
