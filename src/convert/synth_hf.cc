// `lumen synth --format hf`: the same weights as synth_model() writes to a GGUF, as a
// Hugging Face directory (config.json + model.safetensors, f32), in the layout llama.cpp's
// convert_hf_to_gguf.py turns back into that GGUF (hf_arch.h says what differs):
//
//   names        GGUF -> HF by the architecture's table (gguf/hf_arch.cc)
//   Gemma norms  HF = GGUF - 1 (the converter adds 1)
//   q / k rows   llama, mistral, smollm3: the converter's permute undone. For head h with
//                head dim d, GGUF row h*d + 2j + s holds HF row h*d + s*d/2 + j (j < d/2,
//                s in {0, 1}): HF's "rotate half" pairs (j, j + d/2), GGUF's (2j, 2j + 1)
//   LongRoPE     rope_factors_long / short tensors -> config.json rope_scaling lists
//   llama3 RoPE  rope_freqs.weight -> config.json rope_scaling (factor, low/high, original)
//
// No tokenizer files are written: the test vocabulary lives in GGUF form only, and the
// goldens give token ids.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "convert/synth.h"
#include "convert/synth_arch.h"
#include "gguf/hf_arch.h"

namespace lumen::convert {
namespace {

using nlohmann::ordered_json;

// "blk.3.attn_q.weight" -> "model.layers.3.self_attn.q_proj.weight"; "" when the tensor
// has no HF form (its values go to config.json).
std::string hf_name(const gguf::HfArch& arch, const std::string& gguf_name) {
  for (const gguf::HfTensorName& g : gguf::hf_global_names())
    if (gguf_name == g.gguf) return std::string(g.hf);
  if (!gguf_name.starts_with("blk.")) return "";
  const size_t dot = gguf_name.find('.', 4);
  const std::string layer = gguf_name.substr(4, dot - 4), rest = gguf_name.substr(dot + 1);
  for (const gguf::HfTensorName& m : arch.layer_names)
    if (rest == m.gguf) return "model.layers." + layer + "." + std::string(m.hf);
  return "";
}

// The HF config.json of a synth config (see the architecture notes in hf_config.cc).
ordered_json hf_config(const SynthConfig& c, const gguf::HfArch& arch, const std::vector<SynthTensorPlan>& plan) {
  ordered_json j;
  j["architectures"] = {std::string(arch.hf_class)};
  j["model_type"] = std::string(arch.model_type);
  j["hidden_size"] = c.n_embd;
  j["intermediate_size"] = c.n_ff;
  j["num_hidden_layers"] = c.n_layer;
  j["num_attention_heads"] = c.n_head;
  j["num_key_value_heads"] = c.n_kv_head;
  j["head_dim"] = c.head_dim();
  j["max_position_embeddings"] = c.n_ctx;
  j["vocab_size"] = c.n_vocab;
  j["rope_theta"] = c.rope_theta;
  j["tie_word_embeddings"] = c.tied;
  j["torch_dtype"] = "float32";
  j["bos_token_id"] = 1;  // the test vocabulary's <s> and </s>
  j["eos_token_id"] = 2;
  const std::string& a = c.arch;
  const bool gemma = a == "gemma" || a == "gemma2" || a == "gemma3";
  if (a == "stablelm") {
    j["layer_norm_eps"] = c.norm_eps;
    j["partial_rotary_factor"] = static_cast<double>(c.rot_dims()) / static_cast<double>(c.head_dim());
    j["use_qkv_bias"] = c.qkv_bias;
    j["hidden_act"] = "silu";
  } else if (a == "starcoder2") {
    j["norm_epsilon"] = c.norm_eps;
    j["use_bias"] = true;
    j["hidden_act"] = "gelu_pytorch_tanh";
  } else {
    j["rms_norm_eps"] = c.norm_eps;
    j[gemma ? "hidden_activation" : "hidden_act"] = gemma ? "gelu_pytorch_tanh" : "silu";
  }
  if (a == "gemma2" || a == "gemma3") {
    j["query_pre_attn_scalar"] = c.head_dim();
    // No window (gemma3 only; synth refuses it for gemma2): null, as the reader takes a
    // missing window, where 0 would be out of range.
    j["sliding_window"] = c.sliding_window > 0 ? ordered_json(c.sliding_window) : ordered_json(nullptr);
  }
  if (a == "gemma2") {
    j["attn_logit_softcapping"] = c.attn_softcap;
    j["final_logit_softcapping"] = c.final_softcap;
  }
  if (a == "gemma3") {
    j["sliding_window_pattern"] = 6;
    j["rope_local_base_freq"] = 10000.0;
    j["final_logit_softcapping"] = nullptr;
    j["attn_logit_softcapping"] = nullptr;
    j["rope_scaling"] = c.rope_linear_factor > 0 ? ordered_json{{"rope_type", "linear"}, {"factor", c.rope_linear_factor}}
                                                 : ordered_json(nullptr);
  }
  if (a == "qwen2") j["use_sliding_window"] = false;
  if (a == "llama" && c.sliding_window > 0) {
    j["architectures"] = {"MistralForCausalLM"};
    j["model_type"] = "mistral";
    j["sliding_window"] = c.sliding_window;
  }
  if (a == "phi3") {
    j["sliding_window"] = c.sliding_window > 0 ? ordered_json(c.sliding_window) : ordered_json(nullptr);
    j["original_max_position_embeddings"] = c.longrope_original_ctx > 0 ? c.longrope_original_ctx : c.n_ctx;
    if (c.longrope_original_ctx > 0) {
      ordered_json scaling{{"type", "longrope"}};
      for (const SynthTensorPlan& t : plan) {
        if (t.name == "rope_factors_long.weight") scaling["long_factor"] = t.values;
        if (t.name == "rope_factors_short.weight") scaling["short_factor"] = t.values;
      }
      j["rope_scaling"] = scaling;
    }
  }
  if (a == "smollm3") {
    std::vector<int> use_rope;
    for (int64_t il = 0; il < c.n_layer; ++il) use_rope.push_back((il + 1) % 4 != 0 ? 1 : 0);
    j["no_rope_layers"] = use_rope;
    j["no_rope_layer_interval"] = 4;
  }
  if (c.rope_scaling_factor > 0) {
    j["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", c.rope_scaling_factor},
                         {"low_freq_factor", c.rope_low_freq_factor},
                         {"high_freq_factor", c.rope_high_freq_factor},
                         {"original_max_position_embeddings", c.rope_original_ctx}};
  }
  return j;
}

struct HfTensor {
  std::string name;
  std::vector<int64_t> shape;  // safetensors order: outermost first
  std::vector<float> values;
};

// The tensor's values in HF form (see the file comment).
HfTensor to_hf(const SynthConfig& c, const gguf::HfArch& arch, const SynthTensorPlan& t, std::string name) {
  HfTensor out{std::move(name), std::vector<int64_t>(t.ne.rbegin(), t.ne.rend()), {}};
  const int64_t n_per_row = t.ne[0];
  const int64_t n_rows = t.ne.size() > 1 ? t.ne[1] : 1;
  out.values.resize(static_cast<size_t>(n_per_row * n_rows));
  std::vector<float> row(static_cast<size_t>(n_per_row));
  const bool is_q = t.name.ends_with(".attn_q.weight"), is_k = t.name.ends_with(".attn_k.weight");
  const int64_t d = c.head_dim();
  for (int64_t r = 0; r < n_rows; ++r) {
    synth_make_row(c, t, r, row.data());
    if (arch.norm_plus_one && t.name.ends_with("norm.weight"))
      for (float& v : row) v -= 1.0f;
    int64_t hf_row = r;
    if (arch.qk_permuted && (is_q || is_k)) {
      const int64_t h = r / d, j = (r % d) / 2, s = r % 2;
      hf_row = h * d + s * (d / 2) + j;
    }
    std::memcpy(out.values.data() + hf_row * n_per_row, row.data(), row.size() * sizeof(float));
  }
  return out;
}

Status write_safetensors(const std::string& path, const std::vector<HfTensor>& tensors) {
  ordered_json header;
  header["__metadata__"] = {{"format", "pt"}};
  uint64_t offset = 0;
  for (const HfTensor& t : tensors) {
    const uint64_t n_bytes = t.values.size() * sizeof(float);
    header[t.name] = {{"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {offset, offset + n_bytes}}};
    offset += n_bytes;
  }
  std::string text = header.dump();
  while ((text.size() + 8) % 8 != 0) text.push_back(' ');  // tensor data 8-byte aligned
  std::ofstream out(path, std::ios::binary);
  if (!out) return error("cannot write '" + path + "'");
  const uint64_t header_len = text.size();
  unsigned char len_le[8];
  for (int i = 0; i < 8; ++i) len_le[i] = static_cast<unsigned char>(header_len >> (8 * i));
  out.write(reinterpret_cast<const char*>(len_le), 8);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  for (const HfTensor& t : tensors)
    out.write(reinterpret_cast<const char*>(t.values.data()), static_cast<std::streamsize>(t.values.size() * sizeof(float)));
  if (!out.good()) return error("writing '" + path + "' failed");
  return Status();
}

}  // namespace

Status synth_model_hf(const SynthConfig& c, const std::string& dir, SynthReport* report) {
  LUMEN_TRY(validate_synth_config(c));
  const gguf::HfArch* arch = gguf::find_hf_arch_for_gguf(c.arch);
  if (!arch) return error("arch '" + c.arch + "' has no Hugging Face form");
  if (!c.rules.mix || c.rules.mix->base != DType::kF32) return error("--format hf writes f32 only (--type f32)");
  if (!c.kv_source_layers.empty()) return error("cross-layer KV sharing has no Hugging Face form here");
  if (c.n_expert > 0) return error("mixture-of-experts files have no Hugging Face form here");
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return error("cannot create '" + dir + "': " + ec.message());
  const std::vector<SynthTensorPlan> plan = synth_arch_tensors(c);
  std::vector<HfTensor> tensors;
  SynthReport local;
  if (!report) report = &local;
  *report = SynthReport();
  for (const SynthTensorPlan& t : plan) {
    const std::string name = hf_name(*arch, t.name);
    if (name.empty()) {
      if (t.init != SynthInit::kGiven) return error("tensor '" + t.name + "' has no Hugging Face name for " + c.arch);
      continue;  // rope factors: config.json
    }
    tensors.push_back(to_hf(c, *arch, t, name));
    report->n_params += static_cast<int64_t>(tensors.back().values.size());
  }
  LUMEN_TRY(write_safetensors(dir + "/model.safetensors", tensors));
  std::ofstream cfg(dir + "/config.json");
  cfg << hf_config(c, *arch, plan).dump(2) << "\n";
  if (!cfg.good()) return error("writing '" + dir + "/config.json' failed");
  report->n_tensors = static_cast<int64_t>(tensors.size());
  report->n_tensors_by_type = {{DType::kF32, report->n_tensors}};
  report->file_bytes = std::filesystem::file_size(dir + "/model.safetensors", ec);
  report->tokenizer = "none (HF directory without tokenizer files)";
  return Status();
}

}  // namespace lumen::convert
