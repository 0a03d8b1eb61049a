// KernelTable: one function pointer per op and per weight dtype, filled once at start-up
// from lumen::cpu_features(): the scalar reference (kernels_ref.cc) first, then each ISA
// level overrides the entries it implements (kernels_avx2.cc, kernels_avx512.cc):
//
//   scalar  ->  avx2 (AVX2 + FMA + F16C)  ->  avx512 (F/BW/VL/DQ + VNNI [+ BF16])
//
// The scalar entries are the numerical definition. SIMD entries agree with them:
//   * activation quantizers: bit-exact (same max, same division, same rounding);
//   * integer block dot products: exact per block; only the f32 summation order over
//     blocks differs (relative error ~ n_blocks * 2^-24 of sum |block terms|);
//   * f32/f16/bf16 dots, rms_norm: f32 lanes instead of a double accumulator;
//   * silu, softmax exponentials: a polynomial expf (<= 2 ulp from libm's expf);
//   * softcap: a polynomial / expf-based tanhf (a few ulp from libm's tanhf);
//   * gelu: bit-exact (the same f16 table); layer_norm: double sums in lanes, ~1 ulp;
//   * attention: f32 lanes and FMA instead of a double dot / separate multiply-add.
// The parity tests (kernels_parity_test.cc) check every entry of every table the host can
// run against the scalar table with those tolerances.
//
// Tables are immutable after construction (function-local statics); pass them by const&.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

#include "tensor/dtype.h"

namespace lumen::kernels {

// Converts an f32 row of n elements (n a multiple of the block size) to n elements of a
// dot-product activation dtype (Q8_0, Q8_1, Q8_K, F16, BF16) at y.
using QuantizeRowFn = void (*)(const float* x, std::byte* y, int64_t n);

// Dot product of one weight row w and one activation row x, both n elements long.
using VecDotFn = float (*)(int64_t n, const std::byte* w, const std::byte* x);

// A tile of a matmul: for r < n_rows, t < n_cols:
//   y[t * y_stride + r] = vec_dot(n, w + r * w_stride, x + t * x_stride)
// (must equal the vec_dot entry of the same table bit for bit, so results do not depend on
// how the work was tiled or how many threads ran it).
using GemmFn = void (*)(int64_t n, const std::byte* w, size_t w_stride, int64_t n_rows,
                        const std::byte* x, size_t x_stride, int64_t n_cols, float* y,
                        int64_t y_stride);

// Prefill path for many activation rows ("panel" GEMM). Weight rows are repacked, `rows`
// at a time, into a panel in per-thread scratch: rows interleaved so that one vector holds
// the same 4 elements of every row of the panel, quants widened to bytes, scales to f32. The
// model file keeps the standard GGUF layout and stays mmapped; packing costs a few operations
// per weight byte, once per matmul, and is amortised over every activation row of the batch.
//
//   pack(n, w, w_stride, n_rows, panel)          rows r < n_rows (<= rows) of W into panel
//   prepare_side(xq, n, side)                     per quantized activation row: what the
//                                                 gemm needs besides the blocks (side_bytes)
//   gemm(n, panel, n_rows, x, x_stride, side, side_stride, n_cols, y, y_stride)
//        y[c * y_stride + r] = vec_dot(n, w row r, x row c), bit for bit
using PackPanelFn = void (*)(int64_t n, const std::byte* w, size_t w_stride, int64_t n_rows,
                             std::byte* panel);
using PrepareSideFn = void (*)(const std::byte* xq, int64_t n, std::byte* side);
using PanelGemmFn = void (*)(int64_t n, const std::byte* panel, int64_t n_rows,
                             const std::byte* x, size_t x_stride, const std::byte* side,
                             size_t side_stride, int64_t n_cols, float* y, int64_t y_stride);
using BytesForFn = size_t (*)(int64_t n);

struct PanelKernels {
  int32_t rows = 0;                      // weight rows per panel; 0: no panel path
  int32_t min_cols = 0;                  // activation rows from which the panel path pays
  BytesForFn panel_bytes = nullptr;      // scratch of one panel for rows of n elements
  BytesForFn side_bytes = nullptr;       // side data per activation row (may be 0)
  PrepareSideFn prepare_side = nullptr;  // null when side_bytes is 0
  PackPanelFn pack = nullptr;
  PanelGemmFn gemm = nullptr;
};

// Interleaved path: the whole matrix repacked once (the model does it at load) into
// groups of `rows` rows whose blocks are interleaved the way the kernel consumes them, so
// that decode streams one contiguous run of bytes per thread instead of many rows side by
// side, and no per-call packing is needed in prefill. Quants keep their width (nibbles stay
// nibbles; the copy is the size of the original to within the unpacked K-format scales).
// `layout` names the byte layout; a matrix carries the name of the layout its copy was
// made in and is only read through kernels of the same name.
//
//   pack(n, w, w_stride, n_rows, dst)   rows r < n_rows of W into ceil(n_rows / rows)
//                                       groups of group_bytes(n) at dst (a short last
//                                       group repeats its last row)
//   gemm(n, groups, n_rows, x, x_stride, side, side_stride, n_cols, y, y_stride)
//        y[c * y_stride + r] = vec_dot(n, w row r, x row c) bit for bit, r < n_rows
struct InterleavedKernels {
  const char* layout = nullptr;          // null: no interleaved path
  int32_t rows = 0;                      // rows per group
  BytesForFn group_bytes = nullptr;
  BytesForFn side_bytes = nullptr;       // side data per activation row (may be 0)
  PrepareSideFn prepare_side = nullptr;  // null when side_bytes is 0
  PackPanelFn pack = nullptr;
  PanelGemmFn gemm = nullptr;             // the form this CPU runs: one of the two below
  // Both forms of the products: the one-column (decode) tiles leave their weights' stream
  // to the hardware prefetchers (gemm_stream) or prefetch them in software too
  // (gemm_prefetch); null where the layout has no such choice. The table builder makes
  // gemm_prefetch `gemm` on CPUs whose hardware prefetchers leave a decode stream short
  // (Intel: the L2 streamer stops at every 4 KiB boundary; see fill_matmul_kernels), and
  // the parity tests run both on every CPU.
  PanelGemmFn gemm_stream = nullptr;
  PanelGemmFn gemm_prefetch = nullptr;
};

struct MatmulKernels {
  DType act_dtype = DType::kF32;         // dtype the activations are converted to
  QuantizeRowFn quantize_act = nullptr;  // null: f32 activations are used as they are
  VecDotFn vec_dot = nullptr;
  GemmFn gemm = nullptr;
  PanelKernels panel;                    // optional (rows == 0: gemm tiles only)
  InterleavedKernels interleaved;        // optional (layout == null: none)
};

// out[i] = x[i] * (1 / sqrt(mean(x^2) + eps)) * w[i] for one row of n.
using RmsNormRowFn = void (*)(const float* x, const float* w, int64_t n, float eps, float* out);
// gate[i] = gate[i] / (1 + exp(-gate[i])) * up[i]
using SiluMulFn = void (*)(float* gate, const float* up, int64_t n);
// LayerNorm of one row as ggml_norm + ggml_mul + ggml_add compute it: mean and variance
// summed in double, v = x - mean, out = ((v * (1 / sqrt(var + eps))) * w) + b, each
// product rounded to f32; w and b may be null (no scale / no shift).
using LayerNormRowFn = void (*)(const float* x, const float* w, const float* b, int64_t n, float eps,
                                float* out);
// gate[i] = gelu(gate[i]) * up[i] (up null: gelu alone), GELU with the tanh approximation as
// ggml-cpu evaluates it: through an f16 table, i.e. fp16(gelu(fp16(x))) for |x| < 10, x
// itself from 10 up, 0 from -10 down (gelu_f16_table(), kernels_ref.h).
using GeluMulFn = void (*)(float* gate, const float* up, int64_t n);
// s[i] = tanh(s[i] * (1 / cap)) * cap: logit soft-capping (Gemma 2), as ggml's scale, tanh,
// scale ops round it. cap > 0.
using SoftcapFn = void (*)(float* s, int64_t n, float cap);
// x[i] += y[i]
using AddFn = void (*)(float* x, const float* y, int64_t n);

// Attention inner loops over n cached rows (one kv head, one block: rows contiguous,
// head_dim elements each).
//   scores[s] = (sum_i k[s * head_dim + i] * q[i]) * scale
using AttnScoresF16Fn = void (*)(const uint16_t* k, int64_t n, const uint16_t* q,
                                 int32_t head_dim, float scale, float* scores);
using AttnScoresF32Fn = void (*)(const float* k, int64_t n, const float* q, int32_t head_dim,
                                 float scale, float* scores);
//   acc[i] += sum_s p[s] * v[s * head_dim + i], s in increasing order
using AttnAccumF16Fn = void (*)(const float* p, const uint16_t* v, int64_t n, int32_t head_dim,
                                float* acc);
using AttnAccumF32Fn = void (*)(const float* p, const float* v, int64_t n, int32_t head_dim,
                                float* acc);
// s[j] = expf(s[j] - max) for j < n; returns the sum of the new s[j], accumulated in double
// (ggml_vec_soft_max_f32).
using ExpSumFn = double (*)(float* s, int64_t n, float max);
// n elements (a multiple of the block size) of a row to f32.
using DequantizeRowFn = void (*)(const std::byte* src, float* dst, int64_t n);
// y[i] = x[i] widened from fp16 (exact).
using F16ToF32Fn = void (*)(const uint16_t* x, float* y, int64_t n);
// y[i] = x[i] rounded to fp16 as f32_to_fp16 (base/fp16.h) does it: nearest even,
// subnormals, overflow to inf, NaN to the quiet NaN 0x7e00 with x's sign.
using F32ToF16Fn = void (*)(const float* x, uint16_t* y, int64_t n);
// max_j s[j] (-inf for n == 0; rows hold no NaN).
using RowMaxFn = float (*)(const float* s, int64_t n);
// s[j] = s[j] * scale, then, if round_f16, rounded to the nearest fp16 value (ties to even):
// the softmax's normalised probabilities as ggml's F16 P.V product sees them.
using ScaleRoundFn = void (*)(float* s, int64_t n, float scale, bool round_f16);
// The same two attention steps for the n_heads query heads of a GQA group at once (each K/V
// row is read once for all of them), bit for bit the single-head f32 entries per head.
// Precondition: head_dim % 32 == 0 (attention() uses the single-head entries otherwise).
//   scores[h * s_stride + s] = attn_scores_f32(k, n, q + h * head_dim, ...)[s]
//   acc[h * a_stride + i]   += sum_s p[h * p_stride + s] * v[s * head_dim + i]
using AttnScoresGroupFn = void (*)(const float* k, int64_t n, const float* q, int32_t n_heads,
                                   int32_t head_dim, float scale, float* scores, size_t s_stride);
using AttnAccumGroupFn = void (*)(const float* p, size_t p_stride, const float* v, int64_t n,
                                  int32_t n_heads, int32_t head_dim, float* acc, size_t a_stride);
// The group entries over f16 rows as the cache stores them: bit for bit the f32 entries over
// the rows widened (f16_to_f32). Optional: null where a table has none (the caller widens).
using AttnScoresGroupF16Fn = void (*)(const uint16_t* k, int64_t n, const float* q, int32_t n_heads,
                                      int32_t head_dim, float scale, float* scores, size_t s_stride);
using AttnAccumGroupF16Fn = void (*)(const float* p, size_t p_stride, const uint16_t* v, int64_t n,
                                     int32_t n_heads, int32_t head_dim, float* acc, size_t a_stride);

// Flash attention's P.V of a GQA group straight from q8_0 / q4_0 / f16 V rows as the cache
// stores them (n rows, v_stride bytes apart, head_dim / 32 blocks each, an f16 row's block
// being 32 values): bit for bit the same table's dequantize_q8_0 / _q4_0 (f16_to_f32) of the
// rows followed by attn_accum_group_f32, i.e.
//   acc[h * a_stride + i] += sum_s p[h * p_stride + s] * v[s][i], s in increasing order
// with each value the dequantizer's one f32 product d * q (an f16 widened exactly). Optional:
// null where a table has none (flash attention then widens into a buffer). Precondition:
// head_dim % 32 == 0.
using AttnAccumGroupQFn = void (*)(const float* p, size_t p_stride, const std::byte* v, size_t v_stride,
                                   int64_t n, int32_t n_heads, int32_t head_dim, float* acc, size_t a_stride);
// Forming the values in registers repeats the work for every tile of heads the kernel needs,
// where the dequantize pass forms them once for all: so each entry says up to how many heads
// (rows) it beats dequantize + attn_accum_group_f32 (measured), and flash attention
// dequantizes beyond that (e.g. prefill tiles of many rows).
struct AttnValuesKernels {
  AttnAccumGroupQFn accum_group = nullptr;  // optional (null: dequantize + attn_accum_group_f32)
  int32_t max_heads = 0;                    // use accum_group for n_heads <= max_heads
};

// Flash attention's K scores (flash_attention.cc) for an f16 / q8_0 / q4_0 cache: a GemmFn
// with the keys of a cache block as rows (w) and a GQA group's queries, in the K type's
// activation type, as columns (x), shaped for many rows against a few columns: each key is
// loaded and unpacked once for all the columns. Bit for bit the same table's vec_dot of the
// K type, like every GemmFn. Preconditions: head_dim % 32 == 0, head_dim <=
// kAttnKeyScoresMaxDim.
constexpr int64_t kAttnKeyScoresMaxDim = 512;

struct KernelTable {
  const char* name = "scalar";  // "scalar", "avx2", "avx512"
  // Matmul kernels per weight dtype, indexed by dtype_index(); an entry whose vec_dot is
  // null is not a matmul weight type. Filled from the type table's rows (type_table.h).
  std::array<MatmulKernels, kDTypeIdLimit> mm{};
  RmsNormRowFn rms_norm_row = nullptr;
  SiluMulFn silu_mul = nullptr;
  LayerNormRowFn layer_norm_row = nullptr;
  GeluMulFn gelu_mul = nullptr;
  SoftcapFn softcap = nullptr;
  AddFn add = nullptr;
  AttnScoresF16Fn attn_scores_f16 = nullptr;
  AttnScoresF32Fn attn_scores_f32 = nullptr;
  AttnAccumF16Fn attn_accum_f16 = nullptr;
  AttnAccumF32Fn attn_accum_f32 = nullptr;
  ExpSumFn exp_sum = nullptr;
  F16ToF32Fn f16_to_f32 = nullptr;
  F32ToF16Fn f32_to_f16 = nullptr;
  // V rows of a q8_0 / q4_0 KV cache widened for flash attention's f32 accumulate, bit for
  // bit the type table's scalar dequantizers (each value is one f32 product d * q).
  DequantizeRowFn dequantize_q8_0 = nullptr;
  DequantizeRowFn dequantize_q4_0 = nullptr;
  RowMaxFn row_max = nullptr;
  ScaleRoundFn scale_round = nullptr;
  AttnScoresGroupFn attn_scores_group_f32 = nullptr;
  AttnAccumGroupFn attn_accum_group_f32 = nullptr;
  AttnScoresGroupF16Fn attn_scores_group_f16 = nullptr;  // optional
  AttnAccumGroupF16Fn attn_accum_group_f16 = nullptr;    // optional
  GemmFn attn_key_scores_f16 = nullptr;                  // optional (null: the type's gemm)
  GemmFn attn_key_scores_q8_0 = nullptr;                 // optional
  GemmFn attn_key_scores_q4_0 = nullptr;                 // optional
  AttnValuesKernels attn_values_q8_0;                    // optional (see AttnValuesKernels)
  AttnValuesKernels attn_values_q4_0;                    // optional
  AttnValuesKernels attn_values_f16;                     // optional
};

// The matmul kernels for weights of dtype w_dtype, or null if W can't be a matmul weight.
const MatmulKernels* find_matmul_kernels(const KernelTable& table, DType w_dtype);

// Every table this CPU can run, scalar reference first, best last (for parity tests and
// benchmarks).
std::span<const KernelTable* const> available_kernel_tables();

// ISA levels of the tables, each building on the one below. kAvx512Vbmi is the AVX-512
// table on a CPU that also has AVX512_VBMI (Ice Lake, Zen 4 and later; not Skylake-SP /
// Cascade Lake): the same table with the few kernels that use vpermb.
enum class IsaLevel : uint8_t { kScalar, kAvx2, kAvx512, kAvx512Vbmi };

// The matmul entries (mm) of a table at `level`, from the type table's rows
// (kernel_table.cc). decode_prefetch: the interleaved layouts' one-column tiles prefetch
// their weights in software (InterleavedKernels::gemm_prefetch becomes gemm).
void fill_matmul_kernels(KernelTable& table, IsaLevel level, bool decode_prefetch = false);
// The AVX-512 table filled at IsaLevel::kAvx512 even where the CPU has VBMI (null where the
// CPU has no AVX-512 table or no VBMI): what a CPU without VBMI runs, for the parity tests.
const KernelTable* avx512_table_without_vbmi();
// The scalar reference row ops (kernels_ref.cc).
KernelTable make_reference_kernel_table();
// Per-ISA overrides of the row ops, each defined in its own translation unit. Call only when
// cpu_features() reports the ISA (has_avx2_fma() / has_avx512_vnni()).
void override_kernels_avx2(KernelTable& table);
void override_activations_avx2(KernelTable& table);  // activations_avx2.cc
void override_attention_avx2(KernelTable& table);    // attention_avx2.cc
void override_kernels_avx512(KernelTable& table, bool has_bf16);
void override_attention_avx512(KernelTable& table);  // attention_avx512.cc
void override_attention_values_avx512(KernelTable& table);  // attention_values_avx512.cc
void override_attention_keys_avx512(KernelTable& table);    // attention_keys_avx512.cc
void override_softmax_avx512(KernelTable& table);           // softmax_avx512.cc

}  // namespace lumen::kernels
