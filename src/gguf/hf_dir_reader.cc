// Hugging Face model directory -> ModelFile with GGUF keys and GGUF tensor names.
//
//   config.json                       -> general.architecture, <arch>.* hyper-parameters
//                                        (per-architecture keys: hf_config.cc; names and
//                                        value changes per architecture: hf_arch.h)
//   generation_config.json (optional) -> bos / eos ids (override config.json's, as HF does)
//   model.safetensors, or model.safetensors.index.json + shards -> tensors (mmap, zero-copy)
//   tokenizer.json, tokenizer_config.json (optional) -> raw texts for the tokenizer layer,
//   chat template (tokenizer_config.json's "chat_template", else chat_template.jinja)
//                                     -> tokenizer.chat_template
//
// RoPE layout. HF checkpoints store q_proj / k_proj in the "rotate half" (NeoX) layout:
// dimension i of a head pairs with i + head_dim/2. llama.cpp's converter permutes the q/k
// rows of llama, mistral and smollm3 into the interleaved layout (pairs (2i, 2i+1)) so that
// GGML's normal RoPE applies (the other architectures use NeoX RoPE in GGUF too). We keep
// the file zero-copy instead and set lumen.rope_layout = "neox": the model layer rotates
// (i, i + head_dim/2) pairs. The two are the same function of the weights:
//
//   HF row order per head:     [x0 x1 ... x(d/2-1) | y0 y1 ... y(d/2-1)]   rotate (xi, yi)
//   llama.cpp after permute:   [x0 y0 x1 y1 ... ]                          rotate (2i, 2i+1)
//
// Tensor shapes: safetensors stores [out, in] (outermost first); GGML order reverses it,
// so a [out, in] weight becomes ne = {in, out}. Bytes are unchanged.
#include <sys/stat.h>

#include <cmath>
#include <cstring>
#include <exception>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "base/fp16.h"
#include "gguf/gguf_util.h"
#include "gguf/hf_arch.h"
#include "gguf/hf_config.h"
#include "gguf/json_util.h"
#include "gguf/model_file.h"
#include "gguf/safetensors.h"

namespace lumen::gguf {
namespace {

using nlohmann::json;

Status fail(const std::string& dir, const std::string& msg) {
  return error("hf: " + msg + " (in '" + dir + "')");
}

bool is_regular_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// Reads and parses an optional JSON file: null json when the file does not exist.
Result<json> read_json_file(const std::string& path, const std::string& what, bool required) {
  if (!is_regular_file(path)) {
    if (required) return error("hf: missing " + what + " ('" + path + "')");
    return json();
  }
  LUMEN_ASSIGN_OR_RETURN(std::string text, read_text_file(path));
  LUMEN_ASSIGN_OR_RETURN(json value, parse_json(text, "hf: " + what));
  if (!value.is_object()) return error("hf: " + what + " is not a JSON object");
  return value;
}

// --- config.json -> GGUF hyper-parameter keys ---

Result<const HfArch*> detect_arch(const json& config, const std::string& dir) {
  LUMEN_ASSIGN_OR_RETURN(std::optional<std::string> model_type, json_string(config, "model_type", "config.json"));
  std::string arch_class;
  const auto archs = config.find("architectures");
  if (archs != config.end() && archs->is_array() && !archs->empty() && (*archs)[0].is_string())
    arch_class = (*archs)[0].get<std::string>();
  const HfArch* arch = model_type ? find_hf_arch_by_model_type(*model_type) : find_hf_arch_by_class(arch_class);
  if (!arch)
    return fail(dir, "config.json: model_type '" + quote(model_type.value_or("")) + "' / architecture '" +
                         quote(arch_class) + "' is not supported (" + std::string(hf_model_type_list()) + ")");
  return arch;
}

struct IntField {
  const char* json_key;
  const char* gguf_suffix;  // after "<arch>."
  int64_t max;
  bool required;
};

Status set_rope_scaling(const json& config, const std::string& arch, const std::string& dir, ModelFile* file) {
  // transformers < 5: "rope_scaling": {"rope_type" | "type": ..., "factor": ...}
  // transformers >= 5: "rope_parameters": {"rope_type": ..., "rope_theta": ..., ...}
  const json* scaling = nullptr;
  for (const char* key : {"rope_scaling", "rope_parameters"}) {
    const auto it = config.find(key);
    if (it == config.end() || it->is_null()) continue;
    if (!it->is_object()) return fail(dir, std::string("config.json: '") + key + "' must be an object");
    scaling = &*it;
    break;
  }
  if (!scaling) return Status();
  const std::string what = "config.json rope scaling";
  LUMEN_ASSIGN_OR_RETURN(std::optional<std::string> type, json_string(*scaling, "rope_type", what));
  if (!type) {
    LUMEN_ASSIGN_OR_RETURN(type, json_string(*scaling, "type", what));
  }
  if (!type || *type == "default") return Status();
  LUMEN_ASSIGN_OR_RETURN(std::optional<double> factor, json_number(*scaling, "factor", what));
  if (!factor || !(*factor > 0) || !std::isfinite(*factor))
    return fail(dir, what + ": rope type '" + quote(*type) + "' needs a positive 'factor'");
  const std::string p = arch + ".rope.scaling.";
  if (*type == "linear") {
    file->set_meta(p + "type", MetaValue::of_string("linear"));
    file->set_meta(p + "factor", MetaValue::of_f32(static_cast<float>(*factor)));
    return Status();
  }
  if (*type == "llama3") {
    LUMEN_ASSIGN_OR_RETURN(std::optional<double> low, json_number(*scaling, "low_freq_factor", what));
    LUMEN_ASSIGN_OR_RETURN(std::optional<double> high, json_number(*scaling, "high_freq_factor", what));
    LUMEN_ASSIGN_OR_RETURN(std::optional<int64_t> orig, json_int(*scaling, "original_max_position_embeddings", what));
    if (!orig || *orig <= 0 || *orig > (int64_t{1} << 24))
      return fail(dir, what + ": llama3 scaling needs a positive 'original_max_position_embeddings'");
    const double lo = low.value_or(1.0), hi = high.value_or(4.0);
    if (!(lo > 0) || !(hi > lo) || !std::isfinite(hi))
      return fail(dir, what + ": llama3 needs 0 < low_freq_factor < high_freq_factor");
    file->set_meta(p + "type", MetaValue::of_string("llama3"));
    file->set_meta(p + "factor", MetaValue::of_f32(static_cast<float>(*factor)));
    file->set_meta(p + "low_freq_factor", MetaValue::of_f32(static_cast<float>(lo)));
    file->set_meta(p + "high_freq_factor", MetaValue::of_f32(static_cast<float>(hi)));
    file->set_meta(p + "original_context_length", MetaValue::of_u32(static_cast<uint32_t>(*orig)));
    return Status();
  }
  return fail(dir, what + ": rope type '" + quote(*type) + "' is not supported (default, linear, llama3)");
}

Status set_hparams(const json& config, const HfArch& hf_arch, const std::string& dir, ModelFile* file) {
  const std::string arch(hf_arch.gguf_arch);
  const std::string what = "config.json";
  static constexpr IntField kFields[] = {
      {"hidden_size", "embedding_length", 1 << 17, true},
      {"intermediate_size", "feed_forward_length", 1 << 20, true},
      {"num_hidden_layers", "block_count", 1 << 12, true},
      {"num_attention_heads", "attention.head_count", 1 << 12, true},
      {"num_key_value_heads", "attention.head_count_kv", 1 << 12, false},
      {"max_position_embeddings", "context_length", 1 << 24, true},
      {"vocab_size", "vocab_size", 1 << 24, true},
  };
  std::map<std::string, int64_t> v;
  for (const IntField& f : kFields) {
    LUMEN_ASSIGN_OR_RETURN(std::optional<int64_t> x, json_int(config, f.json_key, what));
    if (!x) {
      if (f.required) return fail(dir, what + ": missing '" + f.json_key + "'");
      continue;
    }
    if (*x <= 0 || *x > f.max)
      return fail(dir, what + ": '" + f.json_key + "' = " + std::to_string(*x) + " is out of range [1, " +
                           std::to_string(f.max) + "]");
    v[f.json_key] = *x;
  }
  const int64_t n_heads = v["num_attention_heads"];
  if (!v.count("num_key_value_heads")) v["num_key_value_heads"] = n_heads;
  const int64_t n_kv_heads = v["num_key_value_heads"];
  if (n_heads % n_kv_heads != 0)
    return fail(dir, what + ": num_attention_heads " + std::to_string(n_heads) +
                         " is not a multiple of num_key_value_heads " + std::to_string(n_kv_heads));
  LUMEN_ASSIGN_OR_RETURN(std::optional<int64_t> head_dim, json_int(config, "head_dim", what));
  if (head_dim && (*head_dim <= 0 || *head_dim > (1 << 12)))
    return fail(dir, what + ": 'head_dim' = " + std::to_string(*head_dim) + " is out of range [1, 4096]");
  if (!head_dim && v["hidden_size"] % n_heads != 0)
    return fail(dir, what + ": hidden_size " + std::to_string(v["hidden_size"]) +
                         " is not a multiple of num_attention_heads " + std::to_string(n_heads));
  const int64_t rope_dims = head_dim.value_or(v["hidden_size"] / n_heads);
  if (rope_dims % 2 != 0) return fail(dir, what + ": head dimension " + std::to_string(rope_dims) + " is odd");

  LUMEN_ASSIGN_OR_RETURN(std::optional<double> eps, json_number(config, "rms_norm_eps", what));
  if (eps && (!(*eps > 0) || !std::isfinite(*eps)))
    return fail(dir, what + ": 'rms_norm_eps' must be positive");
  LUMEN_ASSIGN_OR_RETURN(std::optional<double> theta, json_number(config, "rope_theta", what));
  if (!theta) {
    const auto params = config.find("rope_parameters");
    if (params != config.end() && params->is_object()) {
      LUMEN_ASSIGN_OR_RETURN(theta, json_number(*params, "rope_theta", what + " rope_parameters"));
    }
  }
  if (theta && (!(*theta > 0) || !std::isfinite(*theta)))
    return fail(dir, what + ": 'rope_theta' must be positive");

  file->set_meta("general.architecture", MetaValue::of_string(arch));
  for (const IntField& f : kFields)
    file->set_meta(arch + "." + f.gguf_suffix, MetaValue::of_u32(static_cast<uint32_t>(v[f.json_key])));
  file->set_meta(arch + ".rope.dimension_count", MetaValue::of_u32(static_cast<uint32_t>(rope_dims)));
  if (head_dim) {
    file->set_meta(arch + ".attention.key_length", MetaValue::of_u32(static_cast<uint32_t>(*head_dim)));
    file->set_meta(arch + ".attention.value_length", MetaValue::of_u32(static_cast<uint32_t>(*head_dim)));
  }
  // HF's defaults when absent: LlamaConfig / Qwen2Config rms_norm_eps 1e-6, rope_theta 1e4;
  // Gemma's configs tie the output to the embeddings unless they say otherwise.
  file->set_meta(arch + ".attention.layer_norm_rms_epsilon", MetaValue::of_f32(static_cast<float>(eps.value_or(1e-6))));
  file->set_meta(arch + ".rope.freq_base", MetaValue::of_f32(static_cast<float>(theta.value_or(10000.0))));
  file->set_meta("lumen.rope_layout", MetaValue::of_string("neox"));  // see the file comment
  LUMEN_ASSIGN_OR_RETURN(std::optional<bool> tie, json_bool(config, "tie_word_embeddings", what));
  file->set_meta("lumen.tie_word_embeddings", MetaValue::of_bool(tie.value_or(hf_arch.norm_plus_one)));
  LUMEN_TRY(set_arch_hparams(config, hf_arch, dir, file));
  if (arch == "phi3") return Status();  // LongRoPE: hf_config.cc, once the tensors are in
  return set_rope_scaling(config, arch, dir, file);
}

// bos / eos / pad ids: config.json, overridden by generation_config.json. eos may be a list
// (Llama 3: [128001, 128008, 128009]): the first is tokenizer.ggml.eos_token_id, all of
// them go to lumen.eos_token_ids.
Status set_special_ids(const json& config, const json& gen_config, const std::string& dir, ModelFile* file) {
  struct Id { const char* json_key; const char* gguf_key; };
  static constexpr Id kIds[] = {{"bos_token_id", "tokenizer.ggml.bos_token_id"},
                                {"eos_token_id", "tokenizer.ggml.eos_token_id"},
                                {"pad_token_id", "tokenizer.ggml.padding_token_id"}};
  constexpr int64_t kMaxId = int64_t{1} << 31;
  for (const Id& id : kIds) {
    for (const auto& [src, what] : {std::pair<const json*, const char*>{&config, "config.json"},
                                    std::pair<const json*, const char*>{&gen_config, "generation_config.json"}}) {
      if (!src->is_object()) continue;
      const auto it = src->find(id.json_key);
      if (it == src->end() || it->is_null()) continue;
      std::vector<int64_t> ids;
      if (it->is_array()) {
        for (const json& e : *it) {
          if (!e.is_number_integer() || e.get<int64_t>() < 0 || e.get<int64_t>() >= kMaxId)
            return fail(dir, std::string(what) + ": '" + id.json_key + "' entries must be token ids");
          ids.push_back(e.get<int64_t>());
        }
        if (ids.empty()) continue;
      } else {
        if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() >= kMaxId)
          return fail(dir, std::string(what) + ": '" + id.json_key + "' must be a token id");
        ids.push_back(it->get<int64_t>());
      }
      file->set_meta(id.gguf_key, MetaValue::of_u32(static_cast<uint32_t>(ids[0])));
      if (std::string_view(id.json_key) == "eos_token_id")
        file->set_meta("lumen.eos_token_ids", MetaValue::of_int_array(ValueType::kI32, ids));
    }
  }
  return Status();
}

Status set_tokenizer(const std::string& dir, ModelFile* file) {
  std::string tokenizer_json, tokenizer_config_json;
  if (is_regular_file(dir + "/tokenizer.json")) {
    LUMEN_ASSIGN_OR_RETURN(tokenizer_json, read_text_file(dir + "/tokenizer.json"));
  }
  if (is_regular_file(dir + "/tokenizer_config.json")) {
    LUMEN_ASSIGN_OR_RETURN(tokenizer_config_json, read_text_file(dir + "/tokenizer_config.json"));
    LUMEN_ASSIGN_OR_RETURN(json config, parse_json(tokenizer_config_json, "hf: tokenizer_config.json"));
    const auto tmpl = config.is_object() ? config.find("chat_template") : config.end();
    if (tmpl != config.end() && tmpl->is_string()) {
      file->set_meta("tokenizer.chat_template", MetaValue::of_string(tmpl->get<std::string>()));
    } else if (tmpl != config.end() && tmpl->is_array()) {
      // [{"name": "default", "template": "..."}, {"name": "tool_use", ...}] (llama.cpp's keys)
      for (const json& t : *tmpl) {
        if (!t.is_object()) continue;
        const auto name = t.find("name");
        const auto text = t.find("template");
        if (name == t.end() || text == t.end() || !name->is_string() || !text->is_string()) continue;
        const std::string n = name->get<std::string>();
        file->set_meta(n == "default" ? "tokenizer.chat_template" : "tokenizer.chat_template." + n,
                       MetaValue::of_string(text->get<std::string>()));
      }
    }
  }
  if (!file->find("tokenizer.chat_template") && is_regular_file(dir + "/chat_template.jinja")) {
    LUMEN_ASSIGN_OR_RETURN(std::string tmpl, read_text_file(dir + "/chat_template.jinja"));
    file->set_meta("tokenizer.chat_template", MetaValue::of_string(std::move(tmpl)));
  }
  file->set_hf_tokenizer(std::move(tokenizer_json), std::move(tokenizer_config_json));
  return Status();
}

// --- tensors ---

// "model.layers.12.mlp.up_proj.weight" -> "blk.12.ffn_up.weight" by the architecture's
// table (hf_arch.h); nullopt for names without a GGUF equivalent (kept under their HF
// name). *layer_idx is set for layer tensors.
std::optional<std::string> gguf_tensor_name(std::string_view hf, const HfArch& arch, int64_t* layer_idx) {
  *layer_idx = -1;
  for (const HfTensorName& g : hf_global_names())
    if (hf == g.hf) return std::string(g.gguf);
  constexpr std::string_view kLayers = "model.layers.";
  if (!hf.starts_with(kLayers)) return std::nullopt;
  hf.remove_prefix(kLayers.size());
  size_t n_digits = 0;
  int64_t idx = 0;
  while (n_digits < hf.size() && n_digits < 7 && hf[n_digits] >= '0' && hf[n_digits] <= '9')
    idx = idx * 10 + (hf[n_digits++] - '0');
  if (n_digits == 0 || n_digits >= hf.size() || hf[n_digits] != '.') return std::nullopt;
  const std::string_view rest = hf.substr(n_digits + 1);
  for (const HfTensorName& m : arch.layer_names) {
    if (rest == m.hf) {
      *layer_idx = idx;
      return "blk." + std::to_string(idx) + "." + std::string(m.gguf);
    }
  }
  return std::nullopt;
}

// Gemma: GGUF norm weights are 1 + the HF weights (hf_arch.h); an f32 copy, as llama.cpp
// stores norms in f32 whatever the checkpoint's type.
Status add_one_to_norm(const std::string& dir, const std::string& name, TensorInfo* info, ModelFile* file) {
  const int64_t n = info->view.n_elements();
  float* out = reinterpret_cast<float*>(file->own_buffer(static_cast<size_t>(n) * sizeof(float)));
  const auto* in = info->view.data;
  for (int64_t i = 0; i < n; ++i) {
    float v = 0;
    switch (info->view.dtype) {
      case DType::kF32: std::memcpy(&v, in + 4 * i, 4); break;
      case DType::kF16: { uint16_t h; std::memcpy(&h, in + 2 * i, 2); v = fp16_to_f32(h); break; }
      case DType::kBF16: { uint16_t h; std::memcpy(&h, in + 2 * i, 2); v = bf16_to_f32(h); break; }
      default: return fail(dir, "norm tensor '" + name + "' has type " + std::string(dtype_name(info->view.dtype)) +
                                    " (expected f32, f16 or bf16)");
    }
    out[i] = v + 1.0f;
  }
  info->view.dtype = DType::kF32;
  info->view.n_bytes = static_cast<size_t>(n) * sizeof(float);
  info->view.data = reinterpret_cast<const std::byte*>(out);
  return Status();
}

class TensorCollector {
 public:
  TensorCollector(const std::string& dir, const HfArch& arch, int64_t n_layers, ModelFile* file)
      : dir_(dir), arch_(arch), n_layers_(n_layers), file_(file) {}

  // Adds every tensor of one parsed shard. `expected` (sharded models): the HF names the
  // index assigns to this shard, each of which must be present.
  Status add_shard(const SafetensorsFile& shard, const std::string& shard_name,
                   const std::vector<std::string>* expected);
  // Resolves "__metadata__" aliases and tied embeddings (see below).
  Status finish(bool tie_word_embeddings);

 private:
  Status add(const SafetensorsTensor& t, const std::string& shard_name);
  std::string gguf_name_of(std::string_view hf) const {
    int64_t layer = 0;
    return gguf_tensor_name(hf, arch_, &layer).value_or(std::string(hf));
  }

  const std::string& dir_;
  const HfArch& arch_;
  int64_t n_layers_;
  ModelFile* file_;
  std::map<std::string, std::string> aliases_;  // missing HF name -> stored HF name
};

Status TensorCollector::add(const SafetensorsTensor& t, const std::string& shard_name) {
  int64_t layer = -1;
  const std::string name = gguf_tensor_name(t.name, arch_, &layer).value_or(t.name);
  if (layer >= n_layers_)
    return fail(dir_, "tensor '" + quote(t.name) + "' in '" + shard_name + "' is for layer " + std::to_string(layer) +
                          " but num_hidden_layers is " + std::to_string(n_layers_));
  if (file_->find_tensor(name))
    return fail(dir_, "tensor '" + quote(t.name) + "' (" + quote(name) + ") appears twice");
  TensorInfo info;
  info.name = name;
  info.view.dtype = t.dtype;
  info.view.n_dims = t.shape.empty() ? 1 : static_cast<int>(t.shape.size());
  for (size_t d = 0; d < t.shape.size(); ++d) info.view.ne[d] = t.shape[t.shape.size() - 1 - d];
  info.view.n_bytes = t.data.size();
  info.view.data = t.data.data();
  // safetensors does not promise element alignment (the header length is arbitrary);
  // kernels may assume it, so copy a misaligned tensor once (real files are aligned).
  const size_t elem_bytes = dtype_info(t.dtype).block_bytes;
  if (reinterpret_cast<uintptr_t>(t.data.data()) % elem_bytes != 0) {
    std::byte* copy = file_->own_buffer(t.data.size());
    if (!t.data.empty()) std::memcpy(copy, t.data.data(), t.data.size());
    info.view.data = copy;
  }
  if (arch_.norm_plus_one && name.ends_with("norm.weight")) LUMEN_TRY(add_one_to_norm(dir_, t.name, &info, file_));
  file_->add_tensor(std::move(info));
  return Status();
}

Status TensorCollector::add_shard(const SafetensorsFile& shard, const std::string& shard_name,
                                  const std::vector<std::string>* expected) {
  std::set<std::string_view> present;
  for (const SafetensorsTensor& t : shard.tensors) {
    LUMEN_TRY(add(t, shard_name));
    present.insert(t.name);
  }
  if (expected) {
    for (const std::string& name : *expected)
      if (!present.count(name))
        return fail(dir_, "the index maps tensor '" + quote(name) + "' to '" + shard_name + "', which lacks it");
  }
  // torch / safetensors' save_model drops tensors that share storage with another and
  // records {dropped name: kept name} in "__metadata__" (TinyStories-656K:
  // "model.embed_tokens.weight": "lm_head.weight").
  for (const auto& [k, v] : shard.metadata) aliases_.emplace(k, v);
  return Status();
}

Status TensorCollector::finish(bool tie_word_embeddings) {
  auto add_alias = [&](const std::string& name, const TensorInfo& target) {
    TensorInfo alias = target;  // same view: the bytes are shared, not copied
    alias.name = name;
    file_->add_tensor(std::move(alias));
  };
  for (const auto& [dropped, kept] : aliases_) {
    const std::string dropped_name = gguf_name_of(dropped);
    const TensorInfo* target = file_->find_tensor(gguf_name_of(kept));
    if (!target || file_->find_tensor(dropped_name)) continue;  // not a tensor alias ("format": "pt")
    add_alias(dropped_name, *target);
  }
  if (!file_->find_tensor("token_embd.weight")) {
    const TensorInfo* output = file_->find_tensor("output.weight");
    if (!output || !tie_word_embeddings)
      return fail(dir_, "no token embedding: model.embed_tokens.weight is missing" +
                            std::string(output ? " and tie_word_embeddings is false" : ""));
    add_alias("token_embd.weight", *output);
  }
  // A missing output.weight means tied embeddings: the model layer uses token_embd.
  return Status();
}

// A shard name from the index must be a plain relative path inside the directory.
bool safe_relative_path(std::string_view p) {
  if (p.empty() || p.front() == '/' || p.find('\\') != std::string_view::npos || p.find('\0') != std::string_view::npos)
    return false;
  size_t start = 0;
  while (start <= p.size()) {
    size_t end = p.find('/', start);
    if (end == std::string_view::npos) end = p.size();
    const std::string_view part = p.substr(start, end - start);
    if (part.empty() || part == "." || part == "..") return false;
    start = end + 1;
  }
  return true;
}

Status load_tensors(const std::string& dir, const HfArch& arch, int64_t n_layers, bool tie, ModelFile* file) {
  TensorCollector collector(dir, arch, n_layers, file);
  const std::string single = dir + "/model.safetensors";
  const std::string index_path = dir + "/model.safetensors.index.json";
  if (is_regular_file(index_path)) {
    LUMEN_ASSIGN_OR_RETURN(json index, read_json_file(index_path, "model.safetensors.index.json", true));
    const auto wm = index.find("weight_map");
    if (wm == index.end() || !wm->is_object())
      return fail(dir, "model.safetensors.index.json: missing object 'weight_map'");
    std::map<std::string, std::vector<std::string>> by_shard;
    for (const auto& [name, shard] : wm->items()) {
      if (!shard.is_string())
        return fail(dir, "model.safetensors.index.json: weight_map['" + quote(name) + "'] is not a string");
      const std::string shard_name = shard.get<std::string>();
      if (!safe_relative_path(shard_name))
        return fail(dir, "model.safetensors.index.json: shard '" + quote(shard_name) + "' of tensor '" + quote(name) +
                             "' is not a plain relative path inside the model directory");
      by_shard[shard_name].push_back(name);
    }
    if (by_shard.empty()) return fail(dir, "model.safetensors.index.json: empty weight_map");
    for (const auto& [shard_name, names] : by_shard) {
      LUMEN_ASSIGN_OR_RETURN(MappedFile mapped, MappedFile::open(dir + "/" + shard_name));
      LUMEN_ASSIGN_OR_RETURN(SafetensorsFile shard, parse_safetensors(mapped.bytes(), mapped.path()));
      LUMEN_TRY(collector.add_shard(shard, shard_name, &names));
      file->keep_mapping(std::move(mapped));  // views stay valid: the mapping does not move
    }
  } else if (is_regular_file(single)) {
    LUMEN_ASSIGN_OR_RETURN(MappedFile mapped, MappedFile::open(single));
    LUMEN_ASSIGN_OR_RETURN(SafetensorsFile shard, parse_safetensors(mapped.bytes(), mapped.path()));
    LUMEN_TRY(collector.add_shard(shard, "model.safetensors", nullptr));
    file->keep_mapping(std::move(mapped));
  } else {
    return fail(dir, "no model.safetensors or model.safetensors.index.json" +
                         std::string(is_regular_file(dir + "/pytorch_model.bin")
                                         ? " (PyTorch .bin checkpoints are not supported: convert to safetensors)"
                                         : ""));
  }
  return collector.finish(tie);
}

Result<ModelFile> open_hf_dir_impl(const std::string& dir_in) {
  std::string dir = dir_in;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  LUMEN_ASSIGN_OR_RETURN(json config, read_json_file(dir + "/config.json", "config.json", true));
  LUMEN_ASSIGN_OR_RETURN(json gen_config, read_json_file(dir + "/generation_config.json", "generation_config.json", false));
  ModelFile file;
  file.set_container("safetensors", dir_in);
  LUMEN_ASSIGN_OR_RETURN(const HfArch* hf_arch, detect_arch(config, dir));
  const std::string arch(hf_arch->gguf_arch);
  LUMEN_TRY(set_hparams(config, *hf_arch, dir, &file));
  const std::string name = dir.substr(dir.find_last_of('/') + 1);
  if (!name.empty()) file.set_meta("general.name", MetaValue::of_string(name));
  LUMEN_TRY(set_special_ids(config, gen_config, dir, &file));
  LUMEN_TRY(set_tokenizer(dir, &file));
  const int64_t n_layers = file.get_int(arch + ".block_count").value_or(0);
  LUMEN_TRY(load_tensors(dir, *hf_arch, n_layers, file.get_bool("lumen.tie_word_embeddings").value_or(false), &file));
  LUMEN_TRY(finish_arch_tensors(config, *hf_arch, dir, &file));
  return file;
}

}  // namespace

Result<ModelFile> open_hf_dir(const std::string& dir) {
  try {
    return open_hf_dir_impl(dir);
  } catch (const std::exception& e) {  // nlohmann type errors, bad_alloc: never escape the layer
    return error("hf: cannot read '" + dir + "': " + quote(e.what()));
  }
}

}  // namespace lumen::gguf
