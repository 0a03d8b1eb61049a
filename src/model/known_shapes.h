// Shapes of public models, from each model's published Hugging Face config.json: one table
// that `lumen roofline --preset` plans for and `lumen synth --preset` writes random-weight
// files at (synth adds only what a file needs beyond the shape: a tokenizer).
//
//   hidden_size, num_hidden_layers, num_attention_heads, num_key_value_heads, head_dim (else
//   hidden / heads), intermediate_size, vocab_size, max_position_embeddings, rope_theta,
//   rms_norm_eps, tie_word_embeddings, q/k/v bias (Qwen1.5 / Qwen2.5), sliding_window with
//   the layers it applies to, and Gemma 2's logit soft-caps.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

namespace lumen::model {

struct KnownShape {
  const char* name;          // "qwen3-0.6b"
  const char* arch;          // GGUF general.architecture ("llama", "qwen3", "gemma2", ...)
  int32_t n_embd, n_layer, n_head, n_kv_head, head_dim, n_ff, n_vocab;
  int32_t n_ctx;             // max_position_embeddings
  float rope_theta;
  float norm_eps;
  bool tied_output;
  bool has_qkv_bias;
  int32_t sliding_window;    // 0: every layer attends to all positions
  int32_t window_period;     // layer il slides iff il % period < period - 1 (1: all layers;
                             // Gemma 2: 2, Gemma 3: 6); unused without a window
  float attn_softcap;        // Gemma 2: scores = cap * tanh(scores / cap); 0 = none
  float final_softcap;       // Gemma 2: the same on the logits
  const char* source;        // where the figures come from
};

std::span<const KnownShape> known_shapes();
const KnownShape* find_known_shape(std::string_view name);  // nullptr when unknown

// The experts of the mixture-of-experts shapes (num_experts / num_local_experts,
// num_experts_per_tok, moe_intermediate_size, shared_expert_intermediate_size). The
// KnownShape's n_ff is intermediate_size: the expert size for OLMoE and Mixtral, a dense
// size for Qwen3-MoE (unused), the shared expert's for Qwen2-MoE.
struct KnownMoe {
  const char* name;          // a KnownShape's name
  int32_t n_expert;
  int32_t n_expert_used;
  int32_t n_ff_exp;          // one expert's inner size
  int32_t n_ff_shexp;        // the shared expert's (0: none)
};
const KnownMoe* find_known_moe(std::string_view name);  // nullptr for a dense shape

// Multi-head latent attention and the rest of DeepSeek-2's config (q_lora_rank,
// kv_lora_rank, qk_rope_head_dim, v_head_dim, first_k_dense_replace, n_shared_experts,
// routed_scaling_factor, rope_scaling). KnownMoe's n_ff_shexp is n_shared_experts x the
// expert size.
struct KnownMla {
  const char* name;          // a KnownShape's name
  int32_t n_lora_q;          // 0: no q bottleneck
  int32_t n_lora_kv;
  int32_t rope_dims;
  int32_t head_dim_v;
  int32_t n_dense_lead;
  int32_t n_expert_shared;
  float expert_weights_scale;
  float yarn_factor;
  int32_t yarn_original_ctx;
  float yarn_log_mul;
};
const KnownMla* find_known_mla(std::string_view name);  // nullptr without latent attention

}  // namespace lumen::model
