// Hugging Face checkpoints <-> GGUF, per architecture: the tensor names and the few value
// changes llama.cpp's convert_hf_to_gguf.py makes. One table, read both ways: the HF
// directory reader (hf_dir_reader.cc) maps HF -> GGUF, `lumen synth --hf` maps GGUF -> HF.
//
//   names      model.embed_tokens.weight -> token_embd.weight, model.norm.* -> output_norm.*,
//              lm_head.weight -> output.weight; per layer "model.layers.N.<hf>" ->
//              "blk.N.<gguf>" by the architecture's table below
//   norms      Gemma stores RMSNorm weights as w and multiplies by (1 + w); llama.cpp's
//              converter adds the 1 to every "*norm.weight", so GGUF holds 1 + w
//   q / k      llama.cpp permutes q_proj / k_proj rows of RoPE-"norm" architectures (llama,
//              mistral, smollm3) into interleaved pairs; lumen reads HF files unpermuted
//              with the NeoX ("rotate half") layout instead (hf_dir_reader.cc)
//   phi3       LongRoPE long_factor / short_factor lists become rope_factors_long/short
//              tensors and an attention factor key
#pragma once

#include <span>
#include <string_view>

namespace lumen::gguf {

struct HfTensorName {
  std::string_view hf;    // "self_attn.q_proj.weight" (per layer) or "model.norm.weight"
  std::string_view gguf;  // "attn_q.weight" (per layer) or "output_norm.weight"
};

struct HfArch {
  std::string_view gguf_arch;   // general.architecture
  std::string_view model_type;  // config.json "model_type"
  std::string_view hf_class;    // config.json "architectures"[0]
  std::span<const HfTensorName> layer_names;
  bool norm_plus_one = false;   // GGUF norm weight = HF norm weight + 1 (Gemma)
  bool qk_permuted = false;     // llama.cpp's GGUF has q/k rows interleaved (RoPE "norm")
};

// The global (non-layer) tensor names, shared by every architecture.
std::span<const HfTensorName> hf_global_names();

// nullptr when unknown. Several model types may map to one GGUF architecture (mistral ->
// llama, gemma3_text -> gemma3).
const HfArch* find_hf_arch_by_model_type(std::string_view model_type);
const HfArch* find_hf_arch_by_class(std::string_view hf_class);
// The entry used to write an HF directory for a GGUF architecture.
const HfArch* find_hf_arch_for_gguf(std::string_view gguf_arch);
// "llama, mistral, qwen2, ..." (the model types the reader accepts).
std::string_view hf_model_type_list();

}  // namespace lumen::gguf
