// The building blocks every forward file (model/arch/*.cc) is made of: embedding, norms,
// the attention block, the MLP block and the output head. They read the layer's LayerSpec
// and weights, so an architecture file is only the order in which its paper composes them.
//
// Internal to the model layer (not included outside src/model/). Single-threaded by
// contract like Model::forward; compute parallelism goes through Pass::pool.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "kernels/kernel_table.h"
#include "kernels/matmul_jobs.h"
#include "kernels/ops.h"
#include "model/hparams.h"
#include "model/layer_spec.h"
#include "model/model.h"
#include "model/weights.h"

namespace lumen::model {

// Work buffers and per-model constants of the forward pass, sized at load for
// limits.max_batch_tokens tokens (T) and max_logit_rows rows (R): nothing allocates per token.
struct Workspace {
  std::vector<float> x;        // [T][n_embd] residual stream
  std::vector<float> xn;       // [T][n_embd] normed input of a block
  std::vector<float> y;        // [T][n_embd] a block's output (before the residual add)
  std::vector<float> y2;       // [T][n_embd] the MLP's output beside y (parallel MLP)
  std::vector<float> q;        // [T][n_head * head_dim]
  std::vector<float> k;        // [T][n_kv_head * head_dim]
  std::vector<float> v;        // [T][n_kv_head * head_dim]
  std::vector<float> attn;     // [T][n_head * head_dim]
  std::vector<float> gate;     // [T][n_ff]
  std::vector<float> up;       // [T][n_ff]
  std::vector<float> sel;      // [R][n_embd] rows selected for logits
  std::vector<float> logits;   // [R][n_vocab]
  std::vector<float> embd;     // [max_embd_rows][n_embd] output-normed rows (embeddings)
  int64_t n_embd_rows = 0;     // rows of embd the last pass wrote
  std::vector<std::byte> scratch;  // max(matmul scratch, attention scratch)
  // Mixture of experts (empty for a dense model); gate / up are then [T][max(n_ff_exp,
  // n_ff_shexp)]. K = n_expert_used.
  std::vector<float> router;         // [T][n_expert] router logits, then probabilities
  std::vector<int32_t> expert_ids;   // [T][K] the experts each token is routed to
  std::vector<float> expert_w;       // [T][K] their weights
  std::vector<int32_t> expert_begin; // [n_expert + 1] expert e's entries in expert_rows
  std::vector<int32_t> expert_rows;  // [T * K] token * K + slot, grouped by expert
  std::vector<float> xe;             // [T][n_embd] the rows routed to one expert, gathered
  std::vector<float> ye;             // [T][n_embd] that expert's outputs
  // The batched path of a step with at most kMoeBatchedPairs (token, slot) pairs
  // (moe_block.cc), P = min(T * K, kMoeBatchedPairs) rows in expert_rows order:
  std::vector<float> moe_x;          // [P][n_embd] each pair's input row, gathered
  std::vector<float> moe_gate;       // [P][n_ff_exp]
  std::vector<float> moe_up;         // [P][n_ff_exp]
  std::vector<float> moe_y;          // [P][n_embd] each pair's expert output (unweighted)
  std::vector<kernels::MatmulJob> moe_jobs;  // [2 (n_expert + 1)] one step's gate and up (or down) matmuls
  std::vector<int32_t> pos;        // [T] position of each token
  bool flash_attn = false;         // attention by kernels::flash_attention (ModelLimits)
  // Multi-head latent attention (empty otherwise): H heads, latent L, rope dims R.
  std::vector<float> mla_ql;       // [T][n_lora_q] the query bottleneck
  std::vector<float> mla_kv;       // [T][L + R] normed latent | roped key: the cache rows
  std::vector<float> mla_q;        // [T][H][L + R] absorbed queries: q_nope W_uk | roped q_pe
  std::vector<float> mla_o;        // [T][H][L + R] attention over the latent rows
  std::vector<float> mla_in;       // [max(T, n_threads * min(T, kMlaHeadJobTokens))][max(nope, L)]
                                   // one head's rows, gathered (one head per thread)
  std::vector<float> mla_out;      // [the same][max(L, v)] one head's projection
  // The expanded form (mla_expanded.cc), for a sequence's step of at least mla_expand_tokens
  // tokens; its buffers are empty when max_batch_tokens is below that. Keys are expanded
  // Nc = kMlaExpandKeys at a time; v = head_dim_v, qk = nope + R = head_dim.
  int32_t mla_expand_tokens = 0;   // ModelLimits::mla_expand_tokens, 0 resolved to kMlaExpandTokens
                                   // (< 0: never; the buffers below are then empty)
  std::vector<float> mlx_lat;      // [Nc][L] the chunk's latents, read back from the cache
  std::vector<float> mlx_kr;       // [Nc][R] their roped keys
  std::vector<float> mlx_kv;       // [Nc][H][nope + v] latents times wkv_b: k_nope and v per head
  std::vector<float> mlx_k;        // [H][Nc][qk] each head's keys: k_nope | the shared rope key
  std::vector<float> mlx_v;        // [H][Nc][v] each head's values
  std::vector<float> mlx_max;      // [T][H] online softmax of each (token, head): running max
  std::vector<float> mlx_sum;      // [T][H] and sum of exp(score - max); the sums of exp(.) v are ws.attn
  std::vector<float> mlx_tile;     // [n_threads][kMlaExpandTileTokens][qk + Nc] a task's queries, scores
  std::vector<float> qk_rotation_signs;  // [head_dim] when ModelLimits::rotate_qk, else empty
  // MLA heads of a small step in one parallel job: each head's projection runs whole on one
  // thread of Pass::pool, through this one-thread pool (which runs it inline) and that
  // thread's scratch (mla_block.cc).
  std::unique_ptr<ThreadPool> serial;     // ThreadPool(1)
  std::vector<std::byte> thread_scratch;  // [n_threads][thread_scratch_bytes]
  size_t thread_scratch_bytes = 0;        // a multiple of 64
  std::byte* scratch_of_thread(int thread_idx) { return thread_scratch.data() + thread_idx * thread_scratch_bytes; }

  // RoPE: the distinct RopeSpecs of the layers ("sets"), the set of each layer (-1: NoPE),
  // and each set's angles for this pass ([T][n_rot / 2] cos and sin), computed once per
  // pass for all layers' q and k.
  std::vector<kernels::RopeParams> rope_sets;
  std::vector<int32_t> rope_set_of_layer;   // [n_layer]
  std::vector<std::vector<float>> rope_cos;  // [n_sets][T * n_rot / 2]
  std::vector<std::vector<float>> rope_sin;
};

// A MoE step with at most this many (token, slot) pairs runs all its experts' matrices as
// two parallel jobs (kernels::matmul_jobs); a larger one runs the experts one by one, each
// split over the threads (moe_block.cc).
inline constexpr int64_t kMoeBatchedPairs = 128;
// A step of at most this many tokens runs its MLA heads' projections as one parallel job,
// each head whole on one thread; a larger one runs them one by one, each split over the
// threads (mla_block.cc).
inline constexpr int64_t kMlaHeadJobTokens = 32;
// MLA's expanded form (mla_expanded.cc): a sequence's step of at least kMlaExpandTokens
// tokens (ModelLimits::mla_expand_tokens overrides it) expands the cached latents into
// per-head keys and values, kMlaExpandKeys keys at a time, and runs its attention as
// tasks of (head, kMlaExpandTileTokens tokens). The threshold is measured (mla_block.cc's
// header, docs/perf.md): DeepSeek-V2-Lite shapes, q4_0, 2 threads, pp2048 prefilled in
// chunks of T tokens (depths 0-2048), absorbed -> expanded tok/s, one alternating pair per
// T (two at 64) at load 7-10: T = 32 16.5 -> 13.8, 48 19.8 -> 21.3, 64 20.4 -> 21.8 and
// 22.1 -> 29.5, 128 21.8 -> 24.2, 256 19.9 -> 27.0; fresh prompts of 32-256 tokens in one
// step: the expanded form ahead at every size. Break-even between 32 and 48: 64 leaves margin.
inline constexpr int32_t kMlaExpandTokens = 64;
inline constexpr int64_t kMlaExpandKeys = 256;
inline constexpr int64_t kMlaExpandTileTokens = 32;

// Builds the workspace of a model (every buffer at its largest size).
Workspace make_workspace(const HParams& hp, const std::vector<LayerSpec>& specs, const ModelWeights& w,
                         const ModelLimits& limits);

// One forward() call: everything the blocks read, by reference.
struct Pass {
  const kernels::KernelTable& k;
  ThreadPool& pool;
  const HParams& hp;
  const std::vector<LayerSpec>& specs;
  const ModelWeights& w;
  const KvLayout& kv_layout;
  Workspace& ws;
  const ForwardBatch& batch;
  std::span<const KvStorageView> kv_groups;  // [kv_layout.n_groups()]
  const TapFn& tap_fn;
  int64_t n_tokens;  // T of this pass

  // Named debug tap (STYLE 16): n floats at p, when a tap is set.
  void tap(std::string_view name, int32_t layer_idx, const float* p, int64_t n) const {
    if (tap_fn) tap_fn(name, layer_idx, -1, std::span<const float>(p, n));
  }
  // The same for the rows one expert of a mixture-of-experts layer ran on (model.h).
  void tap_expert(std::string_view name, int32_t layer_idx, int32_t expert_idx, const float* p, int64_t n) const {
    if (tap_fn) tap_fn(name, layer_idx, expert_idx, std::span<const float>(p, n));
  }
};

// Positions of the batch's tokens, every RoPE set's angles for them, and
// x = token_embd[ids] * embd_scale.
void embed_tokens(Pass& p);

// out = norm(x) of the given kind with weight w and bias b (b may be null): n_rows rows of
// n elements (0: n_embd). RMSNorm uses rms_eps, LayerNorm norm_eps. out may be x.
void norm(const Pass& p, NormKind kind, const float* x, const float* w, const float* b, int64_t n_rows,
          float* out, int64_t n = 0);

// out [T][n_embd] = attention of layer il over xn [T][n_embd] (q, k, v projections and
// biases, q/k norms, RoPE, the KV store, attention over the layer's window, output
// projection and bias). Writes this layer's K/V into the cache unless it reads another's.
void attention_block(Pass& p, int32_t il, const float* xn, float* out);

// out [T][n_embd] = multi-head latent attention of layer il over xn [T][n_embd]
// (mla_block.cc): the latent and rope key into the cache, attention in the latent space
// through the absorbed projections, output projection.
void mla_attention_block(Pass& p, int32_t il, const float* xn, float* out);
// The expanded form of one sequence's MLA attention (mla_expanded.cc): its rows of ws.attn
// ([n_tokens][H * v], before Wo) from its roped queries in ws.q ([T][H][head_dim]) and the
// latent rows 0 .. pos0 + n_tokens - 1 of `view` (this step's already stored).
void mla_expanded_attention(Pass& p, int32_t il, const ForwardSeq& seq, const PagedKvView& view);

// out [T][n_embd] = MLP of layer il over xn [T][n_embd] (gated SiLU / GELU, or plain GELU
// with biases).
void mlp_block(Pass& p, int32_t il, const float* xn, float* out);

// out [T][n_embd] = mixture-of-experts MLP of layer il over xn [T][n_embd] (moe_block.cc):
// router, top-k, one pass per selected expert over the tokens routed to it, the shared
// expert.
void moe_mlp(Pass& p, int32_t il, const float* xn, float* out);

// Weights that share one input x [n_tokens][n_in], multiplied in as few matmul_fused calls
// as their dtypes allow.
void matmul_group(const kernels::KernelTable& k, ThreadPool& pool,
                  std::initializer_list<kernels::MatmulTarget> targets, const float* x, int64_t n_tokens,
                  std::byte* scratch);

// kernels::matmul_warm of the first matmul_fused call that matmul_group makes for these
// targets (their first run of one dtype).
void matmul_group_warm(const kernels::KernelTable& k, ThreadPool& pool,
                       std::initializer_list<kernels::MatmulTarget> targets, int64_t n_tokens);
// The workers start reading the weights of the first matmul of layer il's attention_block
// (q, k, v) / mlp_block (gate, up) while the caller does the residual add and norm before
// it. Nothing for a block of another kind (MLA, MoE).
void warm_attention_input(Pass& p, int32_t il);
void warm_mlp_input(Pass& p, int32_t il);

// Logits of the batch's logit rows: the output norm, the output matrix (+ bias), final
// soft-capping. [R][n_vocab], in the workspace. Also the output-normed hidden states of
// the batch's embd_rows into ws.embd.
std::span<const float> output_logits(Pass& p);

// The forward passes, one per architecture family (model/arch/*.cc).
std::span<const float> forward_llama(Pass& p);     // llama, mistral, qwen2, qwen3, smollm3, phi3,
                                                   // and with experts: mixtral, qwen2moe, qwen3moe, olmoe
std::span<const float> forward_gemma(Pass& p);     // gemma, gemma2, gemma3
std::span<const float> forward_stablelm(Pass& p);  // stablelm, starcoder2
std::span<const float> forward_deepseek2(Pass& p); // deepseek2 (multi-head latent attention)

}  // namespace lumen::model
