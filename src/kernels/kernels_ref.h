// The scalar reference kernels: the numerical definition every SIMD variant is tested
// against, and the fallback that runs on any x86-64. They follow ggml-cpu's arithmetic
// where llama.cpp's results depend on it (activation quantizers bit for bit, per-block
// dot-product scaling, rms_norm's double sum); see the comments at each definition.
#pragma once

#include <cstddef>
#include <cstdint>

#include "tensor/dtype.h"

namespace lumen::kernels::ref {

// Dequantizers (DequantizeRowFn of type_table.h): n elements (a multiple of the block size)
// of a row to f32.
void dequantize_row_f32(const std::byte* src, float* dst, int64_t n);
void dequantize_row_f16(const std::byte* src, float* dst, int64_t n);
void dequantize_row_bf16(const std::byte* src, float* dst, int64_t n);
void dequantize_row_q8_0(const std::byte* src, float* dst, int64_t n);
void dequantize_row_q8_1(const std::byte* src, float* dst, int64_t n);
void dequantize_row_q4_0(const std::byte* src, float* dst, int64_t n);
void dequantize_row_q4_1(const std::byte* src, float* dst, int64_t n);
void dequantize_row_q5_0(const std::byte* src, float* dst, int64_t n);
void dequantize_row_q5_1(const std::byte* src, float* dst, int64_t n);
void dequantize_row_q2_k(const std::byte* src, float* dst, int64_t n);
void dequantize_row_q3_k(const std::byte* src, float* dst, int64_t n);
void dequantize_row_q4_k(const std::byte* src, float* dst, int64_t n);
void dequantize_row_q5_k(const std::byte* src, float* dst, int64_t n);
void dequantize_row_q6_k(const std::byte* src, float* dst, int64_t n);
void dequantize_row_q8_k(const std::byte* src, float* dst, int64_t n);
void dequantize_row_iq4_nl(const std::byte* src, float* dst, int64_t n);
void dequantize_row_iq4_xs(const std::byte* src, float* dst, int64_t n);
// The grid i-quants (kernels_iq_ref.cc).
void dequantize_row_iq3_s(const std::byte* src, float* dst, int64_t n);
void dequantize_row_iq3_xxs(const std::byte* src, float* dst, int64_t n);
void dequantize_row_iq2_s(const std::byte* src, float* dst, int64_t n);
void dequantize_row_iq2_xs(const std::byte* src, float* dst, int64_t n);
void dequantize_row_iq2_xxs(const std::byte* src, float* dst, int64_t n);
void dequantize_row_iq1_s(const std::byte* src, float* dst, int64_t n);
void dequantize_row_iq1_m(const std::byte* src, float* dst, int64_t n);

// Activation quantizers (QuantizeRowFn).
void quantize_row_q8_0(const float* x, std::byte* y, int64_t n);
void quantize_row_q8_1(const float* x, std::byte* y, int64_t n);
void quantize_row_q8_k(const float* x, std::byte* y, int64_t n);
void quantize_row_f16(const float* x, std::byte* y, int64_t n);
void quantize_row_bf16(const float* x, std::byte* y, int64_t n);

// Weight-row x activation-row dot products (VecDotFn).
float vec_dot_f32_f32(int64_t n, const std::byte* w, const std::byte* x);
float vec_dot_f16_f16(int64_t n, const std::byte* w, const std::byte* x);
float vec_dot_bf16_bf16(int64_t n, const std::byte* w, const std::byte* x);
float vec_dot_q8_0_q8_0(int64_t n, const std::byte* w, const std::byte* x);
float vec_dot_q4_0_q8_0(int64_t n, const std::byte* w, const std::byte* x);
float vec_dot_q4_1_q8_1(int64_t n, const std::byte* w, const std::byte* x);
float vec_dot_q5_0_q8_0(int64_t n, const std::byte* w, const std::byte* x);
float vec_dot_q5_1_q8_1(int64_t n, const std::byte* w, const std::byte* x);
float vec_dot_q2_k_q8_k(int64_t n, const std::byte* w, const std::byte* x);
float vec_dot_q3_k_q8_k(int64_t n, const std::byte* w, const std::byte* x);
float vec_dot_q5_k_q8_k(int64_t n, const std::byte* w, const std::byte* x);
float vec_dot_q4_k_q8_k(int64_t n, const std::byte* w, const std::byte* x);
float vec_dot_q6_k_q8_k(int64_t n, const std::byte* w, const std::byte* x);
// The i-quants (kernels_iq_ref.cc).
float vec_dot_iq4_nl_q8_0(int64_t n, const std::byte* w, const std::byte* x);
float vec_dot_iq4_xs_q8_k(int64_t n, const std::byte* w, const std::byte* x);
float vec_dot_iq3_s_q8_k(int64_t n, const std::byte* w, const std::byte* x);
float vec_dot_iq3_xxs_q8_k(int64_t n, const std::byte* w, const std::byte* x);
float vec_dot_iq2_s_q8_k(int64_t n, const std::byte* w, const std::byte* x);
float vec_dot_iq2_xs_q8_k(int64_t n, const std::byte* w, const std::byte* x);
float vec_dot_iq2_xxs_q8_k(int64_t n, const std::byte* w, const std::byte* x);
float vec_dot_iq1_s_q8_k(int64_t n, const std::byte* w, const std::byte* x);
float vec_dot_iq1_m_q8_k(int64_t n, const std::byte* w, const std::byte* x);

// Elementwise / row kernels.
void rms_norm_row(const float* x, const float* w, int64_t n, float eps, float* out);
void silu_mul(float* gate, const float* up, int64_t n);
void layer_norm_row(const float* x, const float* w, const float* b, int64_t n, float eps, float* out);
void gelu_mul(float* gate, const float* up, int64_t n);
void softcap(float* s, int64_t n, float cap);
void add(float* x, const float* y, int64_t n);
void attn_scores_f16(const uint16_t* k, int64_t n, const uint16_t* q, int32_t head_dim,
                     float scale, float* scores);
void attn_scores_f32(const float* k, int64_t n, const float* q, int32_t head_dim, float scale,
                     float* scores);
void attn_accum_f16(const float* p, const uint16_t* v, int64_t n, int32_t head_dim, float* acc);
void attn_accum_f32(const float* p, const float* v, int64_t n, int32_t head_dim, float* acc);
double exp_sum(float* s, int64_t n, float max);

// ggml-cpu's GELU table (GGML_GELU_FP16): entry h (an fp16 bit pattern) holds
// fp16(gelu_tanh(fp16 value h)) widened to f32, gelu_tanh(x) = 0.5 x (1 + tanhf(sqrt(2/pi) x
// (1 + 0.044715 x^2))) in f32. 65536 entries, built once (function-local static, immutable).
const float* gelu_f16_table();

}  // namespace lumen::kernels::ref
