#include "roofline/shape.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <optional>

#include "model/hparams.h"
#include "model/layer_spec.h"
#include "tensor/dtype.h"

namespace lumen::roofline {

Status validate_shape(const ModelShape& s) {
  auto field = [](const char* name, int64_t v, int64_t max_value) -> Status {
    if (v <= 0 || v > max_value)
      return error(std::string("model shape: ") + name + " = " + std::to_string(v) +
                   " is out of range [1, " + std::to_string(max_value) + "]");
    return Status();
  };
  constexpr int64_t kMaxDim = int64_t{1} << 20;
  LUMEN_TRY(field("hidden", s.n_embd, kMaxDim));
  LUMEN_TRY(field("layers", s.n_layer, 4096));
  LUMEN_TRY(field("heads", s.n_head, 4096));
  LUMEN_TRY(field("kv_heads", s.n_kv_head, 4096));
  LUMEN_TRY(field("head_dim", s.head_dim, 4096));
  LUMEN_TRY(field("ffn", s.n_ff, kMaxDim));
  LUMEN_TRY(field("vocab", s.n_vocab, int64_t{1} << 24));
  if (s.n_head % s.n_kv_head != 0)
    return error("model shape: heads = " + std::to_string(s.n_head) +
                 " is not a multiple of kv_heads = " + std::to_string(s.n_kv_head));
  if (s.n_expert < 0 || s.n_expert > 4096 ||
      (s.n_expert > 0 && (s.n_expert_used < 1 || s.n_expert_used > s.n_expert || s.n_ff_exp < 1 ||
                          s.n_ff_exp > kMaxDim || s.n_ff_shexp < 0 || s.n_ff_shexp > kMaxDim)))
    return error("model shape: experts = " + std::to_string(s.n_expert) + ", used = " +
                 std::to_string(s.n_expert_used) + ", expert ffn = " + std::to_string(s.n_ff_exp) +
                 ": need 1 <= used <= experts <= 4096 and a positive expert ffn");
  if (s.kv_lora_rank < 0 || s.kv_lora_rank > kMaxDim || s.q_lora_rank < 0 || s.q_lora_rank > kMaxDim ||
      (s.kv_lora_rank > 0 && (s.rope_dims <= 0 || s.rope_dims >= s.head_dim || s.head_dim_v <= 0)) ||
      s.n_dense_lead < 0 || s.n_dense_lead > s.n_layer)
    return error("model shape: latent attention kv_lora_rank = " + std::to_string(s.kv_lora_rank) + ", rope dims = " +
                 std::to_string(s.rope_dims) + ", v head dim = " + std::to_string(s.head_dim_v) +
                 ", dense leading layers = " + std::to_string(s.n_dense_lead) + " do not fit together");
  if (s.n_local_layers < 0 || s.n_local_layers > s.n_layer)
    return error("model shape: local (sliding-window) layers = " + std::to_string(s.n_local_layers) +
                 " is out of range [0, layers]");
  if (s.n_local_layers > 0 && (s.window <= 0 || s.window > (int64_t{1} << 30)))
    return error("model shape: window = " + std::to_string(s.window) + " must be positive for local layers");
  return Status();
}

namespace {

// Sum over i = 1..n of min(d + i, w): the keys n successive queries after d cached tokens
// see in a window of w.
double window_pairs(double d, double n, double w) {
  const double full_until = std::clamp(w - d, 0.0, n);  // queries with d + i <= w
  return full_until * d + full_until * (full_until + 1) / 2 + (n - full_until) * w;
}

}  // namespace

double kv_elems_at(const ModelShape& s, double n_ctx) {
  const double per_layer = static_cast<double>(s.kv_elems_per_layer());
  const double local = s.n_local_layers > 0 ? std::min(n_ctx, static_cast<double>(s.window)) : 0.0;
  return per_layer * (static_cast<double>(s.n_layer - s.n_local_layers) * n_ctx +
                      static_cast<double>(s.n_local_layers) * local);
}

double attn_macs_at(const ModelShape& s, double n_ctx) {
  const double per_layer = static_cast<double>(attn_macs_per_pair(s) / s.n_layer);
  const double local = s.n_local_layers > 0 ? std::min(n_ctx, static_cast<double>(s.window)) : 0.0;
  return per_layer * (static_cast<double>(s.n_layer - s.n_local_layers) * n_ctx +
                      static_cast<double>(s.n_local_layers) * local);
}

double attn_macs_prefill(const ModelShape& s, double n_depth, double n_new) {
  const double per_layer = static_cast<double>(attn_macs_per_pair(s) / s.n_layer);
  const double full = n_new * n_depth + n_new * (n_new + 1) / 2;
  const double local = s.n_local_layers > 0 ? window_pairs(n_depth, n_new, static_cast<double>(s.window)) : 0.0;
  return per_layer * (static_cast<double>(s.n_layer - s.n_local_layers) * full +
                      static_cast<double>(s.n_local_layers) * local);
}

LayerParams layer_params(const ModelShape& s) {
  LayerParams p;
  p.attn_q = s.n_embd * s.n_q_dim();
  p.attn_k = s.n_embd * s.n_kv_dim();
  p.attn_v = s.n_embd * s.n_kv_dim();
  p.attn_qkv_bias = s.has_qkv_bias ? s.n_q_dim() + 2 * s.n_kv_dim() : 0;
  p.attn_o = s.n_q_dim() * s.n_embd;
  if (s.is_mla()) {
    p.attn_q = s.q_lora_rank > 0 ? s.n_embd * s.q_lora_rank + s.q_lora_rank * s.n_q_dim() : s.n_embd * s.n_q_dim();
    p.attn_k = s.n_embd * (s.kv_lora_rank + s.rope_dims);
    p.attn_v = s.kv_lora_rank * s.n_head * (s.head_dim - s.rope_dims + s.head_dim_v);
    p.attn_o = s.n_head * s.head_dim_v * s.n_embd;
  }
  if (s.is_moe()) {
    const int64_t expert = s.n_embd * s.n_ff_exp;  // one of an expert's three matrices
    p.mlp_gate = s.n_expert * expert + s.n_embd * s.n_ff_shexp;
    p.mlp_up = p.mlp_gate;
    p.mlp_down = p.mlp_gate;
    p.mlp_router = s.n_embd * s.n_expert + (s.n_ff_shexp > 0 ? s.n_embd : 0);
    p.mlp_inactive = (s.n_expert - s.n_expert_used) * 3 * expert;
    return p;
  }
  p.mlp_gate = s.gated_mlp ? s.n_embd * s.n_ff : 0;
  p.mlp_up = s.n_embd * s.n_ff;
  p.mlp_down = s.n_ff * s.n_embd;
  return p;
}

double expert_share_touched(int64_t n_expert, int64_t n_expert_used, double n_tokens) {
  if (n_expert <= 0) return 1.0;
  return 1.0 - std::pow(1.0 - static_cast<double>(n_expert_used) / static_cast<double>(n_expert), n_tokens);
}

ParamCounts count_params(const ModelShape& s) {
  const LayerParams layer = layer_params(s);
  ParamCounts c;
  c.attention = s.n_layer * layer.attention();
  c.mlp = s.n_layer * layer.mlp();
  c.mlp_inactive = s.n_layer * layer.mlp_inactive;
  if (s.is_moe() && s.n_dense_lead > 0) {  // DeepSeek-2: the leading layers' MLPs are dense
    ModelShape dense = s;
    dense.n_expert = 0;
    const LayerParams d = layer_params(dense);
    c.mlp += s.n_dense_lead * (d.mlp() - layer.mlp());
    c.mlp_inactive -= s.n_dense_lead * layer.mlp_inactive;
  }
  c.decoder = c.attention + c.mlp;
  c.lm_head = s.n_vocab * s.n_embd;
  c.embedding = s.n_vocab * s.n_embd;
  c.norms = (2 * s.n_layer + 1) * s.n_embd;
  c.total = c.decoder + c.norms + c.embedding + (s.tied_output ? 0 : c.lm_head);
  return c;
}

// ---- presets ----

std::span<const ModelPreset> model_presets() { return model::known_shapes(); }

std::string model_preset_names() {
  std::string names;
  for (const ModelPreset& p : model_presets()) {
    if (!names.empty()) names += ", ";
    names += p.name;
  }
  return names;
}

Result<ModelShape> model_preset(std::string_view name, std::string_view flag) {
  for (const ModelPreset& p : model_presets()) {
    if (name != p.name) continue;
    ModelShape s;
    s.name = p.name;
    s.n_embd = p.n_embd;
    s.n_layer = p.n_layer;
    s.n_head = p.n_head;
    s.n_kv_head = p.n_kv_head;
    s.head_dim = p.head_dim;
    s.n_ff = p.n_ff;
    s.n_vocab = p.n_vocab;
    s.tied_output = p.tied_output;
    s.has_qkv_bias = p.has_qkv_bias;
    s.gated_mlp = true;
    if (const model::KnownMoe* m = model::find_known_moe(p.name)) {
      s.n_expert = m->n_expert;
      s.n_expert_used = m->n_expert_used;
      s.n_ff_exp = m->n_ff_exp;
      s.n_ff_shexp = m->n_ff_shexp;
    }
    if (const model::KnownMla* m = model::find_known_mla(p.name)) {
      s.kv_lora_rank = m->n_lora_kv;
      s.q_lora_rank = m->n_lora_q;
      s.rope_dims = m->rope_dims;
      s.head_dim_v = m->head_dim_v;
      s.n_dense_lead = m->n_dense_lead;
    }
    if (p.sliding_window > 0) {  // layer il slides iff il % period < period - 1 (or every layer)
      for (int32_t il = 0; il < p.n_layer; ++il)
        s.n_local_layers += p.window_period == 1 || il % p.window_period < p.window_period - 1;
      s.window = p.sliding_window;
    }
    return s;
  }
  return error(std::string(flag) + ": unknown model preset '" + std::string(name) +
               "' (known: " + model_preset_names() + ")");
}

// ---- model files ----

namespace {

std::string file_model_name(const gguf::ModelFile& file) {
  if (auto name = file.get_string("general.name"); name && !name->empty()) return std::string(*name);
  return file.path();
}

// Generic GGUF keys, for architectures model::read_hparams does not know.
Result<ModelShape> shape_from_generic_keys(const gguf::ModelFile& file) {
  std::optional<std::string_view> arch = file.get_string("general.architecture");
  if (!arch) return error("model metadata: missing 'general.architecture'");
  const std::string a(*arch);
  auto get = [&](const std::string& key) -> Result<int64_t> {
    std::optional<int64_t> v = file.get_int(key);
    if (!v) return error("model metadata: missing integer key '" + key + "'");
    return *v;
  };
  ModelShape s;
  s.name = file_model_name(file);
  LUMEN_ASSIGN_OR_RETURN(s.n_embd, get(a + ".embedding_length"));
  LUMEN_ASSIGN_OR_RETURN(s.n_layer, get(a + ".block_count"));
  LUMEN_ASSIGN_OR_RETURN(s.n_head, get(a + ".attention.head_count"));
  LUMEN_ASSIGN_OR_RETURN(s.n_ff, get(a + ".feed_forward_length"));
  s.n_kv_head = file.get_int(a + ".attention.head_count_kv").value_or(s.n_head);
  if (s.n_head <= 0) return error("model metadata: '" + a + ".attention.head_count' must be positive");
  s.head_dim = file.get_int(a + ".attention.key_length").value_or(s.n_embd / s.n_head);
  const gguf::TensorInfo* embd = file.find_tensor("token_embd.weight");
  if (!embd) return error("model: tensor 'token_embd.weight' is missing");
  s.n_vocab = embd->view.ne[1];
  s.tied_output = file.find_tensor("output.weight") == nullptr;
  s.has_qkv_bias = file.find_tensor("blk.0.attn_q.bias") != nullptr;
  s.gated_mlp = file.find_tensor("blk.0.ffn_gate.weight") != nullptr;
  if (const gguf::TensorInfo* exps = file.find_tensor("blk.0.ffn_up_exps.weight"); exps && exps->view.n_dims == 3) {
    s.n_expert = exps->view.ne[2];
    s.n_ff_exp = exps->view.ne[1];
    s.n_expert_used = file.get_int(a + ".expert_used_count").value_or(0);
    s.gated_mlp = true;
  }
  LUMEN_TRY(validate_shape(s));
  return s;
}

// "blk.12.attn_q.weight" -> "attn_q.weight"; nullopt when not a per-layer tensor.
std::optional<std::string_view> layer_tensor_suffix(std::string_view name) {
  constexpr std::string_view kPrefix = "blk.";
  if (!name.starts_with(kPrefix)) return std::nullopt;
  name.remove_prefix(kPrefix.size());
  const size_t dot = name.find('.');
  if (dot == 0 || dot == std::string_view::npos) return std::nullopt;
  int layer_idx = 0;
  auto [ptr, ec] = std::from_chars(name.data(), name.data() + dot, layer_idx);
  if (ec != std::errc() || ptr != name.data() + dot) return std::nullopt;
  return name.substr(dot + 1);
}

bool is_norm(std::string_view suffix) {
  const size_t dot = suffix.find('.');
  return suffix.substr(0, dot).ends_with("norm");
}

bool is_attention(std::string_view suffix) { return suffix.starts_with("attn_"); }
bool is_mlp(std::string_view suffix) { return suffix.starts_with("ffn_"); }

}  // namespace

Result<ModelShape> shape_from_model_file(const gguf::ModelFile& file) {
  Result<model::HParams> hp = model::read_hparams(file);
  if (!hp.ok()) {
    // Not a Llama/Qwen2 file lumen can run: still plan from the generic keys, but keep
    // the original message when those are missing too.
    Result<ModelShape> generic = shape_from_generic_keys(file);
    if (!generic.ok()) return error(hp.message());
    return generic;
  }
  ModelShape s;
  s.name = file_model_name(file);
  s.n_embd = hp->n_embd;
  s.n_layer = hp->n_layer;
  s.n_head = hp->n_head;
  s.n_kv_head = hp->n_kv_head;
  s.head_dim = hp->head_dim;
  s.n_ff = hp->n_ff;
  s.n_vocab = hp->n_vocab;
  s.tied_output = hp->tied_output;
  s.has_qkv_bias = hp->has_qkv_bias;
  s.n_expert = hp->n_expert;
  s.n_expert_used = hp->n_expert_used;
  s.n_ff_exp = hp->n_ff_exp;
  s.n_ff_shexp = hp->n_ff_shexp;
  s.n_dense_lead = hp->n_layer_dense_lead;
  if (hp->is_mla()) {
    s.kv_lora_rank = hp->n_lora_kv;
    s.q_lora_rank = hp->n_lora_q;
    s.rope_dims = hp->rope_dims;
    s.head_dim_v = hp->head_dim_v;
  }
  // Local layers from the layer specs (every sliding layer of the known architectures has
  // the same window).
  LUMEN_ASSIGN_OR_RETURN(const std::vector<model::LayerSpec> specs, model::read_layer_specs(file, *hp));
  s.gated_mlp = specs.empty() || specs[0].mlp != model::MlpKind::kGelu;  // Phi-3's is fused in ffn_up
  for (const model::LayerSpec& spec : specs) {
    if (spec.attn != model::AttnKind::kSliding) continue;
    ++s.n_local_layers;
    s.window = std::max<int64_t>(s.window, spec.window);
  }
  LUMEN_TRY(validate_shape(s));
  return s;
}

double FileWeights::bits_per_weight() const {
  const int64_t n = params.read_per_step();
  return n > 0 ? 8.0 * static_cast<double>(read_per_step_bytes()) / static_cast<double>(n) : 0.0;
}

Result<FileWeights> count_file_weights(const gguf::ModelFile& file) {
  FileWeights w;
  ParamCounts& c = w.params;
  const gguf::TensorInfo* embd = file.find_tensor("token_embd.weight");
  if (!embd) return error("model: tensor 'token_embd.weight' is missing");
  const gguf::TensorInfo* output = file.find_tensor("output.weight");
  const gguf::TensorInfo* lm_head = output ? output : embd;
  // A mixture of experts: a token reads n_expert_used / n_expert of the ffn_*_exps tensors.
  if (std::optional<std::string_view> arch = file.get_string("general.architecture")) {
    const std::optional<int64_t> n = file.get_int(std::string(*arch) + ".expert_count");
    const std::optional<int64_t> used = file.get_int(std::string(*arch) + ".expert_used_count");
    if (n && used && *n > 0 && *used > 0 && *used <= *n) w.expert_share = static_cast<double>(*used) / static_cast<double>(*n);
  }
  for (const gguf::TensorInfo& t : file.tensors()) {
    const int64_t n = t.view.n_elements();
    c.total += n;
    const bool quantized = dtype_info(t.view.dtype).is_quantized;
    if (std::optional<std::string_view> suffix = layer_tensor_suffix(t.name)) {
      if (is_norm(*suffix)) {
        c.norms += n;
        w.norm_bytes += t.view.n_bytes;
        continue;
      }
      if (is_attention(*suffix)) c.attention += n;
      else if (is_mlp(*suffix)) c.mlp += n;
      else c.decoder_other += n;
      w.decoder_bytes += t.view.n_bytes;
      const bool expert = suffix->ends_with("_exps.weight");
      if (expert) {
        w.expert_bytes += t.view.n_bytes;
        c.mlp_inactive += static_cast<int64_t>(static_cast<double>(n) * (1.0 - w.expert_share));
      }
      const int64_t macs = expert ? static_cast<int64_t>(static_cast<double>(n) * w.expert_share) : n;
      if (t.view.n_dims >= 2) (quantized ? w.decoder_macs_int8 : w.decoder_macs_float) += macs;
    } else if (t.name.ends_with("norm.weight") || t.name.ends_with("norm.bias")) {
      c.norms += n;
      w.norm_bytes += t.view.n_bytes;
    }
  }
  c.decoder = c.attention + c.mlp + c.decoder_other;
  c.embedding = embd->view.n_elements();
  c.lm_head = lm_head->view.n_elements();
  w.embedding_bytes = embd->view.n_bytes;
  w.embedding_row_bytes = embd->view.ne[1] > 0 ? embd->view.n_bytes / embd->view.n_rows() : 0;
  w.lm_head_bytes = lm_head->view.n_bytes;
  w.lm_head_int8 = dtype_info(lm_head->view.dtype).is_quantized;
  if (c.decoder == 0) return error("model: no per-layer tensors ('blk.N.*') found");
  return w;
}

}  // namespace lumen::roofline
