// Reference weight quantizers: f32 rows -> GGUF block formats, producing the same bytes as
// llama-quantize (ggml's quantize_q*: quantize_row_*_ref without an importance matrix, the
// weighted *_impl searches with one). Bit-exactness against ggml is a test
// (quantize_ref_test.cc, vectors produced by ggml_quantize_chunk).
//
//   q8_0  d = amax / 127, q = roundf(x / d)            (roundf: ties away from zero)
//   q4_0  d = m / -8 where m is the signed value of largest magnitude,
//         q = min(15, trunc(x / d + 8.5)); q5_0 the same with 16 and 31
//   q4_1  d = (max - min) / 15, m = min, q = trunc((x - min) / d + 0.5); q5_1 with 31
//   q2_K .. q6_K  per-sub-block fits, then the sub-block scales quantized against a
//         super-block scale, then the levels re-derived from the rounded scales
//         (quantize_kquants.cc)
//   iq4_nl, iq4_xs  16-level non-linear grid, scale searched per 32-block (quantize_iq4.cc)
//   with an importance matrix: every type but q8_0 searches its scales under weights from
//         the imatrix (quantize_types.h)
//   f16 / bf16: round to nearest even (bf16: NaN stays NaN)
//
// Numerics follow ggml operation by operation in f32 (same order of operations, no fused
// multiply-add: the .cc files turn floating-point contraction off), because the searches
// compare errors and a different rounding of one sum can pick a different candidate.
#pragma once

#include <cstddef>
#include <cstdint>

#include "tensor/dtype.h"

namespace lumen::convert {

// True for the types quantize_row() can produce: f32, f16, bf16, q8_0, q4_0, q4_1, q5_0,
// q5_1, q2_K, q3_K, q4_K, q5_K, q6_K, iq4_nl, iq4_xs. (The 1-3 bit i-quants: not yet; a
// mix that needs one is refused by quantize_model before anything is written.)
bool can_quantize_to(DType dtype);

// True when an importance matrix changes what quantize_row() writes for `dtype` (every
// quantized type but q8_0).
bool quantize_uses_imatrix(DType dtype);

// Converts one row of n f32 values to `dtype` (row_bytes(dtype, n) bytes at dst). `imatrix`:
// n importance weights (mean x^2 of each column's activations) or null.
// Preconditions: can_quantize_to(dtype) and n is a multiple of the block size.
void quantize_row(DType dtype, const float* src, std::byte* dst, int64_t n, const float* imatrix = nullptr);

void convert_row_f16(const float* x, std::byte* dst, int64_t n);
void convert_row_bf16(const float* x, std::byte* dst, int64_t n);

}  // namespace lumen::convert
