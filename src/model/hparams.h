// Model hyper-parameters, read from a ModelFile's GGUF-named metadata (whatever the
// container: GGUF, Hugging Face or llama2.c all present the same keys). HParams holds what
// is model-wide; what may differ per layer (attention window, RoPE, norms, ...) is in the
// LayerSpecs (layer_spec.h), derived from these and the file's metadata.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "gguf/model_file.h"
#include "kernels/ops.h"

namespace lumen::model {

// Architectures are an enum with a switch (STYLE 17), not an interface. Each family has
// one forward file in model/arch/.
enum class Arch : uint8_t {
  kLlama,       // Llama 2/3, TinyLlama, SmolLM, Mistral (window honoured): RMSNorm, SwiGLU, RoPE
  kQwen2,       // as llama + bias on q/k/v projections, NeoX RoPE
  kQwen3,       // as llama + per-head RMSNorm of q and k, NeoX RoPE
  kSmollm3,     // as llama with every 4th layer NoPE (no rotary embedding)
  kGemma,       // embeddings * sqrt(n_embd), GELU-gated MLP, norm weights stored as 1 + w
  kGemma2,      // + post-attention / post-MLP norms, sliding window on even layers, soft-capping
  kGemma3,      // + q/k norms, 5 local : 1 global layers, local RoPE base 10000
  kPhi3,        // fused qkv and gate_up, optional sliding window, long-context RoPE factors
  kStarcoder2,  // LayerNorm with bias, biases everywhere, plain GELU MLP
  kStablelm,    // LayerNorm with bias, partial rotary, optional parallel MLP and q/k norms
  // Mixture-of-experts families (the MLP is moe_mlp, blocks.h); Mixtral is kLlama with experts.
  kQwen2Moe,    // as qwen2 (q/k/v biases) + experts (softmax top-k, not renormalised) + a
                // shared expert with a sigmoid gate
  kQwen3Moe,    // as qwen3 (per-head q/k norms) + experts (softmax top-k, renormalised)
  kOlmoe,       // as llama + q/k RMSNorm over the whole projection, NeoX RoPE, experts
                // (softmax top-k, not renormalised)
  kDeepseek2,   // multi-head latent attention (MLA: the KV cache holds a normed latent + one
                // shared RoPE key per token), experts with shared experts, dense leading
                // layers, softmax or sigmoid gating with an expert bias, YaRN RoPE
};
std::string_view arch_name(Arch arch);

struct HParams {
  Arch arch = Arch::kLlama;
  std::string arch_key;     // general.architecture as written ("mistral" reads as kLlama)
  int32_t n_vocab = 0;
  int32_t n_embd = 0;       // hidden size
  int32_t n_layer = 0;
  int32_t n_head = 0;       // query heads
  int32_t n_kv_head = 0;    // key/value heads: == n_head (MHA), < (GQA), 1 (MQA)
  int32_t head_dim = 0;     // per-head size (key_length)
  int32_t n_ff = 0;         // MLP inner size
  int32_t n_ctx_train = 0;  // context length the model was trained with
  // Mixture of experts (0 experts: a dense MLP of n_ff).
  int32_t n_expert = 0;         // expert_count: experts per MoE layer
  int32_t n_expert_used = 0;    // expert_used_count: experts each token is routed to (top-k)
  int32_t n_ff_exp = 0;         // one expert's MLP inner size (expert_feed_forward_length, else n_ff)
  int32_t n_ff_shexp = 0;       // the shared expert's inner size (qwen2moe; else 0)
  bool expert_weights_norm = false;  // top-k router weights divided by their sum
  // DeepSeek-2 mixture of experts: the first n_layer_dense_lead layers have a dense MLP of
  // n_ff; the shared experts are one MLP of n_ff_shexp = n_ff_exp * expert_shared_count
  // without a gate; the router weights are scaled by expert_weights_scale.
  int32_t n_layer_dense_lead = 0;
  float expert_weights_scale = 1.0f;
  bool expert_gating_sigmoid = false;  // router probabilities sigmoid(logits), not softmax
  // Multi-head latent attention (deepseek2; 0 otherwise). head_dim is the query/key size
  // per head (qk_nope + rope_dims), head_dim_v the value size.
  int32_t n_lora_q = 0;     // q through a low-rank bottleneck of this size (0: one wq)
  int32_t n_lora_kv = 0;    // the latent: kv_lora_rank
  int32_t head_dim_v = 0;   // attention.value_length
  float rms_eps = 1e-5f;    // RMSNorm epsilon
  float norm_eps = 1e-5f;   // LayerNorm epsilon (attention.layer_norm_epsilon)
  bool has_qkv_bias = false;  // q/k/v biases required (qwen2)
  bool tied_output = false;   // output matrix is token_embd
  float embd_scale = 1.0f;    // token embeddings are multiplied by it (Gemma: sqrtf(n_embd))
  float final_softcap = 0.0f; // > 0: logits = cap * tanh(logits / cap) (Gemma 2)
  // <arch>.pooling_type as written, for embeddings (GGUF / llama.cpp: 0 none, 1 mean,
  // 2 cls, 3 last, 4 rank); -1: absent (decoder LLMs). Read as is: the engine decides.
  int32_t pooling_type = -1;

  // RoPE as the file states it (LayerSpec::rope says what each layer uses)
  int32_t rope_dims = 0;                // rotated dims (rope.dimension_count; default head_dim)
  float rope_theta = 10000.0f;
  float rope_freq_scale = 1.0f;         // linear scaling: pos * freq_scale
  float rope_attn_factor = 1.0f;        // rope.scaling.attn_factor (Phi-3 longrope)
  kernels::RopeLayout rope_layout = kernels::RopeLayout::kInterleaved;
  std::string rope_scaling_type;        // "", "linear", "llama3"
  float rope_scaling_factor = 1.0f;     // llama3
  float rope_low_freq_factor = 1.0f;    // llama3
  float rope_high_freq_factor = 4.0f;   // llama3
  int32_t rope_original_ctx = 8192;     // llama3; Phi-3: rope.scaling.original_context_length;
                                        // yarn: the training context (n_ctx_orig_yarn)
  float rope_yarn_log_mul = 0.0f;       // yarn: rope.scaling.yarn_log_multiplier (DeepSeek-2)

  bool is_moe() const { return n_expert > 0; }
  bool is_mla() const { return n_lora_kv > 0; }
  int32_t qk_nope_dim() const { return head_dim - rope_dims; }  // MLA: per head, not rotated
  int32_t mla_row() const { return n_lora_kv + rope_dims; }     // MLA: cached floats per token
  int32_t n_q_dim() const { return n_head * head_dim; }
  int32_t n_kv_dim() const { return n_kv_head * head_dim; }
};

// Reads and validates the hyper-parameters; the message names the key at fault.
Result<HParams> read_hparams(const gguf::ModelFile& file);

// Llama-3 RoPE frequency factors ([rope_dims/2]; theta_i is divided by factor[i]),
// computed from the scaling parameters as Llama 3.1 defines them.
std::vector<float> llama3_rope_freq_factors(const HParams& hp);

}  // namespace lumen::model
