// Architecture-specific parts of a Hugging Face config.json -> GGUF keys (and the tensors
// llama.cpp's converter derives from config values), for the HF directory reader. Private to
// the gguf layer.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "gguf/hf_arch.h"
#include "gguf/model_file.h"

namespace lumen::gguf {

// After the common keys (hidden size, heads, RoPE base, ...) are set: the keys only some
// architectures have, as convert_hf_to_gguf.py writes them. Refuses (naming the field)
// what the GGUF form cannot express, such as a Gemma 3 layer pattern other than 5 local : 1
// global.
Status set_arch_hparams(const nlohmann::json& config, const HfArch& arch, const std::string& dir, ModelFile* file);

// After the tensors are loaded: Gemma's norms get their + 1 (as f32 copies), Phi-3's
// LongRoPE factor lists become rope_factors_long / rope_factors_short tensors.
Status finish_arch_tensors(const nlohmann::json& config, const HfArch& arch, const std::string& dir, ModelFile* file);

}  // namespace lumen::gguf
