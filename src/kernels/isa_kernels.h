// The per-ISA entries of the type table's rows (type_table.cc): MatmulFillFn and
// QuantizeRowFn functions, each defined in its ISA's translation unit and compiled with that
// ISA's flags. The type table calls them only when cpu_features() reports the ISA.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/kernel_table.h"

namespace lumen::kernels {

// kernels_avx2.cc (AVX2 + FMA + F16C)
void mm_f32_avx2(MatmulKernels& mk);
void mm_f16_avx2(MatmulKernels& mk);
void mm_bf16_avx2(MatmulKernels& mk);
void mm_q4_1_avx2(MatmulKernels& mk);
void mm_q5_1_avx2(MatmulKernels& mk);
void mm_q2_k_avx2(MatmulKernels& mk);
void mm_q3_k_avx2(MatmulKernels& mk);
void mm_q5_k_avx2(MatmulKernels& mk);
void mm_iq4_nl_avx2(MatmulKernels& mk);
// kernels_iq_avx2.cc (AVX2 + FMA + F16C): the 256-element i-quants
void mm_iq4_xs_avx2(MatmulKernels& mk);
void mm_iq3_s_avx2(MatmulKernels& mk);
void mm_iq3_xxs_avx2(MatmulKernels& mk);
void mm_iq2_s_avx2(MatmulKernels& mk);
void mm_iq2_xs_avx2(MatmulKernels& mk);
void mm_iq2_xxs_avx2(MatmulKernels& mk);
void mm_iq1_s_avx2(MatmulKernels& mk);
void mm_iq1_m_avx2(MatmulKernels& mk);
void quantize_row_q8_0_avx2(const float* x, std::byte* y, int64_t n);
void quantize_row_q8_1_avx2(const float* x, std::byte* y, int64_t n);
void quantize_row_f16_avx2(const float* x, std::byte* y, int64_t n);
// matmul_avx2.cc (AVX2 + FMA + F16C): q8_0 / q4_0 / q5_0 / q4_K / q6_K, plain and 8-row interleaved
// layouts, and the q8_K activation quantizer
void mm_q8_0_avx2(MatmulKernels& mk);
void mm_q4_0_avx2(MatmulKernels& mk);
void mm_q5_0_avx2(MatmulKernels& mk);
void mm_q4_k_avx2(MatmulKernels& mk);
void mm_q6_k_avx2(MatmulKernels& mk);
void quantize_row_q8_k_avx2(const float* x, std::byte* y, int64_t n);

// matmul_avx512.cc (AVX-512 VNNI): decode groups over the GGUF layout, prefill panels
void mm_q8_0_avx512(MatmulKernels& mk);
void mm_q4_0_avx512(MatmulKernels& mk);
void mm_q5_0_avx512(MatmulKernels& mk);
void mm_q4_1_avx512(MatmulKernels& mk);
void mm_q5_1_avx512(MatmulKernels& mk);
void mm_iq4_nl_avx512(MatmulKernels& mk);
void mm_q4_k_avx512(MatmulKernels& mk);
void mm_q5_k_avx512(MatmulKernels& mk);
void mm_q6_k_avx512(MatmulKernels& mk);

// matmul_interleaved_avx512.cc (AVX-512 VNNI): the interleaved decode layouts
void mm_q8_0_avx512_interleaved(MatmulKernels& mk);
void mm_q4_0_avx512_interleaved(MatmulKernels& mk);
void mm_q5_0_avx512_interleaved(MatmulKernels& mk);
void mm_q4_1_avx512_interleaved(MatmulKernels& mk);
void mm_q5_1_avx512_interleaved(MatmulKernels& mk);
void mm_q4_k_avx512_interleaved(MatmulKernels& mk);
void mm_q5_k_avx512_interleaved(MatmulKernels& mk);
void mm_q6_k_avx512_interleaved(MatmulKernels& mk);
void mm_iq4_xs_avx512_interleaved(MatmulKernels& mk);
void mm_iq4_xs_avx512vbmi_interleaved(MatmulKernels& mk);  // call only where the CPU has AVX512_VBMI

// kernels_iq_avx512.cc (AVX-512 VNNI): the 256-element i-quants' prefill panels
void mm_iq4_xs_avx512(MatmulKernels& mk);
void mm_iq3_s_avx512(MatmulKernels& mk);
void mm_iq3_xxs_avx512(MatmulKernels& mk);
void mm_iq2_s_avx512(MatmulKernels& mk);
void mm_iq2_xs_avx512(MatmulKernels& mk);
void mm_iq2_xxs_avx512(MatmulKernels& mk);
void mm_iq1_s_avx512(MatmulKernels& mk);
void mm_iq1_m_avx512(MatmulKernels& mk);

}  // namespace lumen::kernels
