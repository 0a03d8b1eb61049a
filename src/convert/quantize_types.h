// The per-type row quantizers behind quantize_row() (quantize_ref.h), one row of n values at a
// time. `imatrix`: n importance weights for the row's columns (the mean of x^2 of the
// activations each column multiplies, from an imatrix file) or null.
//
// With an importance matrix ggml runs a different quantizer than without one (its *_impl
// functions, not quantize_row_*_ref), so both paths are here: null -> the reference bytes,
// non-null -> the weighted search, each as llama-quantize writes them. For the legacy types
// the weighted path also uses the whole row's variance, so a row is the unit, not a block.
#pragma once

#include <cstddef>
#include <cstdint>

namespace lumen::convert {

// quantize_legacy.cc (blocks of 32)
void quantize_q4_0(const float* x, std::byte* dst, int64_t n, const float* imatrix);
void quantize_q4_1(const float* x, std::byte* dst, int64_t n, const float* imatrix);
void quantize_q5_0(const float* x, std::byte* dst, int64_t n, const float* imatrix);
void quantize_q5_1(const float* x, std::byte* dst, int64_t n, const float* imatrix);
void quantize_q8_0(const float* x, std::byte* dst, int64_t n);  // no weighted variant

// quantize_kquants.cc (super-blocks of 256)
void quantize_q2_k(const float* x, std::byte* dst, int64_t n, const float* imatrix);
void quantize_q3_k(const float* x, std::byte* dst, int64_t n, const float* imatrix);
void quantize_q4_k(const float* x, std::byte* dst, int64_t n, const float* imatrix);
void quantize_q5_k(const float* x, std::byte* dst, int64_t n, const float* imatrix);
void quantize_q6_k(const float* x, std::byte* dst, int64_t n, const float* imatrix);

// quantize_iq4.cc (iq4_nl: blocks of 32; iq4_xs: super-blocks of 256)
void quantize_iq4_nl(const float* x, std::byte* dst, int64_t n, const float* imatrix);
void quantize_iq4_xs(const float* x, std::byte* dst, int64_t n, const float* imatrix);

// quantize_iq3.cc (super-blocks of 256)
void quantize_iq3_xxs(const float* x, std::byte* dst, int64_t n, const float* imatrix);
void quantize_iq3_s(const float* x, std::byte* dst, int64_t n, const float* imatrix);

// quantize_iq1.cc (super-blocks of 256; iq1_s requires an imatrix, iq1_m takes one or not)
void quantize_iq1_s(const float* x, std::byte* dst, int64_t n, const float* imatrix);
void quantize_iq1_m(const float* x, std::byte* dst, int64_t n, const float* imatrix);

// quantize_iq2.cc (super-blocks of 256). iq2_xxs and iq2_xs need an importance matrix (as in
// ggml; checked), iq2_s takes one or not.
void quantize_iq2_xxs(const float* x, std::byte* dst, int64_t n, const float* imatrix);
void quantize_iq2_xs(const float* x, std::byte* dst, int64_t n, const float* imatrix);
void quantize_iq2_s(const float* x, std::byte* dst, int64_t n, const float* imatrix);

}  // namespace lumen::convert
