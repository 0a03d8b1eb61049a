// Reference weight quantizers: f32 rows -> GGUF block formats, producing the same bytes as
// ggml's reference quantizers (quantize_row_*_ref, what `llama-quantize` runs without an
// importance matrix). Bit-exactness against ggml is a test (quantize_ref_test.cc, vectors
// produced by ggml_quantize_chunk).
//
//   q8_0  d = amax / 127, q = roundf(x / d)            (roundf: ties away from zero)
//   q4_0  d = m / -8 where m is the signed value of largest magnitude,
//         q = min(15, trunc(x / d + 8.5))
//   q4_K  per 32-sub-block (scale, min) fitted by a weighted search (make_qkx2_quants),
//         then 6-bit scales/mins against the super-block maxima, and 4-bit quants
//         re-derived from the rounded scales
//   q6_K  per 16-sub-block signed scale fitted by an x^2-weighted search (make_qx_quants),
//         8-bit scales against the largest, 6-bit quants re-derived from the rounded scales
//   f16 / bf16: round to nearest even (bf16: NaN stays NaN)
//
// Numerics follow ggml operation by operation in f32 (same order of operations, no fused
// multiply-add: the .cc turns floating-point contraction off), because the K-quant searches
// compare errors and a different rounding of one sum can pick a different candidate.
#pragma once

#include <cstddef>
#include <cstdint>

#include "tensor/dtype.h"

namespace lumen::convert {

// True for the types quantize_row() can produce: f32, f16, bf16, q8_0, q4_0, q4_K, q6_K.
bool can_quantize_to(DType dtype);

// Converts one row of n f32 values to `dtype` (row_bytes(dtype, n) bytes at dst).
// Preconditions: can_quantize_to(dtype) and n is a multiple of the block size.
void quantize_row(DType dtype, const float* src, std::byte* dst, int64_t n);

// The individual quantizers (n a multiple of 32, or of 256 for the K types).
void quantize_row_q8_0(const float* x, std::byte* dst, int64_t n);
void quantize_row_q4_0(const float* x, std::byte* dst, int64_t n);
void quantize_row_q4_k(const float* x, std::byte* dst, int64_t n);
void quantize_row_q6_k(const float* x, std::byte* dst, int64_t n);
void convert_row_f16(const float* x, std::byte* dst, int64_t n);
void convert_row_bf16(const float* x, std::byte* dst, int64_t n);

}  // namespace lumen::convert
