// LayerSpec: what one layer computes, as data (STYLE 21), read once from the file's
// metadata (and the presence of optional tensors) by read_layer_specs(). The forward files
// in model/arch/ read like their papers by calling shared blocks (blocks.h) that look
// here instead of at the architecture: a Gemma-3 global layer and a local one differ only in
// their specs (window, RoPE base), a Phi-3 layer differs from a Llama one only in its
// weights (fused) and RoPE factors.
//
// KvLayout (kv_layout.h: what the model needs from the KV cache) is derived from the specs:
// layers that store K/V are grouped by attention window, each group with its own storage
// region and block tables (kv/); a layer that reads another layer's K/V (cross-layer
// sharing) stores nothing.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "gguf/model_file.h"
#include "kernels/ops.h"
#include "model/hparams.h"
#include "model/kv_layout.h"

namespace lumen::model {

enum class AttnKind : uint8_t {
  kFull,     // causal attention over every earlier position
  kSliding,  // causal attention over the last `window` positions (q - window < k <= q)
};
std::string_view attn_kind_name(AttnKind kind);

enum class NormKind : uint8_t {
  kRms,    // x / sqrt(mean(x^2) + eps) * w
  kLayer,  // (x - mean) / sqrt(var + eps) * w + b
};

enum class MlpKind : uint8_t {
  kSiluGated,  // down(silu(gate(x)) * up(x))            Llama, Qwen, Phi-3, StableLM
  kGeluGated,  // down(gelu(gate(x)) * up(x))            Gemma
  kGelu,       // down(gelu(up(x) + b_up)) + b_down      StarCoder2
};
std::string_view mlp_kind_name(MlpKind kind);

// The rotary embedding of one layer. Layers with equal RopeSpecs share one angle table per
// forward pass.
struct RopeSpec {
  int32_t n_rot = 0;          // rotated dims per head (<= head_dim); 0: no RoPE (NoPE layer)
  float theta = 10000.0f;     // base
  float freq_scale = 1.0f;    // linear position scaling
  float attn_factor = 1.0f;   // cos/sin magnitude factor (Phi-3 longrope)
  bool freq_factors = false;  // divide theta_i by ModelWeights::rope_freq_factors[i]
  float ext_factor = 0.0f;    // YaRN (kernels::RopeParams): 1 for rope.scaling.type yarn
  float corr_low = 0.0f, corr_high = 0.0f;

  bool operator==(const RopeSpec&) const = default;
};

struct LayerSpec {
  AttnKind attn = AttnKind::kFull;
  int32_t window = 0;              // kSliding: tokens visible to a query, itself included
  RopeSpec rope;
  NormKind norm = NormKind::kRms;  // every norm of the layer (and the model's output norm)
  bool qk_norm = false;            // per-head norm of q and k before RoPE (Qwen3, Gemma 3)
  bool qk_norm_whole = false;      // with qk_norm: one norm over all heads' q (k) of a token,
                                   // weights [n_head * head_dim] (OLMoE)
  bool post_attn_norm = false;     // norm of the attention output before the residual (Gemma 2/3)
  bool post_ffn_norm = false;      // norm of the MLP output before the residual (Gemma 2/3)
  bool parallel_mlp = false;       // the MLP reads the attention's normed input and both add
                                   // to x (StableLM files without ffn_norm)
  MlpKind mlp = MlpKind::kSiluGated;
  bool moe = false;                // the MLP is a mixture of experts (moe_mlp, blocks.h)
  bool shared_expert = false;      // moe: + a shared expert, with a sigmoid gate (Qwen2-MoE)
                                   // or without (DeepSeek-2's shared experts)
  bool mla = false;                // multi-head latent attention (mla_attention_block, blocks.h)
  float attn_scale = 0.0f;         // multiplies q.k: 1/sqrt(head_dim) or the file's override
  bool scale_q = false;            // apply attn_scale to q (f32) before the product, as the
                                   // ggml graphs of Gemma and Phi-3 do, rather than to the
                                   // scores (the two round differently)
  float attn_softcap = 0.0f;       // > 0: scores = cap * tanh(scores / cap) (Gemma 2)
  int32_t kv_source_layer = -1;    // >= 0: attends over that earlier layer's K/V, stores none
};

// The specs of every layer; the message names the metadata key at fault.
//
// Cross-layer KV sharing (CLA) is read from `<arch>.attention.kv_source_layers`, an integer
// array [n_layer] (lumen's key; no llama.cpp architecture writes it): -1 for a layer that
// computes and stores its own K/V, j for a layer that attends over layer j's (j < the
// layer, layer j stores its own K/V, and the reader's window is no wider than layer j's).
// Such a layer has no attn_k / attn_v weights.
Result<std::vector<LayerSpec>> read_layer_specs(const gguf::ModelFile& file, const HParams& hp);

// The KV groups of the layers (kv_layout.h): layers grouped by window, CLA readers on their
// source's slot. The message names the layer at fault.
Result<KvLayout> make_kv_layout(const HParams& hp, const std::vector<LayerSpec>& specs);

}  // namespace lumen::model
