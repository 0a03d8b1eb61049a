#include "model/hparams.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace lumen::model {

std::string_view arch_name(Arch arch) {
  switch (arch) {
    case Arch::kLlama: return "llama";
    case Arch::kQwen2: return "qwen2";
    case Arch::kQwen3: return "qwen3";
    case Arch::kSmollm3: return "smollm3";
    case Arch::kGemma: return "gemma";
    case Arch::kGemma2: return "gemma2";
    case Arch::kGemma3: return "gemma3";
    case Arch::kPhi3: return "phi3";
    case Arch::kStarcoder2: return "starcoder2";
    case Arch::kStablelm: return "stablelm";
    case Arch::kQwen2Moe: return "qwen2moe";
    case Arch::kQwen3Moe: return "qwen3moe";
    case Arch::kOlmoe: return "olmoe";
    case Arch::kDeepseek2: return "deepseek2";
  }
  return "?";
}

namespace {

Result<int32_t> get_count(const gguf::ModelFile& f, const std::string& key, int64_t max_value) {
  std::optional<int64_t> v = f.get_int(key);
  if (!v) return error("model metadata: missing integer key '" + key + "'");
  if (*v <= 0 || *v > max_value)
    return error("model metadata: '" + key + "' = " + std::to_string(*v) + " is out of range [1, " +
                 std::to_string(max_value) + "]");
  return static_cast<int32_t>(*v);
}

struct ArchName {
  std::string_view key;  // general.architecture
  Arch arch;
};
constexpr ArchName kArchNames[] = {
    {"llama", Arch::kLlama},     {"mistral", Arch::kLlama},       {"qwen2", Arch::kQwen2},
    {"qwen3", Arch::kQwen3},     {"smollm3", Arch::kSmollm3},     {"gemma", Arch::kGemma},
    {"gemma2", Arch::kGemma2},   {"gemma3", Arch::kGemma3},       {"phi3", Arch::kPhi3},
    {"starcoder2", Arch::kStarcoder2}, {"stablelm", Arch::kStablelm},
    {"qwen2moe", Arch::kQwen2Moe},     {"qwen3moe", Arch::kQwen3Moe},     {"olmoe", Arch::kOlmoe},
    {"deepseek2", Arch::kDeepseek2},
};

Result<float> get_positive(const gguf::ModelFile& f, const std::string& key, float fallback, float max_value) {
  std::optional<double> v = f.get_float(key);
  if (!v) return fallback;
  if (!(*v > 0 && *v <= max_value))
    return error("model metadata: '" + key + "' = " + std::to_string(*v) + " is out of range (0, " +
                 std::to_string(max_value) + "]");
  return static_cast<float>(*v);
}

// DeepSeek-2's expert keys, as llama.cpp c392e5094 reads them: the expert size, the shared
// experts (one MLP of n_ff_exp * expert_shared_count), the dense leading layers, the router
// weight scale (required), their renormalisation (default off) and the gating function
// (1 softmax, the default for files without the key; 2 sigmoid, DeepSeek-V3).
Status read_deepseek2_experts(const gguf::ModelFile& f, const std::string& a, HParams& hp) {
  LUMEN_ASSIGN_OR_RETURN(hp.n_ff_exp, get_count(f, a + ".expert_feed_forward_length", 1 << 20));
  LUMEN_ASSIGN_OR_RETURN(const int32_t n_shared, get_count(f, a + ".expert_shared_count", 4096));
  hp.n_ff_shexp = hp.n_ff_exp * n_shared;
  const std::string lead_key = a + ".leading_dense_block_count";
  const std::optional<int64_t> lead = f.get_int(lead_key);
  if (!lead || *lead < 0 || *lead > hp.n_layer)
    return error("model metadata: '" + lead_key + "' must be an integer in [0, block_count]");
  hp.n_layer_dense_lead = static_cast<int32_t>(*lead);
  const std::string scale_key = a + ".expert_weights_scale";
  const std::optional<double> scale = f.get_float(scale_key);
  if (!scale || !(*scale > 0 && *scale < 1e6))
    return error("model metadata: '" + scale_key + "' must be a positive number");
  hp.expert_weights_scale = static_cast<float>(*scale);
  const std::string norm_key = a + ".expert_weights_norm";
  if (f.find(norm_key)) {
    const std::optional<int64_t> norm = f.get_int(norm_key);  // a bool reads as 0 / 1
    if (!norm) return error("model metadata: '" + norm_key + "' must be a bool");
    hp.expert_weights_norm = *norm != 0;
  }
  const std::string gating_key = a + ".expert_gating_func";
  if (f.find(gating_key)) {
    const std::optional<int64_t> g = f.get_int(gating_key);
    if (!g || *g < 0 || *g > 2)
      return error("model metadata: '" + gating_key + "' must be 0 or 1 (softmax) or 2 (sigmoid)");
    hp.expert_gating_sigmoid = *g == 2;
  }
  return Status();
}

// Multi-head latent attention (deepseek2): the latent rank, the query bottleneck (present
// when the file has blk.0.attn_q_a: llama.cpp c392e5094 decides it by the layer count, 27
// = V2-Lite without one), the value size (default: the key size).
Status read_mla(const gguf::ModelFile& f, const std::string& a, HParams& hp) {
  LUMEN_ASSIGN_OR_RETURN(hp.n_lora_kv, get_count(f, a + ".attention.kv_lora_rank", 1 << 16));
  if (f.find_tensor("blk.0.attn_q_a.weight")) {
    LUMEN_ASSIGN_OR_RETURN(hp.n_lora_q, get_count(f, a + ".attention.q_lora_rank", 1 << 16));
  }
  hp.head_dim_v = hp.head_dim;
  if (f.find(a + ".attention.value_length")) {
    LUMEN_ASSIGN_OR_RETURN(hp.head_dim_v, get_count(f, a + ".attention.value_length", 4096));
  }
  if (hp.rope_dims >= hp.head_dim)
    return error("model metadata: deepseek2 rope.dimension_count " + std::to_string(hp.rope_dims) +
                 " must be smaller than attention.key_length " + std::to_string(hp.head_dim));
  return Status();
}

// The experts of a mixture-of-experts file: `<arch>.expert_count` (required for the MoE
// families, optional for llama: Mixtral), `expert_used_count`, and the inner sizes of an
// expert and of the shared expert. Whether the top-k router weights are renormalised is the
// architecture's (as llama.cpp builds it): Mixtral and Qwen3-MoE yes, Qwen2-MoE and OLMoE no.
Status read_experts(const gguf::ModelFile& f, const std::string& a, HParams& hp) {
  const bool moe_arch = hp.arch == Arch::kQwen2Moe || hp.arch == Arch::kQwen3Moe || hp.arch == Arch::kOlmoe ||
                        hp.arch == Arch::kDeepseek2;
  const std::string count_key = a + ".expert_count";
  const std::optional<int64_t> count = f.get_int(count_key);
  if (!count && f.find(count_key)) return error("model metadata: '" + count_key + "' must be an integer");
  if (!moe_arch && (!count || *count == 0)) return Status();  // a dense model
  if (!moe_arch && hp.arch != Arch::kLlama)
    return error("model metadata: '" + count_key + "': architecture '" + a + "' has no mixture-of-experts form");
  LUMEN_ASSIGN_OR_RETURN(hp.n_expert, get_count(f, count_key, 4096));
  LUMEN_ASSIGN_OR_RETURN(hp.n_expert_used, get_count(f, a + ".expert_used_count", hp.n_expert));
  // llama.cpp's defaults when the key is absent: n_ff / n_expert_used for the Qwen MoEs
  // (whose feed_forward_length is a dense size), n_ff for the others.
  const bool qwen = hp.arch == Arch::kQwen2Moe || hp.arch == Arch::kQwen3Moe;
  hp.n_ff_exp = qwen ? std::max(1, hp.n_ff / hp.n_expert_used) : hp.n_ff;
  if (f.find(a + ".expert_feed_forward_length")) {
    LUMEN_ASSIGN_OR_RETURN(hp.n_ff_exp, get_count(f, a + ".expert_feed_forward_length", 1 << 20));
  }
  if (hp.arch == Arch::kQwen2Moe) {  // llama.cpp: the shared expert's size defaults to n_ff
    hp.n_ff_shexp = hp.n_ff;
    if (f.find(a + ".expert_shared_feed_forward_length")) {
      LUMEN_ASSIGN_OR_RETURN(hp.n_ff_shexp, get_count(f, a + ".expert_shared_feed_forward_length", 1 << 20));
    }
  }
  hp.expert_weights_norm = hp.arch == Arch::kLlama || hp.arch == Arch::kQwen3Moe;
  if (hp.arch == Arch::kDeepseek2) LUMEN_TRY(read_deepseek2_experts(f, a, hp));
  return Status();
}

}  // namespace

Result<HParams> read_hparams(const gguf::ModelFile& f) {
  HParams hp;
  std::optional<std::string_view> arch = f.get_string("general.architecture");
  if (!arch) return error("model metadata: missing 'general.architecture'");
  const ArchName* found = nullptr;
  std::string supported;
  for (const ArchName& n : kArchNames) {
    if (n.key == *arch) found = &n;
    supported += (supported.empty() ? "" : ", ") + std::string(n.key);
  }
  if (!found)
    return error("model metadata: architecture '" + std::string(*arch) + "' is not supported (supported: " +
                 supported + ")");
  hp.arch = found->arch;
  hp.arch_key = std::string(*arch);
  hp.has_qkv_bias = hp.arch == Arch::kQwen2 || hp.arch == Arch::kQwen2Moe;
  const std::string a(*arch);
  constexpr int64_t kMaxDim = 1 << 20;
  LUMEN_ASSIGN_OR_RETURN(hp.n_embd, get_count(f, a + ".embedding_length", kMaxDim));
  LUMEN_ASSIGN_OR_RETURN(hp.n_layer, get_count(f, a + ".block_count", 4096));
  LUMEN_ASSIGN_OR_RETURN(hp.n_head, get_count(f, a + ".attention.head_count", 4096));
  LUMEN_ASSIGN_OR_RETURN(hp.n_ff, get_count(f, a + ".feed_forward_length", kMaxDim));
  hp.n_kv_head = hp.n_head;
  if (f.find(a + ".attention.head_count_kv")) {
    LUMEN_ASSIGN_OR_RETURN(hp.n_kv_head, get_count(f, a + ".attention.head_count_kv", 4096));
  }
  if (hp.n_head % hp.n_kv_head != 0)
    return error("model metadata: head_count " + std::to_string(hp.n_head) +
                 " is not a multiple of head_count_kv " + std::to_string(hp.n_kv_head));
  if (f.find(a + ".attention.key_length")) {
    LUMEN_ASSIGN_OR_RETURN(hp.head_dim, get_count(f, a + ".attention.key_length", 4096));
  } else {
    if (hp.n_embd % hp.n_head != 0)
      return error("model metadata: embedding_length " + std::to_string(hp.n_embd) +
                   " is not a multiple of head_count " + std::to_string(hp.n_head));
    hp.head_dim = hp.n_embd / hp.n_head;
  }
  if (hp.head_dim % 2 != 0)
    return error("model metadata: head dimension " + std::to_string(hp.head_dim) + " must be even");
  hp.rope_dims = hp.head_dim;
  if (auto pooling = f.get_int(a + ".pooling_type")) {
    if (*pooling < 0 || *pooling > 4)
      return error("model metadata: " + a + ".pooling_type " + std::to_string(*pooling) +
                   " is not one of 0 (none), 1 (mean), 2 (cls), 3 (last), 4 (rank)");
    hp.pooling_type = static_cast<int32_t>(*pooling);
  }
  if (auto rope_dims = f.get_int(a + ".rope.dimension_count")) {
    if (*rope_dims <= 0 || *rope_dims > hp.head_dim || *rope_dims % 2 != 0)
      return error("model metadata: rope.dimension_count " + std::to_string(*rope_dims) +
                   " must be even and in [2, head dim " + std::to_string(hp.head_dim) + "]");
    hp.rope_dims = static_cast<int32_t>(*rope_dims);
  }
  hp.n_ctx_train = 2048;
  if (f.find(a + ".context_length")) {
    LUMEN_ASSIGN_OR_RETURN(hp.n_ctx_train, get_count(f, a + ".context_length", 1 << 24));
  }
  LUMEN_TRY(read_experts(f, a, hp));
  if (hp.arch == Arch::kDeepseek2) LUMEN_TRY(read_mla(f, a, hp));
  if (auto eps = f.get_float(a + ".attention.layer_norm_rms_epsilon")) {
    if (!(*eps > 0 && *eps < 1)) return error("model metadata: layer_norm_rms_epsilon out of range");
    hp.rms_eps = static_cast<float>(*eps);
  }
  if (auto eps = f.get_float(a + ".attention.layer_norm_epsilon")) {
    if (!(*eps > 0 && *eps < 1)) return error("model metadata: layer_norm_epsilon out of range");
    hp.norm_eps = static_cast<float>(*eps);
  }
  const bool gemma = hp.arch == Arch::kGemma || hp.arch == Arch::kGemma2 || hp.arch == Arch::kGemma3;
  if (gemma) hp.embd_scale = std::sqrt(static_cast<float>(hp.n_embd));  // sqrtf, as llama.cpp
  if (hp.arch == Arch::kGemma2) {  // llama.cpp's defaults when the keys are absent
    LUMEN_ASSIGN_OR_RETURN(hp.final_softcap, get_positive(f, a + ".final_logit_softcapping", 30.0f, 1e6f));
  } else if (hp.arch == Arch::kGemma3) {
    LUMEN_ASSIGN_OR_RETURN(hp.final_softcap, get_positive(f, a + ".final_logit_softcapping", 0.0f, 1e6f));
  }
  if (auto theta = f.get_float(a + ".rope.freq_base")) {
    if (!(*theta > 1)) return error("model metadata: rope.freq_base must be > 1");
    hp.rope_theta = static_cast<float>(*theta);
  }
  // NeoX-layout RoPE (pairs (i, i + d/2)) for every family but llama and smollm3, whose
  // converters permute q/k rows into the interleaved layout.
  if (hp.arch != Arch::kLlama && hp.arch != Arch::kSmollm3 && hp.arch != Arch::kDeepseek2)
    hp.rope_layout = kernels::RopeLayout::kNeox;
  if (auto layout = f.get_string("lumen.rope_layout"); layout && *layout == "neox")
    hp.rope_layout = kernels::RopeLayout::kNeox;

  if (auto type = f.get_string(a + ".rope.scaling.type")) {
    hp.rope_scaling_type = std::string(*type);
    const double factor = f.get_float(a + ".rope.scaling.factor").value_or(1.0);
    if (!(factor >= 1.0 && factor < 1e6))
      return error("model metadata: rope.scaling.factor out of range");
    hp.rope_scaling_factor = static_cast<float>(factor);
    if (*type == "linear") {
      hp.rope_freq_scale = static_cast<float>(1.0 / factor);
    } else if (*type == "llama3") {
      hp.rope_low_freq_factor = static_cast<float>(f.get_float(a + ".rope.scaling.low_freq_factor").value_or(1.0));
      hp.rope_high_freq_factor = static_cast<float>(f.get_float(a + ".rope.scaling.high_freq_factor").value_or(4.0));
      hp.rope_original_ctx = static_cast<int32_t>(f.get_int(a + ".rope.scaling.original_context_length").value_or(8192));
      if (!(hp.rope_high_freq_factor > hp.rope_low_freq_factor) || hp.rope_original_ctx <= 0)
        return error("model metadata: invalid llama3 rope scaling parameters");
    } else if (*type == "yarn") {  // ggml's YaRN: LayerSpec::rope (layer_spec.cc)
      hp.rope_freq_scale = static_cast<float>(1.0 / factor);
      hp.rope_original_ctx = hp.n_ctx_train;
      if (f.find(a + ".rope.scaling.original_context_length")) {
        LUMEN_ASSIGN_OR_RETURN(hp.rope_original_ctx, get_count(f, a + ".rope.scaling.original_context_length", 1 << 24));
      }
      const double log_mul = f.get_float(a + ".rope.scaling.yarn_log_multiplier").value_or(0.0);
      if (!(log_mul >= 0 && log_mul < 100)) return error("model metadata: rope.scaling.yarn_log_multiplier out of range");
      hp.rope_yarn_log_mul = static_cast<float>(log_mul);
    } else if (*type == "longrope" || *type == "su") {
      hp.rope_freq_scale = 1.0f;  // Phi-3: per-dimension factors (tensors) + attn_factor
    } else if (*type != "none") {
      return error("model metadata: rope scaling type '" + hp.rope_scaling_type + "' is not supported");
    }
  } else if (auto scale = f.get_float(a + ".rope.scale_linear")) {
    if (!(*scale >= 1.0)) return error("model metadata: rope.scale_linear must be >= 1");
    hp.rope_freq_scale = static_cast<float>(1.0 / *scale);
  }

  LUMEN_ASSIGN_OR_RETURN(hp.rope_attn_factor, get_positive(f, a + ".rope.scaling.attn_factor", 1.0f, 100.0f));
  if (hp.arch == Arch::kPhi3) {  // the context the short factors were made for
    hp.rope_original_ctx = hp.n_ctx_train;
    if (f.find(a + ".rope.scaling.original_context_length")) {
      LUMEN_ASSIGN_OR_RETURN(hp.rope_original_ctx, get_count(f, a + ".rope.scaling.original_context_length", 1 << 24));
    }
  }

  const gguf::TensorInfo* embd = f.find_tensor("token_embd.weight");
  if (!embd) return error("model: tensor 'token_embd.weight' is missing");
  if (embd->view.n_dims != 2 || embd->view.ne[0] != hp.n_embd)
    return error("model: tensor 'token_embd.weight' has shape " + embd->view.shape_string() +
                 ", expected [" + std::to_string(hp.n_embd) + ", n_vocab]");
  if (embd->view.ne[1] <= 0 || embd->view.ne[1] > (1 << 24))
    return error("model: vocabulary size " + std::to_string(embd->view.ne[1]) + " out of range");
  hp.n_vocab = static_cast<int32_t>(embd->view.ne[1]);
  hp.tied_output = f.find_tensor("output.weight") == nullptr;
  return hp;
}

std::vector<float> llama3_rope_freq_factors(const HParams& hp) {
  const int32_t n = hp.rope_dims / 2;
  std::vector<float> factors(n, 1.0f);
  const double low_wavelen = hp.rope_original_ctx / hp.rope_low_freq_factor;
  const double high_wavelen = hp.rope_original_ctx / hp.rope_high_freq_factor;
  for (int32_t i = 0; i < n; ++i) {
    const double freq = std::pow(static_cast<double>(hp.rope_theta), -2.0 * i / hp.rope_dims);
    const double wavelen = 2.0 * std::numbers::pi / freq;
    if (wavelen < high_wavelen) {
      factors[i] = 1.0f;  // high frequencies: unchanged
    } else if (wavelen > low_wavelen) {
      factors[i] = hp.rope_scaling_factor;  // low frequencies: scaled down by `factor`
    } else {  // in between: interpolate smoothly
      const double smooth = (hp.rope_original_ctx / wavelen - hp.rope_low_freq_factor) /
                            (hp.rope_high_freq_factor - hp.rope_low_freq_factor);
      const double new_freq = (1 - smooth) * freq / hp.rope_scaling_factor + smooth * freq;
      factors[i] = static_cast<float>(freq / new_freq);
    }
  }
  return factors;
}

}  // namespace lumen::model
