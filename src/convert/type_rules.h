// Which type each tensor of a written model gets (shared by `lumen quantize` and
// `lumen synth`, so a synthetic q4_k file has the mix a quantized real one would).
//
//   1-D tensors (norms, biases) and rope_freqs.weight   -> F32
//   output.weight, or token_embd.weight of a tied model -> --output-type if given; else
//       q6_K when the requested type is q4_K (llama.cpp's Q4_K_M rule for the output
//       matrix); else the requested type
//   token_embd.weight of an untied model                -> --token-embd-type if given, else the requested type
//   every other matrix                                  -> the requested type
//   then, when the row length is not a multiple of the chosen type's block size (256 for
//   K types): q4_K / q6_K -> q8_0 (llama.cpp: q4_K -> q5_0, q6_K -> q8_0; lumen has no q5_0
//   kernels, and q8_0 never quantizes harder than llama.cpp would), and any type -> f16 when
//   the row is not even a multiple of 32.
//
// So qwen2.5-0.5b (hidden 896 = 3.5 x 256) at q4_k gets q8_0 for every matrix that reads the
// hidden state and q4_K only for ffn_down (4864 = 19 x 256); llama.cpp's Q4_K_M uses q5_0
// there. This mirrors llama-quantize's rules for the output matrix and for incompatible row
// lengths, and otherwise its --pure behaviour (no per-layer q6_K / q5_K bumps of attn_v and
// ffn_down that Q4_K_M makes).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "base/status.h"
#include "tensor/dtype.h"

namespace lumen::convert {

struct TypeRules {
  DType type = DType::kQ8_0;              // requested (--type)
  std::optional<DType> output_type;       // --output-type
  std::optional<DType> token_embd_type;   // --token-embd-type
};

// The type for tensor `name` of shape ne (GGML order). `tied`: the model has no
// output.weight, so token_embd.weight is also the output matrix.
DType choose_tensor_type(const TypeRules& rules, std::string_view name, std::span<const int64_t> ne, bool tied);

// "f32", "f16", "bf16", "q8_0", "q4_0", "q4_k", "q6_k" (case-insensitive) -> DType; an error
// naming `flag` and the value otherwise.
Result<DType> parse_target_type(std::string_view value, std::string_view flag);

// llama.cpp's LLAMA_FTYPE for a requested type (general.file_type): f32 0 (ALL_F32), f16 1,
// q4_0 2, q8_0 7, q4_K 15 (MOSTLY_Q4_K_M: q4_K with a q6_K output), q6_K 18, bf16 32.
uint32_t llama_file_type(DType requested);

// Rules from the --type, --output-type and --token-embd-type flag values ("" = not given).
Result<TypeRules> make_type_rules(std::string_view type, std::string_view output_type,
                                  std::string_view token_embd_type);

}  // namespace lumen::convert
