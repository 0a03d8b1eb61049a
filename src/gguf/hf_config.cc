#include "gguf/hf_config.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "gguf/gguf_util.h"
#include "gguf/json_util.h"

namespace lumen::gguf {
namespace {

using nlohmann::json;

Status fail(const std::string& dir, const std::string& msg) {
  return error("hf: config.json: " + msg + " (in '" + dir + "')");
}

int64_t meta_int(const ModelFile& f, const std::string& key) { return f.get_int(key).value_or(0); }

int64_t head_dim_of(const ModelFile& f, const std::string& a) {
  if (auto k = f.get_int(a + ".attention.key_length")) return *k;
  const int64_t heads = meta_int(f, a + ".attention.head_count");
  return heads > 0 ? meta_int(f, a + ".embedding_length") / heads : 0;
}

Status set_u32(const json& config, const char* key, const std::string& gguf_key, int64_t max_value,
               const std::string& dir, ModelFile* file) {
  LUMEN_ASSIGN_OR_RETURN(std::optional<int64_t> v, json_int(config, key, "config.json"));
  if (!v) return Status();
  if (*v < 0 || *v > max_value)
    return fail(dir, std::string("'") + key + "' = " + std::to_string(*v) + " is out of range");
  file->set_meta(gguf_key, MetaValue::of_u32(static_cast<uint32_t>(*v)));
  return Status();
}

Status set_f32(const json& config, const char* key, const std::string& gguf_key, const std::string& dir,
               ModelFile* file) {
  LUMEN_ASSIGN_OR_RETURN(std::optional<double> v, json_number(config, key, "config.json"));
  if (!v) return Status();
  if (!std::isfinite(*v) || *v < 0) return fail(dir, std::string("'") + key + "' must be a non-negative number");
  file->set_meta(gguf_key, MetaValue::of_f32(static_cast<float>(*v)));
  return Status();
}

// LayerNorm epsilon under whichever name the config uses.
Status set_layer_norm_eps(const json& config, const std::string& a, const std::string& dir, ModelFile* file) {
  for (const char* key : {"layer_norm_eps", "norm_epsilon", "layer_norm_epsilon"}) {
    LUMEN_ASSIGN_OR_RETURN(std::optional<double> eps, json_number(config, key, "config.json"));
    if (!eps) continue;
    if (!(*eps > 0) || !std::isfinite(*eps)) return fail(dir, std::string("'") + key + "' must be positive");
    file->set_meta(a + ".attention.layer_norm_epsilon", MetaValue::of_f32(static_cast<float>(*eps)));
    return Status();
  }
  file->set_meta(a + ".attention.layer_norm_epsilon", MetaValue::of_f32(1e-5f));
  return Status();
}

// partial_rotary_factor -> rope.dimension_count = factor * head_dim (StableLM, Phi-4-mini).
Status set_partial_rotary(const json& config, const std::string& a, const std::string& dir, ModelFile* file) {
  LUMEN_ASSIGN_OR_RETURN(std::optional<double> factor, json_number(config, "partial_rotary_factor", "config.json"));
  if (!factor) return Status();
  if (!(*factor > 0 && *factor <= 1)) return fail(dir, "'partial_rotary_factor' must be in (0, 1]");
  const int64_t n_rot = static_cast<int64_t>(*factor * static_cast<double>(head_dim_of(*file, a)));
  if (n_rot <= 0 || n_rot % 2 != 0)
    return fail(dir, "'partial_rotary_factor' gives " + std::to_string(n_rot) + " rotary dims (must be even, > 0)");
  file->set_meta(a + ".rope.dimension_count", MetaValue::of_u32(static_cast<uint32_t>(n_rot)));
  return Status();
}

// Gemma 2 / 3 scale queries by query_pre_attn_scalar^-0.5. A GGUF has no key for it:
// llama.cpp uses head_dim, except hidden / heads for the 27B models (46 layers for Gemma 2,
// 62 for Gemma 3). Accept the configs that rule reproduces.
Status check_query_scalar(const json& config, const std::string& a, int64_t n_layer_27b, const std::string& dir,
                          const ModelFile& file) {
  LUMEN_ASSIGN_OR_RETURN(std::optional<double> scalar, json_number(config, "query_pre_attn_scalar", "config.json"));
  if (!scalar) return Status();
  const bool is_27b = meta_int(file, a + ".block_count") == n_layer_27b;
  const int64_t heads = meta_int(file, a + ".attention.head_count");
  const double implied =
      is_27b ? static_cast<double>(meta_int(file, a + ".embedding_length") / heads) : static_cast<double>(head_dim_of(file, a));
  if (*scalar != implied)
    return fail(dir, "query_pre_attn_scalar " + std::to_string(*scalar) + " differs from the " +
                         std::to_string(implied) + " a GGUF of this shape implies (not supported)");
  return Status();
}

Status set_sliding_window(const json& config, const std::string& a, const std::string& dir, ModelFile* file,
                          bool required) {
  LUMEN_ASSIGN_OR_RETURN(std::optional<int64_t> window, json_int(config, "sliding_window", "config.json"));
  if (!window) {
    if (required) return fail(dir, "missing 'sliding_window'");
    file->set_meta(a + ".attention.sliding_window", MetaValue::of_u32(0));
    return Status();
  }
  if (*window <= 0 || *window > (int64_t{1} << 24)) return fail(dir, "'sliding_window' is out of range");
  file->set_meta(a + ".attention.sliding_window", MetaValue::of_u32(static_cast<uint32_t>(*window)));
  return Status();
}

// Which layers slide, as `<arch>.attention.sliding_window_pattern`: HF's layer_types (one
// "sliding_attention" / "full_attention" per layer) become per-layer flags, an integer
// sliding_window_pattern a period (layer il slides iff il % period < period - 1). Absent,
// the model's default holds (Gemma 3: 6, five local to one global).
Status set_sliding_pattern(const json& config, const std::string& a, const std::string& dir, ModelFile* file) {
  const auto types = config.find("layer_types");
  if (types != config.end() && !types->is_null()) {
    const int64_t n_layer = meta_int(*file, a + ".block_count");
    if (!types->is_array() || static_cast<int64_t>(types->size()) != n_layer)
      return fail(dir, "'layer_types' must list one attention type per layer (" + std::to_string(n_layer) + ")");
    std::vector<int64_t> flags;
    for (size_t il = 0; il < types->size(); ++il) {
      const json& t = (*types)[il];
      if (t != "sliding_attention" && t != "full_attention")
        return fail(dir, "layer_types[" + std::to_string(il) + "] must be \"sliding_attention\" or \"full_attention\"");
      flags.push_back(t == "sliding_attention" ? 1 : 0);
    }
    file->set_meta(a + ".attention.sliding_window_pattern", MetaValue::of_int_array(ValueType::kBool, std::move(flags)));
    return Status();
  }
  return set_u32(config, "sliding_window_pattern", a + ".attention.sliding_window_pattern", 4096, dir, file);
}

Status set_gemma2(const json& config, const std::string& dir, ModelFile* file) {
  const std::string a = "gemma2";
  LUMEN_TRY(set_sliding_window(config, a, dir, file, true));
  LUMEN_TRY(set_sliding_pattern(config, a, dir, file));
  // Gemma2Config defaults: attention soft-cap 50, final 30.
  file->set_meta(a + ".attn_logit_softcapping", MetaValue::of_f32(50.0f));
  file->set_meta(a + ".final_logit_softcapping", MetaValue::of_f32(30.0f));
  LUMEN_TRY(set_f32(config, "attn_logit_softcapping", a + ".attn_logit_softcapping", dir, file));
  LUMEN_TRY(set_f32(config, "final_logit_softcapping", a + ".final_logit_softcapping", dir, file));
  return check_query_scalar(config, a, 46, dir, *file);
}

// Gemma 3 text: local layers (window, RoPE base rope_local_base_freq) and global layers
// (the file's base and scaling), in the pattern the config states.
Status set_gemma3(const json& config, const std::string& dir, ModelFile* file) {
  const std::string a = "gemma3";
  LUMEN_TRY(set_sliding_window(config, a, dir, file, false));
  LUMEN_TRY(set_sliding_pattern(config, a, dir, file));
  file->set_meta(a + ".rope.freq_base_swa", MetaValue::of_f32(10000.0f));
  LUMEN_TRY(set_f32(config, "rope_local_base_freq", a + ".rope.freq_base_swa", dir, file));
  LUMEN_ASSIGN_OR_RETURN(std::optional<double> final_cap, json_number(config, "final_logit_softcapping", "config.json"));
  if (final_cap && *final_cap > 0) file->set_meta(a + ".final_logit_softcapping", MetaValue::of_f32(static_cast<float>(*final_cap)));
  LUMEN_ASSIGN_OR_RETURN(std::optional<double> attn_cap, json_number(config, "attn_logit_softcapping", "config.json"));
  if (attn_cap && *attn_cap > 0) return fail(dir, "gemma3 with attn_logit_softcapping is not supported");
  return check_query_scalar(config, a, 62, dir, *file);
}

// Phi-3: the window (null = none: Phi-4), original context for LongRoPE.
Status set_phi3(const json& config, const std::string& dir, ModelFile* file) {
  const std::string a = "phi3";
  LUMEN_TRY(set_sliding_window(config, a, dir, file, false));
  file->set_meta(a + ".rope.scaling.original_context_length",
                 MetaValue::of_u32(static_cast<uint32_t>(meta_int(*file, a + ".context_length"))));
  LUMEN_TRY(set_u32(config, "original_max_position_embeddings", a + ".rope.scaling.original_context_length",
                    int64_t{1} << 24, dir, file));
  return set_partial_rotary(config, a, dir, file);
}

Status set_stablelm(const json& config, const std::string& dir, ModelFile* file) {
  const std::string a = "stablelm";
  LUMEN_TRY(set_layer_norm_eps(config, a, dir, file));
  LUMEN_ASSIGN_OR_RETURN(std::optional<bool> qk_norm, json_bool(config, "qk_layernorm", "config.json"));
  if (qk_norm.value_or(false)) return fail(dir, "stablelm with qk_layernorm is not supported");
  LUMEN_ASSIGN_OR_RETURN(std::optional<bool> parallel, json_bool(config, "use_parallel_residual", "config.json"));
  if (parallel.value_or(false)) return fail(dir, "stablelm with use_parallel_residual is not supported");
  return set_partial_rotary(config, a, dir, file);
}

// SmolLM3: llama.cpp leaves RoPE out of every 4th layer (3, 7, ...); the config lists it.
Status check_smollm3(const json& config, const std::string& dir) {
  const auto layers = config.find("no_rope_layers");
  if (layers == config.end() || !layers->is_array()) return Status();
  for (size_t il = 0; il < layers->size(); ++il) {
    const json& v = (*layers)[il];
    if (!v.is_number_integer()) return fail(dir, "no_rope_layers must hold 0 / 1");
    if ((v.get<int64_t>() != 0) != ((il + 1) % 4 != 0))
      return fail(dir, "no_rope_layers[" + std::to_string(il) + "] breaks the every-4th-layer NoPE pattern (not supported)");
  }
  return Status();
}

}  // namespace

Status set_arch_hparams(const json& config, const HfArch& arch, const std::string& dir, ModelFile* file) {
  if (arch.model_type == "mistral") {
    // Mistral is llama, with a sliding window on every layer when the window is shorter
    // than the context (Mistral 7B v0.1); a window that covers the context is full attention.
    LUMEN_ASSIGN_OR_RETURN(std::optional<int64_t> window, json_int(config, "sliding_window", "config.json"));
    LUMEN_ASSIGN_OR_RETURN(std::optional<int64_t> ctx, json_int(config, "max_position_embeddings", "config.json"));
    if (window && (!ctx || *window < *ctx)) return set_sliding_window(config, std::string(arch.gguf_arch), dir, file, true);
    return Status();
  }
  if (arch.model_type == "qwen2") {
    LUMEN_ASSIGN_OR_RETURN(std::optional<bool> sliding, json_bool(config, "use_sliding_window", "config.json"));
    if (sliding.value_or(false)) return fail(dir, "qwen2 with use_sliding_window is not supported (only full attention)");
    return Status();
  }
  if (arch.gguf_arch == "gemma2") return set_gemma2(config, dir, file);
  if (arch.gguf_arch == "gemma3") return set_gemma3(config, dir, file);
  if (arch.gguf_arch == "phi3") return set_phi3(config, dir, file);
  if (arch.gguf_arch == "stablelm") return set_stablelm(config, dir, file);
  if (arch.gguf_arch == "starcoder2") return set_layer_norm_eps(config, "starcoder2", dir, file);
  if (arch.gguf_arch == "smollm3") return check_smollm3(config, dir);
  return Status();
}

Status finish_arch_tensors(const json& config, const HfArch& arch, const std::string& dir, ModelFile* file) {
  if (arch.gguf_arch != "phi3") return Status();
  const auto scaling = config.find("rope_scaling");
  if (scaling == config.end() || scaling->is_null()) return Status();
  if (!scaling->is_object()) return fail(dir, "'rope_scaling' must be an object");
  LUMEN_ASSIGN_OR_RETURN(std::optional<std::string> type, json_string(*scaling, "type", "config.json rope_scaling"));
  if (!type) {
    LUMEN_ASSIGN_OR_RETURN(type, json_string(*scaling, "rope_type", "config.json rope_scaling"));
  }
  if (!type || (*type != "longrope" && *type != "su"))
    return fail(dir, "phi3 rope_scaling type '" + quote(type.value_or("")) + "' is not supported (longrope)");
  const std::string a = "phi3";
  const int64_t n_rot = meta_int(*file, a + ".rope.dimension_count");
  for (const auto& [key, tensor] : {std::pair{"long_factor", "rope_factors_long.weight"},
                                    std::pair{"short_factor", "rope_factors_short.weight"}}) {
    const auto list = scaling->find(key);
    if (list == scaling->end() || !list->is_array() || static_cast<int64_t>(list->size()) != n_rot / 2)
      return fail(dir, std::string("rope_scaling.") + key + " must be a list of " + std::to_string(n_rot / 2) + " numbers");
    std::vector<float> values;
    for (const json& v : *list) {
      if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() <= 0)
        return fail(dir, std::string("rope_scaling.") + key + " holds a value that is not a positive number");
      values.push_back(static_cast<float>(v.get<double>()));
    }
    TensorInfo info;
    info.name = tensor;
    info.view.dtype = DType::kF32;
    info.view.n_dims = 1;
    info.view.ne[0] = static_cast<int64_t>(values.size());
    info.view.n_bytes = values.size() * sizeof(float);
    std::byte* buf = file->own_buffer(info.view.n_bytes);
    std::memcpy(buf, values.data(), info.view.n_bytes);
    info.view.data = buf;
    file->add_tensor(std::move(info));
  }
  // As convert_hf_to_gguf.py: attention factor sqrt(1 + ln(s) / ln(original)), s = context / original.
  const double orig = static_cast<double>(meta_int(*file, a + ".rope.scaling.original_context_length"));
  const double scale = static_cast<double>(meta_int(*file, a + ".context_length")) / orig;
  const double attn_factor = scale > 1.0 ? std::sqrt(1.0 + std::log(scale) / std::log(orig)) : 1.0;
  file->set_meta(a + ".rope.scaling.attn_factor", MetaValue::of_f32(static_cast<float>(attn_factor)));
  return Status();
}

}  // namespace lumen::gguf
