// What `lumen synth` writes for each architecture: the GGUF metadata keys and the tensor
// list, named and shaped exactly as llama.cpp's converter writes them (and as llama.cpp
// c392e5094 / the newer llama.cpp of node-llama-cpp 3.22.1 load them: src/llama-arch.cpp,
// load_hparams and load_tensors).
//
//   arch        norms          attention                         MLP                 output
//   llama       RMS            q k v o                           gate/up/down SiLU   tied or not
//   qwen2       RMS            q k v (+ bias) o                  gate/up/down SiLU   tied or not
//   qwen3       RMS            q k v o, per-head q/k RMSNorm      gate/up/down SiLU   tied or not
//   smollm3     RMS            as llama; every 4th layer NoPE     gate/up/down SiLU   tied or not
//   gemma       RMS (1 + w)    q k v o, key_length                gate/up/down GELU   tied
//   gemma2      RMS + post     as gemma, sliding every other,     as gemma            tied, final
//                              attention logit soft-capping                           soft-cap
//   gemma3      RMS + post     as gemma2 + q/k RMSNorm, 5 local                       tied
//                              : 1 global, local RoPE base 10000
//   phi3        RMS            fused attn_qkv, sliding window     fused gate_up       untied
//                              key always written (0 = none),
//                              LongRoPE factor tensors optional
//   stablelm    LayerNorm+bias q k v (+ bias) o, partial rotary   gate/up/down SiLU   untied
//   starcoder2  LayerNorm+bias q k v o all with bias              up/down + bias GELU tied or not
//   qwen2moe    RMS            q k v (+ bias) o                  router, experts,    tied or not
//                                                                shared expert + gate
//   qwen3moe    RMS            as qwen3                          router, experts     tied or not
//   olmoe       RMS            q k v o, q/k RMSNorm over all     router, experts     tied or not
//                              heads ([hidden] weights)
//   llama with --experts (Mixtral): router and experts instead of gate/up/down
//   deepseek2   RMS            multi-head latent attention:       dense leading       untied
//                              q (or q_a, q_a_norm, q_b),         layers, then router,
//                              kv_a_mqa, kv_a_norm, kv_b, o       experts, shared
//                                                                 experts (no gate)
//
// Experts as llama.cpp's converter stores them: ffn_gate_inp [hidden, n_expert] (f32, never
// quantized) and one 3-D tensor per kind, ffn_{gate,up}_exps [hidden, ff_exp, n_expert],
// ffn_down_exps [ff_exp, hidden, n_expert].
//
// The weights' values are chosen by synth.cc; this file only says which tensors exist.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"
#include "gguf/model_file.h"

namespace lumen::convert {

struct SynthConfig;

// How a tensor's values are made (synth.cc fills them).
enum class SynthInit : uint8_t {
  kWeight,  // N(0, weight_std)
  kNorm,    // norm weight: 1 + N(0, norm_std) (as stored in the GGUF)
  kBias,    // N(0, weight_std): linear and norm biases
  kGiven,   // values computed here (rope_freqs, LongRoPE factors)
};

struct SynthTensorPlan {
  std::string name;
  std::vector<int64_t> ne;  // GGML order
  SynthInit init;
  std::vector<float> values;  // kGiven
};

// Architectures synth can write ("llama", "qwen2", ...; see the table above).
std::vector<std::string_view> synth_arch_names();
bool synth_arch_known(std::string_view arch);

// Shape rules of the architecture as llama.cpp loads it (for example qwen2, phi3, stablelm
// and starcoder2 need n_head * head_dim == n_embd; gemma2 needs a sliding window).
Status validate_synth_arch(const SynthConfig& config);

// The architecture's metadata (general.* and tokenizer keys excluded), in writing order.
std::vector<std::pair<std::string, gguf::MetaValue>> synth_arch_metadata(const SynthConfig& config);

// Every tensor, in writing order.
std::vector<SynthTensorPlan> synth_arch_tensors(const SynthConfig& config);

// deepseek2's rules, metadata and tensors (synth_deepseek2.cc).
Status validate_synth_deepseek2(const SynthConfig& config);
// Its keys after the common ones (block count, context, sizes, head counts), appended to m.
void synth_deepseek2_metadata(const SynthConfig& config, std::vector<std::pair<std::string, gguf::MetaValue>>& m);
std::vector<SynthTensorPlan> synth_deepseek2_tensors(const SynthConfig& config);

// Row `row` (of ne[0] values) of tensor t, as the GGUF stores it (synth.cc: a generator
// keyed by (seed, tensor name, row), so every writer of the same config gets the same values).
void synth_make_row(const SynthConfig& config, const SynthTensorPlan& t, int64_t row, float* out);

// Llama 3 RoPE frequency factors as convert_hf_to_gguf.py computes them.
std::vector<float> llama3_rope_factors(const SynthConfig& config);

}  // namespace lumen::convert
