// Weight binding: GGUF tensor names -> typed, shape-checked views. Large matrices stay
// zero-copy views into the model file's mapping; small vectors (norms, biases) are
// copied to f32 once at load.
#pragma once

#include <vector>

#include "base/status.h"
#include "base/progress.h"
#include "base/thread_pool.h"
#include "gguf/model_file.h"
#include "kernels/kernel_table.h"
#include "model/hparams.h"
#include "model/layer_spec.h"
#include "tensor/tensor_view.h"

namespace lumen::model {

// One layer's weights. Optional tensors are null / empty views when the file has none.
// A fused matrix of the file (Phi-3's attn_qkv, ffn_up holding gate and up) is bound as
// row ranges of it: wq, wk, wv (w_gate, w_up) are then views into the one tensor, so the
// forward pass and the kernels see the same three (two) matrices as for any other file.
struct LayerWeights {
  const float* attn_norm = nullptr;    // [n_embd]
  const float* attn_norm_b = nullptr;  // [n_embd] LayerNorm bias
  TensorView wq;                       // [n_embd] -> [n_head * head_dim]
  TensorView wk;                       // [n_embd] -> [n_kv_head * head_dim]; empty: KV from another layer
  TensorView wv;                       // [n_embd] -> [n_kv_head * head_dim]; empty: KV from another layer
  const float* bq = nullptr;           // [n_head * head_dim]
  const float* bk = nullptr;           // [n_kv_head * head_dim]
  const float* bv = nullptr;           // [n_kv_head * head_dim]
  const float* q_norm = nullptr;       // [head_dim], or [n_head][head_dim] when qk_norm_per_head
  const float* k_norm = nullptr;       // [head_dim], or [n_kv_head][head_dim] when qk_norm_per_head
  bool qk_norm_per_head = false;       // StableLM 2 12B: one weight row per head
  TensorView wo;                       // [n_head * head_dim] -> [n_embd]
  const float* bo = nullptr;           // [n_embd]
  const float* attn_post_norm = nullptr;  // [n_embd] (Gemma 2/3)
  const float* ffn_norm = nullptr;     // [n_embd]; null: parallel MLP (StableLM)
  const float* ffn_norm_b = nullptr;   // [n_embd] LayerNorm bias
  TensorView w_gate;                   // [n_embd] -> [n_ff]; empty for a plain MLP
  TensorView w_up;                     // [n_embd] -> [n_ff]
  TensorView w_down;                   // [n_ff] -> [n_embd]
  const float* b_up = nullptr;         // [n_ff]
  const float* b_down = nullptr;       // [n_embd]
  const float* ffn_post_norm = nullptr;  // [n_embd] (Gemma 2/3)

  // Mixture of experts (LayerSpec::moe; w_gate / w_up / w_down are then empty). The file
  // stores each kind of expert matrix as one 3-D tensor, ffn_gate_exps [n_embd, n_ff_exp,
  // n_expert] etc.; expert e's matrix is a 2-D view of its rows (no copy), so the matmul
  // kernels and the interleaved copies (per expert) see ordinary matrices.
  TensorView ffn_gate_inp;             // [n_embd] -> [n_expert] router logits
  std::vector<TensorView> w_gate_exp;  // [n_expert] each [n_embd] -> [n_ff_exp]
  std::vector<TensorView> w_up_exp;    // [n_expert] each [n_embd] -> [n_ff_exp]
  std::vector<TensorView> w_down_exp;  // [n_expert] each [n_ff_exp] -> [n_embd]
  // The shared expert (LayerSpec::shared_expert), run for every token and scaled by
  // sigmoid(xn . gate_inp_shexp).
  TensorView w_gate_shexp;             // [n_embd] -> [n_ff_shexp]
  TensorView w_up_shexp;               // [n_embd] -> [n_ff_shexp]
  TensorView w_down_shexp;             // [n_ff_shexp] -> [n_embd]
  const float* gate_inp_shexp = nullptr;  // [n_embd]; null: the shared expert has no gate (DeepSeek-2)
  const float* exp_probs_b = nullptr;  // [n_expert] expert selection bias (DeepSeek-V3), or null

  // Multi-head latent attention (LayerSpec::mla; wk, wv are then empty). H heads, q/k size
  // head_dim = nope + rope, value size v, latent L = kv_lora_rank, R = rope dims.
  TensorView wq_a;                     // [n_embd] -> [n_lora_q] (with a q bottleneck; else wq)
  const float* q_a_norm = nullptr;     // [n_lora_q]
  TensorView wq_b;                     // [n_lora_q] -> [H * head_dim]
  TensorView wkv_a;                    // [n_embd] -> [L + R]: the latent, then the rope key
  const float* kv_a_norm = nullptr;    // [L]
  TensorView wkv_b;                    // [L] -> [H * (nope + v)]: per head k_nope rows, then v rows
  // The absorbed projections, per head: w_uk[h] = head h's k_nope rows of wkv_b transposed
  // ([nope] -> [L], a copy made at load: f32 for an f32 wkv_b, else f16), w_uv[h] = head
  // h's v rows of wkv_b ([L] -> [v], a view into it).
  std::vector<TensorView> w_uk;
  std::vector<TensorView> w_uv;
};

struct ModelWeights {
  TensorView tok_embd;                 // [n_embd] x n_vocab rows
  std::vector<LayerWeights> layers;    // [n_layer]
  const float* output_norm = nullptr;  // [n_embd]
  const float* output_norm_b = nullptr;  // [n_embd] LayerNorm bias
  TensorView output;                   // [n_embd] -> [n_vocab]; == tok_embd when tied
  const float* output_b = nullptr;     // [n_vocab]
  std::vector<float> rope_freq_factors;  // [rope_dims/2] or empty (llama3, Phi-3 long/short)

  // f32 copies of the small tensors (kept alive here).
  std::vector<std::vector<float>> owned_f32;
  // Matrices made at load (MLA's w_uk), one buffer per layer. Not in matrices(): they are
  // not views of the file (nothing may release their pages); weight_bytes_per_token counts them.
  std::vector<std::vector<std::byte>> owned_matrices;
};

// Binds every tensor the layers' specs need, by llama.cpp's names (blk.N.attn_q, attn_qkv,
// attn_q_norm, post_attention_norm, ffn_up, ...). n_ctx is the longest sequence the model
// will run: Phi-3 uses its long-context RoPE factors when it exceeds the original context.
Result<ModelWeights> bind_weights(const gguf::ModelFile& file, const HParams& hp, const std::vector<LayerSpec>& specs,
                                  int64_t n_ctx);

// Every matrix the forward pass multiplies with, in forward order: each layer's q, k, v, o,
// gate, up, down (those it has; an MoE layer: the router, every expert's gate, up, down,
// the shared expert's), then the output.
std::vector<TensorView*> matrices(ModelWeights& w);
std::vector<const TensorView*> matrices(const ModelWeights& w);

// Interleaved copies of the matrices (kernel_table.h, InterleavedKernels): every matrix
// whose dtype has an interleaved path in a kernel table, laid out one after the other
// (64-byte aligned) in one buffer. The token embedding keeps only its rows (get_rows);
// when tied, the output matrix gets the copy.
struct InterleavePlan {
  struct Entry {
    TensorView* t;                              // the matrix (a view in ModelWeights)
    const kernels::InterleavedKernels* ik;
    size_t offset;                              // in the buffer
    size_t n_bytes;                             // ceil(rows / ik->rows) groups
  };
  std::vector<Entry> entries;
  size_t n_bytes = 0;                           // the whole buffer
};
InterleavePlan plan_interleave(ModelWeights& w, const kernels::KernelTable& k);
// Packs every entry into dst (plan.n_bytes), on the pool's threads. To keep the resident
// set small while a large model is copied, each packed chunk's whole pages can be unmapped
// right away (MADV_DONTNEED): `release_source` only where the views are a read-only file
// mapping, `release_dest` only where dst is a shared file mapping (never anonymous memory:
// that would drop the copy).
struct PackRelease {
  bool source = false;
  bool dest = false;
};
// progress (may be null): bytes packed, reported between batches of chunks.
void pack_interleaved(const InterleavePlan& plan, std::byte* dst, ThreadPool& pool, PackRelease release = {},
                      Progress* progress = nullptr);
// Unmaps the whole pages inside [p, p + n) from this process (MADV_DONTNEED). Only for
// file-backed mappings, whose pages stay in the page cache.
void release_pages(const std::byte* p, size_t n);
// Points the entries' views at their copies in `base` (a buffer packed by pack_interleaved).
void bind_interleaved(const InterleavePlan& plan, const std::byte* base);

// Bytes of weights read per generated token (every matrix once, in the layout the kernels
// read it, + one embedding row, + MLA's w_uk copies). MoE layers count n_expert_used experts
// (a token reads only the experts it is routed to), not all of them.
uint64_t weight_bytes_per_token(const ModelWeights& w, const HParams& hp);

}  // namespace lumen::model
