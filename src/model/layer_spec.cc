#include "model/layer_spec.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace lumen::model {

std::string_view attn_kind_name(AttnKind kind) {
  switch (kind) {
    case AttnKind::kFull: return "full";
    case AttnKind::kSliding: return "sliding";
  }
  return "?";
}

std::string_view mlp_kind_name(MlpKind kind) {
  switch (kind) {
    case MlpKind::kSiluGated: return "silu-gated";
    case MlpKind::kGeluGated: return "gelu-gated";
    case MlpKind::kGelu: return "gelu";
  }
  return "?";
}

namespace {

bool has_tensor(const gguf::ModelFile& f, int32_t il, const char* suffix) {
  return f.find_tensor("blk." + std::to_string(il) + "." + suffix) != nullptr;
}

// The sliding window of the file, 0 when it has none. Gemma 2 and Phi-3 get llama.cpp's
// defaults when the key is absent (c392e5094: Gemma 2 4096; Phi-3-mini/medium 4k 2047). A
// Gemma 3 file without it has no sliding layers (all global, one RoPE base): c392e5094
// required the key, newer llama.cpp reads it as optional and then slides no layer, and
// `lumen synth --sliding-window 0` writes such files.
Result<int32_t> read_window(const gguf::ModelFile& f, const HParams& hp) {
  const std::string key = hp.arch_key + ".attention.sliding_window";
  if (std::optional<int64_t> w = f.get_int(key)) {
    if (*w < 0 || *w > (int64_t{1} << 30))
      return error("model metadata: '" + key + "' = " + std::to_string(*w) + " is out of range");
    return static_cast<int32_t>(*w);
  }
  if (f.find(key)) return error("model metadata: '" + key + "' must be an integer");
  if (hp.arch == Arch::kGemma2) return 4096;
  if (hp.arch == Arch::kPhi3 && (hp.n_layer == 32 || hp.n_layer == 40) && hp.n_ctx_train == 4096) return 2047;
  return 0;
}

// Which layers slide: every layer (Llama / Mistral, Phi-3), or a period: layer il slides
// iff il % period < period - 1 (Gemma 2: period 2, even layers; Gemma 3: 6, five local to
// one global). `<arch>.attention.sliding_window_pattern` overrides it, either as a period
// (an integer, llama.cpp's set_swa_pattern) or as one flag per layer (an array, non-zero =
// sliding, as newer llama.cpp files and HF's layer_types state it).
Result<std::vector<bool>> read_sliding_layers(const gguf::ModelFile& f, const HParams& hp) {
  int32_t period = hp.arch == Arch::kGemma2 ? 2 : hp.arch == Arch::kGemma3 ? 6 : 1;
  const std::string key = hp.arch_key + ".attention.sliding_window_pattern";
  std::vector<bool> slides(hp.n_layer);
  if (const std::vector<int64_t>* flags = f.get_int_array(key)) {
    if (static_cast<int64_t>(flags->size()) != hp.n_layer)
      return error("model metadata: '" + key + "' has " + std::to_string(flags->size()) + " entries, expected " +
                   std::to_string(hp.n_layer) + " (one per layer)");
    for (int32_t il = 0; il < hp.n_layer; ++il) slides[il] = (*flags)[il] != 0;
    return slides;
  }
  if (std::optional<int64_t> p = f.get_int(key)) {
    if (*p < 1 || *p > 4096) return error("model metadata: '" + key + "' = " + std::to_string(*p) + " is out of range");
    period = static_cast<int32_t>(*p);
  } else if (f.find(key)) {
    return error("model metadata: '" + key + "' must be an integer or an array of per-layer flags");
  }
  for (int32_t il = 0; il < hp.n_layer; ++il) slides[il] = period == 1 || il % period < period - 1;
  return slides;
}

Result<float> read_float(const gguf::ModelFile& f, const std::string& key, float fallback) {
  std::optional<double> v = f.get_float(key);
  if (!v) {
    if (f.find(key)) return error("model metadata: '" + key + "' must be a number");
    return fallback;
  }
  if (!(*v > 0 && *v < 1e9)) return error("model metadata: '" + key + "' = " + std::to_string(*v) + " must be positive");
  return static_cast<float>(*v);
}

// Cross-layer KV sharing: kv_source_layers[il] (see layer_spec.h).
Status read_kv_sources(const gguf::ModelFile& f, const HParams& hp, std::vector<LayerSpec>& specs) {
  const std::string key = hp.arch_key + ".attention.kv_source_layers";
  const std::vector<int64_t>* src = f.get_int_array(key);
  if (!src) {
    if (f.find(key)) return error("model metadata: '" + key + "' must be an integer array");
    return Status();
  }
  if (static_cast<int64_t>(src->size()) != hp.n_layer)
    return error("model metadata: '" + key + "' has " + std::to_string(src->size()) + " entries, expected " +
                 std::to_string(hp.n_layer) + " (one per layer)");
  for (int32_t il = 0; il < hp.n_layer; ++il) {
    const int64_t j = (*src)[il];
    if (j == -1) continue;
    const std::string where = "model metadata: '" + key + "'[" + std::to_string(il) + "] = " + std::to_string(j);
    if (j < 0 || j >= il) return error(where + " must be -1 or an earlier layer");
    if ((*src)[j] != -1) return error(where + " names a layer that itself reads another layer's KV");
    specs[il].kv_source_layer = static_cast<int32_t>(j);  // windows: checked by make_kv_layout
  }
  return Status();
}

// ggml_rope_yarn_corr_dims: the pairs below `low` keep their unscaled (extrapolated) angle,
// those above `high` are interpolated, with beta_fast 32 and beta_slow 1 (llama.cpp's
// defaults) rotations over the original context marking the two ends.
void yarn_corr_dims(const HParams& hp, int32_t n_rot, RopeSpec& r) {
  auto corr_dim = [&](float n_rotations) {
    return static_cast<float>(n_rot) *
           std::log(static_cast<float>(hp.rope_original_ctx) / (n_rotations * 2.0f * std::numbers::pi_v<float>)) /
           (2.0f * std::log(hp.rope_theta));
  };
  r.ext_factor = 1.0f;
  r.corr_low = std::max(0.0f, std::floor(corr_dim(32.0f)));
  r.corr_high = std::min(static_cast<float>(n_rot - 1), std::ceil(corr_dim(1.0f)));
}

}  // namespace

Result<std::vector<LayerSpec>> read_layer_specs(const gguf::ModelFile& f, const HParams& hp) {
  const std::string& a = hp.arch_key;
  std::vector<LayerSpec> specs(hp.n_layer);
  LUMEN_ASSIGN_OR_RETURN(const int32_t window, read_window(f, hp));
  LUMEN_ASSIGN_OR_RETURN(const std::vector<bool> slides, read_sliding_layers(f, hp));
  // Gemma 3's local layers: their own RoPE base (10000 unless the file says), no scaling.
  LUMEN_ASSIGN_OR_RETURN(const float theta_swa, read_float(f, a + ".rope.freq_base_swa", 10000.0f));

  // Attention scale: 1/sqrt(head_dim); llama.cpp's Gemma 2/3 27B use 1/sqrt(n_embd / n_head)
  // (query_pre_attn_scalar), recognised by their layer counts; the file may state its own.
  float scale = 1.0f / std::sqrt(static_cast<float>(hp.head_dim));
  if ((hp.arch == Arch::kGemma2 && hp.n_layer == 46) || (hp.arch == Arch::kGemma3 && hp.n_layer == 62))
    scale = 1.0f / std::sqrt(static_cast<float>(hp.n_embd / hp.n_head));
  if (hp.arch == Arch::kDeepseek2) {
    // llama.cpp's deepseek2 graph: YaRN's magnitude correction goes into the scale (squared,
    // for q and k) instead of the rotation, whose cos / sin it divides back out.
    const float mscale = hp.rope_attn_factor * (1.0f + hp.rope_yarn_log_mul * std::log(1.0f / hp.rope_freq_scale));
    scale = mscale * mscale / std::sqrt(static_cast<float>(hp.head_dim));
  }
  LUMEN_ASSIGN_OR_RETURN(scale, read_float(f, a + ".attention.scale", scale));
  float attn_softcap = 0.0f;
  if (hp.arch == Arch::kGemma2) {
    LUMEN_ASSIGN_OR_RETURN(attn_softcap, read_float(f, a + ".attn_logit_softcapping", 50.0f));
  }

  RopeSpec rope;
  rope.n_rot = hp.rope_dims;
  rope.theta = hp.rope_theta;
  rope.freq_scale = hp.rope_freq_scale;
  rope.attn_factor = hp.rope_attn_factor;
  rope.freq_factors = f.find_tensor("rope_freqs.weight") != nullptr || hp.rope_scaling_type == "llama3" ||
                      (hp.arch == Arch::kPhi3 && f.find_tensor("rope_factors_long.weight") != nullptr);
  if (hp.rope_scaling_type == "yarn") yarn_corr_dims(hp, rope.n_rot, rope);
  if (hp.arch == Arch::kDeepseek2) rope.attn_factor = 1.0f / (1.0f + 0.1f * std::log(1.0f / hp.rope_freq_scale));

  for (int32_t il = 0; il < hp.n_layer; ++il) {
    LayerSpec& s = specs[il];
    s.rope = rope;
    s.attn_scale = scale;
    s.attn_softcap = attn_softcap;
    if (window > 0 && slides[il]) {
      s.attn = AttnKind::kSliding;
      s.window = window;
    }
    s.moe = hp.is_moe();
    switch (hp.arch) {
      case Arch::kLlama:
      case Arch::kQwen2:
        break;
      case Arch::kQwen3:
      case Arch::kQwen3Moe:
        s.qk_norm = true;
        break;
      case Arch::kQwen2Moe:
        s.shared_expert = true;
        break;
      case Arch::kOlmoe:
        s.qk_norm = s.qk_norm_whole = true;
        break;
      case Arch::kDeepseek2:
        s.mla = true;
        s.moe = il >= hp.n_layer_dense_lead;
        s.shared_expert = s.moe;
        break;
      case Arch::kSmollm3:
        if ((il + 1) % 4 == 0) s.rope.n_rot = 0;  // NoPE: llama.cpp's n_no_rope_layer_step = 4
        break;
      case Arch::kGemma:
      case Arch::kGemma2:
      case Arch::kGemma3:
        s.mlp = MlpKind::kGeluGated;
        s.scale_q = true;
        s.post_attn_norm = s.post_ffn_norm = hp.arch != Arch::kGemma;
        s.qk_norm = hp.arch == Arch::kGemma3;
        if (hp.arch == Arch::kGemma3 && s.attn == AttnKind::kSliding) {
          s.rope.theta = theta_swa;
          s.rope.freq_scale = 1.0f;
        }
        break;
      case Arch::kPhi3:
        s.scale_q = true;
        break;
      case Arch::kStarcoder2:
        s.norm = NormKind::kLayer;
        s.mlp = MlpKind::kGelu;
        break;
      case Arch::kStablelm:
        s.norm = NormKind::kLayer;
        s.qk_norm = has_tensor(f, il, "attn_q_norm.weight");
        s.parallel_mlp = !has_tensor(f, il, "ffn_norm.weight");
        break;
    }
  }
  LUMEN_TRY(read_kv_sources(f, hp, specs));
  return specs;
}

Result<KvLayout> make_kv_layout(const HParams& hp, const std::vector<LayerSpec>& specs) {
  std::vector<LayerAttn> attn(specs.size());
  for (size_t il = 0; il < specs.size(); ++il) {
    attn[il].window = specs[il].attn == AttnKind::kSliding ? specs[il].window : 0;
    attn[il].kv_source_layer = specs[il].kv_source_layer;
  }
  if (!hp.is_mla()) return build_kv_layout(attn, hp.n_kv_head, hp.head_dim);
  // MLA: one row per token and layer, the normed latent and the roped shared key; the
  // attention reads its values from the same row (KvLayout::k_only).
  LUMEN_ASSIGN_OR_RETURN(KvLayout layout, build_kv_layout(attn, 1, hp.mla_row()));
  layout.k_only = true;
  return layout;
}

}  // namespace lumen::model
