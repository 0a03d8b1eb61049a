#include "model/hparams.h"

#include <cmath>
#include <numbers>

namespace lumen::model {

std::string_view arch_name(Arch arch) {
  switch (arch) {
    case Arch::kLlama: return "llama";
    case Arch::kQwen2: return "qwen2";
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

}  // namespace

Result<HParams> read_hparams(const gguf::ModelFile& f) {
  HParams hp;
  std::optional<std::string_view> arch = f.get_string("general.architecture");
  if (!arch) return error("model metadata: missing 'general.architecture'");
  if (*arch == "llama" || *arch == "mistral") {
    hp.arch = Arch::kLlama;
  } else if (*arch == "qwen2") {
    hp.arch = Arch::kQwen2;
    hp.has_qkv_bias = true;
  } else {
    return error("model metadata: architecture '" + std::string(*arch) +
                 "' is not supported (supported: llama, mistral, qwen2)");
  }
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
  if (auto rope_dims = f.get_int(a + ".rope.dimension_count"); rope_dims && *rope_dims != hp.head_dim)
    return error("model metadata: partial rotary embeddings (rope.dimension_count " +
                 std::to_string(*rope_dims) + " != head dim " + std::to_string(hp.head_dim) +
                 ") are not supported");
  hp.n_ctx_train = 2048;
  if (f.find(a + ".context_length")) {
    LUMEN_ASSIGN_OR_RETURN(hp.n_ctx_train, get_count(f, a + ".context_length", 1 << 24));
  }
  if (auto eps = f.get_float(a + ".attention.layer_norm_rms_epsilon")) {
    if (!(*eps > 0 && *eps < 1)) return error("model metadata: layer_norm_rms_epsilon out of range");
    hp.rms_eps = static_cast<float>(*eps);
  }
  if (auto theta = f.get_float(a + ".rope.freq_base")) {
    if (!(*theta > 1)) return error("model metadata: rope.freq_base must be > 1");
    hp.rope_theta = static_cast<float>(*theta);
  }
  if (hp.arch == Arch::kQwen2) hp.rope_layout = kernels::RopeLayout::kNeox;
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
    } else if (*type != "none") {
      return error("model metadata: rope scaling type '" + hp.rope_scaling_type + "' is not supported");
    }
  } else if (auto scale = f.get_float(a + ".rope.scale_linear")) {
    if (!(*scale >= 1.0)) return error("model metadata: rope.scale_linear must be >= 1");
    hp.rope_freq_scale = static_cast<float>(1.0 / *scale);
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
  const int32_t n = hp.head_dim / 2;
  std::vector<float> factors(n, 1.0f);
  const double low_wavelen = hp.rope_original_ctx / hp.rope_low_freq_factor;
  const double high_wavelen = hp.rope_original_ctx / hp.rope_high_freq_factor;
  for (int32_t i = 0; i < n; ++i) {
    const double freq = std::pow(static_cast<double>(hp.rope_theta), -2.0 * i / hp.head_dim);
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
