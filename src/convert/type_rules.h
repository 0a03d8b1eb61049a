// Which type each tensor of a written model gets: llama.cpp's quantization mixes (the TYPE
// argument of llama-quantize: q4_k_m, q3_k_s, iq4_xs, ...), with the same choice per tensor
// as llama-quantize makes (src/llama-quant.cpp, llama_tensor_get_type, at c392e5094). Shared
// by `lumen quantize` and `lumen synth`.
//
// A mix is a base type plus rules, in this order:
//   not quantized  1-D tensors, *_norm.weight, biases, rope_freqs, ffn_gate_inp (MoE router),
//                  pos/token-type embeddings: kept (lumen writes 1-D tensors as F32)
//   output         output.weight, or token_embd.weight when there is no output.weight (tied):
//                  --output-type; else q8_0 when the row is not a multiple of the base's
//                  block; else q5_K for the 1-2 bit i-quant mixes; else q6_K (q8_0 stays q8_0)
//   token_embd     --token-embd-type; else q2_K / iq3_s for the low-bit i-quant mixes
//   attn_v         "more bits": q3_K_M / q4_K_M / q5_K_M / q4_K_S / q2_K / iq mixes raise it
//                  (q6_K in the layers use_more_bits picks: the first and last eighth and
//                  every third between), q5_K in 70B-class and GQA >= 4 models, q8_0 with 8
//                  experts
//   ffn_down       likewise per layer (layer from the tensor's position, or its name for MoE)
//   attn_output, attn_qkv, attn_k, attn_q, ffn_gate, ffn_up: per-mix bumps
//   then           a row that is not a multiple of the chosen type's block falls back:
//                  q4_K -> q5_0, q5_K -> q5_1, q6_K -> q8_0, q2_K / q3_K / iq* -> iq4_nl, and
//                  to f16 when even that does not divide the row
// The layer counters follow llama-quantize's tensor order (sorted by layer, then by name).
// `pure` (llama-quantize --pure): every quantized tensor gets the base type; lumen still
// applies the row-size fallback (llama-quantize would write an invalid file).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "tensor/dtype.h"

namespace lumen::convert {

// llama.cpp's LLAMA_FTYPE values (general.file_type).
enum class Ftype : uint32_t {
  kF32 = 0, kF16 = 1, kQ4_0 = 2, kQ4_1 = 3, kQ8_0 = 7, kQ5_0 = 8, kQ5_1 = 9, kQ2_K = 10,
  kQ3_K_S = 11, kQ3_K_M = 12, kQ3_K_L = 13, kQ4_K_S = 14, kQ4_K_M = 15, kQ5_K_S = 16,
  kQ5_K_M = 17, kQ6_K = 18, kIQ2_XXS = 19, kIQ2_XS = 20, kQ2_K_S = 21, kIQ3_XS = 22,
  kIQ3_XXS = 23, kIQ1_S = 24, kIQ4_NL = 25, kIQ3_S = 26, kIQ3_M = 27, kIQ2_S = 28, kIQ2_M = 29,
  kIQ4_XS = 30, kIQ1_M = 31, kBF16 = 32,
};

// One of llama-quantize's TYPE names.
struct QuantMix {
  std::string_view name;  // lower case: "q4_k_m"
  Ftype ftype;
  DType base;             // the type most matrices get
};

// Every mix lumen writes, in llama-quantize's listing order.
std::span<const QuantMix> quant_mixes();
// A mix by name, case-insensitive; "q4_k", "q3_k" and "q5_k" are llama-quantize's aliases
// of the _m mixes. nullptr if unknown.
const QuantMix* find_quant_mix(std::string_view name);
// "--type: unknown type 'x' (q4_0, q4_1, ...)" for a bad name.
Result<const QuantMix*> parse_quant_mix(std::string_view name, std::string_view flag);
// A single type by name for --output-type / --token-embd-type (any type lumen can write).
Result<DType> parse_target_type(std::string_view value, std::string_view flag);

struct TypeRules {
  const QuantMix* mix = nullptr;
  bool pure = false;                     // --pure
  bool has_imatrix = false;              // some choices differ with an importance matrix
  std::optional<DType> output_type;      // --output-type
  std::optional<DType> token_embd_type;  // --token-embd-type
};

// Rules from the flag values ("" = not given).
Result<TypeRules> make_type_rules(std::string_view type, std::string_view output_type,
                                  std::string_view token_embd_type);

// What the per-tensor rules read from the model.
struct MixModelInfo {
  std::string arch;        // general.architecture
  int64_t n_layer = 0;
  int64_t n_head = 0;      // of layer 0
  int64_t n_head_kv = 0;   // of layer 0
  int64_t n_expert = 0;
  // llama / qwen2 / deci / olmo with 80 layers (llama also needs GQA): llama.cpp's
  // LLM_TYPE_70B, whose attn_v gets q5_K instead of q3_K / q4_K.
  bool is_70b = false;
  int64_t n_gqa() const { return n_head_kv > 0 ? n_head / n_head_kv : 0; }
};

// The model facts from its architecture and shape (is_70b as llama.cpp decides it).
MixModelInfo make_mix_model_info(std::string arch, int64_t n_layer, int64_t n_head, int64_t n_head_kv,
                                 int64_t n_expert);

struct TensorDesc {
  std::string_view name;
  std::span<const int64_t> ne;  // GGML order
  DType dtype;                  // its type in the input
};

// The type of every tensor (same order as `tensors`). Errors name the tensor (a layer number
// out of range in a MoE tensor name).
Result<std::vector<DType>> plan_tensor_types(const TypeRules& rules, const MixModelInfo& model,
                                             std::span<const TensorDesc> tensors);

// Whether llama-quantize refuses to write `to` for tensor `name` without an importance
// matrix (the 1-2 bit i-quants; q2_K in the q2_K_S mix; iq1_m except on the embeddings).
bool requires_imatrix(const TypeRules& rules, std::string_view name, DType to);

}  // namespace lumen::convert
