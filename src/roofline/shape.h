// Model shapes and parameter accounting for the roofline planner.
//
// A ModelShape is the handful of numbers that decide an inference engine's costs: how many
// weights it reads per step, how much KV cache each token adds, how many multiply-adds a
// token costs. Shapes come from a preset table (real configs of public models) or from a
// model file's metadata; the parameter counts come from the shape, or from a file's actual
// tensors when there is one (so an odd architecture's extra tensors are not missed).
//
// Accounting, per decoder layer (d = hidden, h = heads, kv = KV heads, hd = head dim):
//
//   attention  q: d x (h*hd)   k: d x (kv*hd)   v: d x (kv*hd)   o: (h*hd) x d
//              bias on q, k, v (Qwen1.x/2.x): h*hd + 2*kv*hd
//   MLP        gated (SwiGLU): gate d x ffn, up d x ffn, down ffn x d; plain: up + down
//   norms      two RMSNorm vectors of d: counted apart (`norms`), not in `decoder`
//
//   MLA        (DeepSeek-2) q: d x (h*hd) or d x q_lora + q_lora x (h*hd) (attn_q),
//              kv_a: d x (kv_lora + rope) (attn_k), kv_b: kv_lora x h*(hd - rope + v) (attn_v),
//              o: (h*v) x d; the first n_dense_lead layers have a dense MLP of ffn
//   MoE MLP    router d x n_expert; n_expert experts of ffn_exp (gate, up, down each d x
//              ffn_exp); a shared expert of ffn_shexp (+ its gate vector d) if the model has
//              one. A token goes through n_expert_used experts: the other experts' parameters
//              are `mlp_inactive`, stored but not read (nor multiplied) for that token. A
//              step of b tokens routed independently and uniformly touches a share
//              1 - (1 - used / n_expert)^b of each layer's experts (expert_share_touched).
//
//   decoder    = n_layer x (attention + MLP)
//   lm_head    = vocab x d, counted even when tied to the embeddings, because it is read
//                (and multiplied) every step
//   embedding  = vocab x d, reported apart: a step reads one row of it
//   total      = distinct parameters stored: decoder + norms + embedding + (tied ? 0 : lm_head)
//
// The weights a one-token forward step reads are decoder - mlp_inactive + lm_head; that is
// what the planner's memory-time formulas use (Qwen1.5-0.5B: 0.29 B + 0.14 B in binary
// units); capacity holds all of them (decoder + lm_head).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "base/status.h"
#include "gguf/model_file.h"
#include "model/known_shapes.h"

namespace lumen::roofline {

struct ModelShape {
  std::string name;          // preset name, or the file's general.name / path
  int64_t n_embd = 0;        // hidden size d
  int64_t n_layer = 0;       // decoder layers
  int64_t n_head = 0;        // query heads
  int64_t n_kv_head = 0;     // key/value heads: == n_head (MHA), < (GQA), 1 (MQA)
  int64_t head_dim = 0;      // per-head size
  int64_t n_ff = 0;          // MLP inner size
  int64_t n_vocab = 0;       // vocabulary (rows of the embedding and of lm_head)
  bool tied_output = false;  // lm_head shares the embedding matrix
  bool has_qkv_bias = false; // q/k/v projections carry a bias
  bool gated_mlp = true;     // SwiGLU (gate, up, down) rather than up, down
  // Sliding-window layers (Gemma 2 / 3, Mistral, Phi-3): n_local_layers of the n_layer keep
  // and attend over only the last `window` positions; the others over the whole context.
  int64_t n_local_layers = 0;
  int64_t window = 0;        // tokens; > 0 when n_local_layers > 0
  // Mixture of experts (n_expert 0: a dense MLP of n_ff).
  int64_t n_expert = 0;        // experts per layer
  int64_t n_expert_used = 0;   // experts a token goes through
  int64_t n_ff_exp = 0;        // one expert's inner size
  int64_t n_ff_shexp = 0;      // the shared expert's inner size (0: none)
  int64_t n_dense_lead = 0;    // leading layers with a dense MLP of n_ff (DeepSeek-2)
  // Multi-head latent attention (DeepSeek-2; kv_lora_rank 0: none). head_dim is q/k's size
  // per head, rope_dims of it rotated; the cache holds kv_lora_rank + rope_dims per token and
  // layer, no V.
  int64_t kv_lora_rank = 0;
  int64_t q_lora_rank = 0;     // 0: one q matrix
  int64_t rope_dims = 0;
  int64_t head_dim_v = 0;

  bool is_moe() const { return n_expert > 0; }
  bool is_mla() const { return kv_lora_rank > 0; }
  int64_t kv_elems_per_layer() const { return is_mla() ? kv_lora_rank + rope_dims : 2 * n_kv_head * head_dim; }
  int64_t n_q_dim() const { return n_head * head_dim; }
  int64_t n_kv_dim() const { return n_kv_head * head_dim; }
};

// Checks every field; the message names the field and its value.
Status validate_shape(const ModelShape& shape);

// Parameters of one decoder layer, by matrix.
struct LayerParams {
  int64_t attn_q = 0;
  int64_t attn_k = 0;
  int64_t attn_v = 0;
  int64_t attn_qkv_bias = 0;
  int64_t attn_o = 0;
  int64_t mlp_gate = 0;  // 0 for a plain MLP
  int64_t mlp_up = 0;
  int64_t mlp_down = 0;
  int64_t mlp_router = 0;    // MoE: the router (and the shared expert's gate vector)
  int64_t mlp_inactive = 0;  // MoE: parameters of the experts a token does not go through

  int64_t attention() const { return attn_q + attn_k + attn_v + attn_qkv_bias + attn_o; }
  int64_t mlp() const { return mlp_gate + mlp_up + mlp_down + mlp_router; }
  int64_t total() const { return attention() + mlp(); }
};
LayerParams layer_params(const ModelShape& shape);

// Whole-model counts (see the accounting at the top of this file).
struct ParamCounts {
  int64_t attention = 0;      // all layers: q, k, v (+ bias), o
  int64_t mlp = 0;            // all layers: gate, up, down (MoE: router, every expert)
  int64_t mlp_inactive = 0;   // MoE, all layers: the experts one token does not go through
  int64_t decoder_other = 0;  // other per-layer tensors a file holds (not norms); 0 for shapes
  int64_t decoder = 0;        // attention + mlp + decoder_other
  int64_t lm_head = 0;        // counted even when tied
  int64_t embedding = 0;
  int64_t norms = 0;
  int64_t total = 0;          // distinct parameters stored

  int64_t read_per_step() const { return decoder - mlp_inactive + lm_head; }  // one token
  int64_t stored_per_step() const { return decoder + lm_head; }                // all experts
};
ParamCounts count_params(const ModelShape& shape);

// The share of a layer's experts a step of n_tokens touches: 1 - (1 - used / n_expert)^n
// (independent, uniform routing); 1 for a dense model.
double expert_share_touched(int64_t n_expert, int64_t n_expert_used, double n_tokens);

// K and V of one token over all layers: n_layer x 2 x n_kv_head x head_dim (the rate at
// which a sequence's KV grows while it is shorter than every window); latent attention:
// n_layer x (kv_lora_rank + rope_dims).
inline int64_t kv_elems_per_token(const ModelShape& shape) { return shape.n_layer * shape.kv_elems_per_layer(); }

// Multiply-adds of attention for one (query, key) position pair over all layers and
// heads, for QK^T; PV costs the same again. GQA does not reduce it (every query head
// still scores every key).
// Latent attention scores in the latent space: kv_lora_rank + rope_dims per head.
inline int64_t attn_macs_per_pair(const ModelShape& shape) {
  return shape.n_layer * shape.n_head * (shape.is_mla() ? shape.kv_lora_rank + shape.rope_dims : shape.head_dim);
}

// Sliding windows, counted per layer group: a global layer holds (and a query of it
// scores) every position, a local one at most `window`.
//
//   kv_elems_at(n)    = 2 kv hd (n_global n + n_local min(n, window))     one sequence of n tokens
//   attn_macs_at(n)   = h hd (n_global n + n_local min(n, window))        one query at context n
//   attn_macs_prefill(d, n) = sum over i = 1..n of attn_macs_at(d + i)    n queries after d cached
double kv_elems_at(const ModelShape& shape, double n_ctx);
double attn_macs_at(const ModelShape& shape, double n_ctx);
double attn_macs_prefill(const ModelShape& shape, double n_depth, double n_new);

// ---- presets ----

// The shapes of public models: one table with `lumen synth` (model/known_shapes.h).
using ModelPreset = model::KnownShape;
std::span<const ModelPreset> model_presets();
// Error (naming `flag` and the value, listing the valid names) for an unknown name.
Result<ModelShape> model_preset(std::string_view name, std::string_view flag = "--preset");
// "qwen1.5-0.5b, qwen1.5-1.8b, ..."
std::string model_preset_names();

// ---- model files ----

// The shape from a file's metadata. Llama and Qwen2 files go through model::read_hparams;
// other architectures are read from the generic GGUF keys ("<arch>.embedding_length", ...)
// so that any GGUF with standard keys can be planned for, even one lumen cannot run.
Result<ModelShape> shape_from_model_file(const gguf::ModelFile& file);

// What a file's actual tensors hold: parameter counts and the bytes each part occupies
// at its stored type, plus how the per-token multiply-adds split between quantized and
// float matrices (lumen computes quantized weights with 8-bit activations and integer
// dot products, float weights with f32 FMA).
struct FileWeights {
  ParamCounts params;
  uint64_t decoder_bytes = 0;        // every blk.* tensor except norms
  uint64_t lm_head_bytes = 0;        // output.weight, or token_embd.weight when tied
  uint64_t embedding_bytes = 0;      // token_embd.weight
  uint64_t embedding_row_bytes = 0;  // one row of token_embd.weight (read per token)
  uint64_t norm_bytes = 0;           // *_norm tensors
  int64_t decoder_macs_int8 = 0;     // per token: decoder matrices in quantized types
  int64_t decoder_macs_float = 0;    // per token: decoder matrices in f32/f16/bf16
  bool lm_head_int8 = false;         // lm_head is in a quantized type
  uint64_t expert_bytes = 0;         // MoE: the blk.*.ffn_*_exps tensors (in decoder_bytes)
  double expert_share = 1.0;         // MoE: n_expert_used / n_expert, the share one token reads

  // What one token's forward step reads: the decoder with expert_share of the experts
  // (decoder_macs_* count the same share), + lm_head.
  uint64_t read_per_step_bytes() const {
    return decoder_bytes - static_cast<uint64_t>(static_cast<double>(expert_bytes) * (1.0 - expert_share)) +
           lm_head_bytes;
  }
  uint64_t stored_per_step_bytes() const { return decoder_bytes + lm_head_bytes; }
  // Average bits per weight over what a step reads (decoder + lm_head).
  double bits_per_weight() const;
};
Result<FileWeights> count_file_weights(const gguf::ModelFile& file);

}  // namespace lumen::roofline
