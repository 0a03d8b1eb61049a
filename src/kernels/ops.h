// The operations the model forward pass is made of. Each op dispatches through a
// KernelTable (scalar reference -> AVX2 -> AVX-512 VNNI, chosen once at start-up) and,
// where it is worth it, splits its work over the ThreadPool.
//
// Layout conventions: activations are row-major f32, one row per token:
//   x [n_tokens][n]  (row t starts at x + t * n)
// Weight matrices are GGUF/GGML tensors W with ne[0] = n_in, ne[1] = n_out:
//   y[t][o] = sum_i W[o][i] * x[t][i]
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/thread_pool.h"
#include "tensor/paged_kv_view.h"
#include "tensor/tensor_view.h"

namespace lumen::kernels {

struct KernelTable;  // kernel_table.h

// The best table this CPU supports (logged once by the caller), and the scalar reference.
const KernelTable& best_kernel_table();
const KernelTable& reference_kernel_table();
std::string_view kernel_table_name(const KernelTable& table);  // "scalar", "avx2", "avx512"

// True if W's dtype can be used as a matmul weight (its row in type_table.h has kernels).
bool matmul_supports(DType w_dtype);
// The types matmul_supports(), for error messages: "f32, f16, q4_0, ...".
std::string matmul_type_names();

// Scratch bytes matmul() / matmul_fused() need for up to n_tokens rows of n_in activations
// against weights of this dtype, on a pool of n_threads: the activations quantized to the
// weight's dot-product type (its row's act_dtype; none for F32), and for prefill the
// per-thread weight panels (kernel_table.h).
size_t matmul_scratch_bytes(DType w_dtype, int64_t n_in, int64_t n_tokens, int n_threads);

// How matmul() and matmul_jobs() share a decode step's weights out over the threads
// (ThreadPool::for_ranges): claims of kDecodeGrainBytes of weights at the end of a range
// and for steals, up to kDecodeMaxClaimGrains of them from the front of a thread's own.
// Measured (llama-3.2-1b Q4_K_M tg, 2 threads, the two ways alternating token by token in
// one process): claims of up to 4 grains took 2.4-2.7% less time a token when the two
// threads sit on two CCDs (61-67 GB/s read), where each atomic claim stalls the thread's
// stream the longest, and the same (-0.5..+0.3%) on one CCD (31-37 GB/s).
inline constexpr size_t kDecodeGrainBytes = 128 * 1024;
inline constexpr int64_t kDecodeMaxClaimGrains = 4;

// y [n_tokens][n_out] = x [n_tokens][n_in] * W^T. Reads each weight row once for all
// n_tokens rows (layer-major prefill). `scratch` holds matmul_scratch_bytes(...) bytes.
// Activation quantization follows ggml-cpu exactly, so results track llama.cpp. A row's
// result does not depend on n_tokens, on the thread count, or on the path taken.
void matmul(const KernelTable& k, ThreadPool& pool, const TensorView& w, const float* x,
            int64_t n_tokens, float* y, std::byte* scratch);

// Several weights of one dtype and input width against the same x, in one pass: x is
// quantized once and all output rows are split over the threads in one dispatch (q, k, v;
// gate, up). y of each target is [n_tokens][its n_out].
struct MatmulTarget {
  const TensorView* w;
  float* y;
};
inline constexpr size_t kMaxFusedTargets = 4;
void matmul_fused(const KernelTable& k, ThreadPool& pool, std::span<const MatmulTarget> targets,
                  const float* x, int64_t n_tokens, std::byte* scratch);

// Starts the pool's workers reading the weights that they will stream first in the next
// matmul_fused() of these targets with n_tokens rows: each worker the first
// kMatmulWarmBytes of its own range, into its cache. Returns at once, so that the reads
// overlap what the caller does before that matmul (attention, the MLP's activation), when
// the memory would otherwise sit idle; the next dispatch on the pool ends them. Does
// nothing where that matmul would run on one thread or in chunks (prefill). y is not used.
void matmul_warm(const KernelTable& k, ThreadPool& pool, std::span<const MatmulTarget> targets, int64_t n_tokens);
void matmul_warm(const KernelTable& k, ThreadPool& pool, const TensorView& w, int64_t n_tokens);
// A quarter of a 1 MiB L2 (Zen 4, Cascade Lake): the lines stay there until the matmul
// reaches them. A worker fills ~20 us gaps at ~11 GB/s, so it rarely gets that far.
inline constexpr size_t kMatmulWarmBytes = 256 * 1024;
// What matmul_warm has worker thread_idx read (for tests): runs of bytes of the targets'
// interleaved copies (or of their data, without copies), in order.
struct MatmulWarmRun {
  size_t target;  // index into targets
  size_t offset;  // bytes from the start of its (interleaved) data
  size_t n_bytes;
};
std::vector<MatmulWarmRun> matmul_warm_runs(const KernelTable& k, const ThreadPool& pool,
                                            std::span<const MatmulTarget> targets, int64_t n_tokens, int thread_idx);

// out [n_ids][ne0] = dequantized rows ids[i] of W (embedding lookup).
void get_rows(const TensorView& w, const int32_t* ids, int64_t n_ids, float* out);

// Dequantizes one row of n elements (n a multiple of the block size) to f32.
// Precondition: can_dequantize(dtype) (type_table.h).
void dequantize_row(DType dtype, const std::byte* src, float* dst, int64_t n);

// out[t] = x[t] / sqrt(mean(x[t]^2) + eps) * weight, for n_rows rows of n.
void rms_norm(const KernelTable& k, const float* x, const float* weight, int64_t n_rows,
              int64_t n, float eps, float* out);

enum class RopeLayout : uint8_t {
  kInterleaved,  // pairs (x[2i], x[2i+1]) — GGUF llama ("normal" rope)
  kNeox,         // pairs (x[i], x[i + d/2]) — GGUF qwen2, HF-layout llama
};

struct RopeParams {
  int32_t head_dim = 0;       // elements per head (the stride between heads)
  int32_t n_rot = 0;          // rotated dims, even, <= head_dim (0: all of them). Partial
                              // rotary (StableLM, Phi-2): dims [n_rot, head_dim) pass through
  float theta = 10000.0f;     // rope_theta (freq_base)
  float freq_scale = 1.0f;    // linear scaling: position * freq_scale
  const float* freq_factors = nullptr;  // [n_rot/2] or null: theta_i /= factor[i] (llama3, longrope)
  float attn_factor = 1.0f;   // cos and sin are multiplied by it (ggml's mscale; Phi-3 longrope)
  RopeLayout layout = RopeLayout::kInterleaved;
  // YaRN (ggml's rope_yarn): with ext_factor != 0, pair i's angle mixes the scaled and the
  // unscaled angle by ramp(i) * ext_factor (ramp 1 below corr_low, 0 above corr_high), and
  // cos / sin are multiplied by 1 + 0.1 ln(1 / freq_scale) as well.
  float ext_factor = 0.0f;
  float corr_low = 0.0f, corr_high = 0.0f;  // ggml_rope_yarn_corr_dims

  int32_t rotated_dims() const { return n_rot > 0 ? n_rot : head_dim; }
};

// Rotates x [n_tokens][n_heads][head_dim] in place; token t is at position pos[t].
void rope(const KernelTable& k, const RopeParams& p, float* x, int64_t n_tokens,
          int32_t n_heads, const int32_t* pos);
// rope() in two steps, for a forward pass that rotates q and k of every layer at the same
// positions: the angles once (cos and sin, [n_tokens][head_dim / 2] each), then the
// rotations. rope() is exactly rope_angles() followed by rope_rotate().
void rope_angles(const RopeParams& p, const int32_t* pos, int64_t n_tokens, float* cos_out, float* sin_out);
void rope_rotate(const RopeParams& p, const float* cos_t, const float* sin_t, float* x, int64_t n_tokens,
                 int32_t n_heads);

// gate[i] = silu(gate[i]) * up[i]
void silu_mul(const KernelTable& k, float* gate, const float* up, int64_t n);
// gate[i] = gelu(gate[i]) * up[i], or gelu alone when up is null (tanh approximation, as
// ggml-cpu computes it; kernel_table.h).
void gelu_mul(const KernelTable& k, float* gate, const float* up, int64_t n);
// out[t] = LayerNorm(x[t]) * weight + bias for n_rows rows of n (weight, bias may be null).
void layer_norm(const KernelTable& k, const float* x, const float* weight, const float* bias, int64_t n_rows,
                int64_t n, float eps, float* out);
// s[i] = cap * tanh(s[i] / cap) (logit soft-capping); nothing when cap == 0.
void softcap(const KernelTable& k, float* s, int64_t n, float cap);
// x[i] *= scale
void scale_in_place(float* x, int64_t n, float scale);

// A randomized Hadamard rotation of rows of head_dim values (the heads of q and k): each
// run of B dims (B = the largest power of two dividing head_dim) becomes H_B D x / sqrt(B),
// D = diag(signs[0 .. head_dim)) of +-1. The map is orthogonal, so the dot product of two
// rows rotated alike is unchanged (q k^T, up to rounding), while an outlier dim of k is
// spread over B dims: a q8_0 / q4_0 K cache then quantizes it with less error.
// hadamard_signs() gives the fixed signs (the same in every process and on every host).
std::vector<float> hadamard_signs(int64_t head_dim);
void hadamard_rotate(float* x, int64_t n_rows, int64_t head_dim, const float* signs);
// x[i] += y[i]
void add_in_place(const KernelTable& k, float* x, const float* y, int64_t n);
// x [n_rows][n] += bias[n]
void add_bias(float* x, const float* bias, int64_t n_rows, int64_t n);

// The KV cache types attention reads (K and V independently): f32, f16, bf16, q8_0, q4_0
// (llama.cpp's block layouts). Types other than f16 / f32 are read by flash attention only
// (kv_type_needs_flash), as llama.cpp needs -fa for a quantized V (lumen also for K).
bool kv_cache_supports(DType dtype);
std::string kv_cache_type_names();  // "f32, f16, bf16, q8_0, q4_0", for error messages
bool kv_type_needs_flash(DType dtype);

// Writes K and V rows of n_tokens tokens at positions pos0.. into the cache, converted to
// its K and V types as ggml-cpu converts them (F16 / BF16 round to nearest even, q8_0 as
// the activation quantizer, q4_0 as ggml's reference quantizer).
// k, v: [n_tokens][n_kv_head][head_dim]; v null: K rows only (a K-only cache, whose V
// aliases K: multi-head latent attention). Precondition: kv_cache_supports() both types.
void kv_store(const KernelTable& kt, const PagedKvView& kv, int64_t pos0, int64_t n_tokens, const float* k,
              const float* v);
// One row of n values (a multiple of 32) as q4_0 blocks, as ggml's quantize_row_q4_0_ref.
void quantize_row_q4_0_kv(const float* x, std::byte* y, int64_t n);

// Context shift by re-RoPE (engine/context_shift.h): copies the K and V rows of n_tokens
// positions src_pos0.. of `src` to dst_pos0.. of `dst` (one layer through two block
// tables), rotating each K row by `delta` positions with `rope`'s frequencies (null: a NoPE
// layer, K copied as is). K is stored after RoPE and rotations compose, R(delta) R(pos) =
// R(pos + delta), so the rows read as if computed at pos + delta; the magnitude factor
// (attn_factor) was applied once at store time and is not applied again. F16 rows are
// rounded once more (<= 1 ulp). Precondition: F16 or F32 rows, head_dim <= 1024.
void kv_move(const KernelTable& kt, const PagedKvView& src, const PagedKvView& dst, int64_t src_pos0,
             int64_t dst_pos0, int64_t n_tokens, const RopeParams* rope, int32_t delta);

struct AttentionParams {
  int32_t n_head = 0;         // query heads
  int32_t n_kv_head = 0;      // n_head % n_kv_head == 0 (GQA / MQA: head h reads kv head h / (n_head / n_kv_head))
  int32_t head_dim = 0;
  float scale = 1.0f;         // usually 1/sqrt(head_dim)
  int32_t window = 0;         // 0: full causal attention. > 0: sliding window, the query at
                              // position q sees the keys k with q - window < k <= q
  float softcap = 0.0f;       // > 0: s = softcap * tanh(s / softcap) on the scaled scores,
                              // before the softmax (Gemma 2)
  bool flash = false;         // flash attention (flash_attention() below), else ggml's
                              // non-flash numerics
};

// Causal attention of one sequence. q [n_tokens][n_head][head_dim] holds queries at
// positions pos0 .. pos0+n_tokens-1; the cache already holds K/V for positions
// 0 .. pos0+n_tokens-1 (with a window: for the positions some query can see; blocks
// wholly before pos0 - window + 1 are never read and may be absent, -1 in the table).
// out [n_tokens][n_head * head_dim].
// With an F16 cache, Q and the softmax probabilities are rounded to F16 before the two
// dot products (F32 accumulation), which is what ggml-cpu does, so logits track llama.cpp.
// No S x S matrix is materialised (online softmax).
void attention(const KernelTable& k, ThreadPool& pool, const AttentionParams& p,
               const PagedKvView& kv, const float* q, int64_t pos0, int64_t n_tokens,
               float* out, std::byte* scratch);
// (Enough for either path, whatever p.flash says.)
size_t attention_scratch_bytes(const AttentionParams& p, int64_t n_tokens, int64_t n_ctx,
                               int n_threads);

// attention() with p.flash: an online softmax over the cache with f32 accumulation, the
// numerics of llama.cpp's -fa (flash_attention.cc): Q converted to the K type's dot type,
// scores by that type's dot product, V accumulated in f32. Reads every cache type of
// kv_cache_supports(), K and V independently. Same preconditions as attention().
void flash_attention(const KernelTable& k, ThreadPool& pool, const AttentionParams& p,
                     const PagedKvView& kv, const float* q, int64_t pos0, int64_t n_tokens,
                     float* out, std::byte* scratch);
size_t flash_attention_scratch_bytes(const AttentionParams& p, int64_t n_ctx, int n_threads);

}  // namespace lumen::kernels
