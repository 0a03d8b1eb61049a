// Model hyper-parameters, read from a ModelFile's GGUF-named metadata (whatever the
// container: GGUF, Hugging Face or llama2.c all present the same keys).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "gguf/model_file.h"
#include "kernels/ops.h"

namespace lumen::model {

// Architectures are an enum with a switch (STYLE 17), not an interface.
enum class Arch : uint8_t {
  kLlama,  // Llama 2/3, TinyLlama, SmolLM, Mistral (no sliding window): RMSNorm, SwiGLU, RoPE
  kQwen2,  // as llama + bias on q/k/v projections, NeoX RoPE
};
std::string_view arch_name(Arch arch);

struct HParams {
  Arch arch = Arch::kLlama;
  int32_t n_vocab = 0;
  int32_t n_embd = 0;       // hidden size
  int32_t n_layer = 0;
  int32_t n_head = 0;       // query heads
  int32_t n_kv_head = 0;    // key/value heads: == n_head (MHA), < (GQA), 1 (MQA)
  int32_t head_dim = 0;     // per-head size (key_length)
  int32_t n_ff = 0;         // MLP inner size
  int32_t n_ctx_train = 0;  // context length the model was trained with
  float rms_eps = 1e-5f;
  bool has_qkv_bias = false;
  bool tied_output = false;  // output matrix is token_embd

  // RoPE
  float rope_theta = 10000.0f;
  float rope_freq_scale = 1.0f;         // linear scaling: pos * freq_scale
  kernels::RopeLayout rope_layout = kernels::RopeLayout::kInterleaved;
  std::string rope_scaling_type;        // "", "linear", "llama3"
  float rope_scaling_factor = 1.0f;     // llama3
  float rope_low_freq_factor = 1.0f;    // llama3
  float rope_high_freq_factor = 4.0f;   // llama3
  int32_t rope_original_ctx = 8192;     // llama3

  int32_t n_q_dim() const { return n_head * head_dim; }
  int32_t n_kv_dim() const { return n_kv_head * head_dim; }
};

// Reads and validates the hyper-parameters; the message names the key at fault.
Result<HParams> read_hparams(const gguf::ModelFile& file);

// Llama-3 RoPE frequency factors ([head_dim/2]; theta_i is divided by factor[i]),
// computed from the scaling parameters as Llama 3.1 defines them.
std::vector<float> llama3_rope_freq_factors(const HParams& hp);

}  // namespace lumen::model
