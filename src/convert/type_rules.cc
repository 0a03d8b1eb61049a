#include "convert/type_rules.h"

#include <cctype>

#include "base/check.h"
#include "convert/quantize_ref.h"

namespace lumen::convert {

DType choose_tensor_type(const TypeRules& rules, std::string_view name, std::span<const int64_t> ne, bool tied) {
  // ggml_n_dims: trailing dimensions of size 1 do not count ([n, 1] is a vector).
  bool is_matrix = false;
  for (size_t d = 1; d < ne.size(); ++d) is_matrix |= ne[d] > 1;
  if (!is_matrix || name == "rope_freqs.weight" || !name.ends_with(".weight")) return DType::kF32;

  DType t = rules.type;
  const bool is_output = name == "output.weight" || (tied && name == "token_embd.weight");
  if (name == "token_embd.weight" && rules.token_embd_type) {
    t = *rules.token_embd_type;
  } else if (is_output) {
    if (rules.output_type) {
      t = *rules.output_type;
    } else if (rules.type == DType::kQ4_K) {
      t = DType::kQ6_K;
    }
  }
  const int64_t n_per_row = ne[0];
  if (n_per_row % dtype_info(t).block_size != 0) {
    if (t == DType::kQ4_K || t == DType::kQ6_K) t = DType::kQ8_0;
    if (n_per_row % dtype_info(t).block_size != 0) t = DType::kF16;
  }
  return t;
}

Result<DType> parse_target_type(std::string_view value, std::string_view flag) {
  std::string lower(value);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const DTypeInfo* info = find_dtype_by_name(lower);
  if (!info || !can_quantize_to(info->dtype))
    return error(std::string(flag) + ": unsupported type '" + std::string(value) +
                 "' (supported: f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q2_k, q3_k, q4_k, q5_k, q6_k)");
  return info->dtype;
}

Result<TypeRules> make_type_rules(std::string_view type, std::string_view output_type,
                                  std::string_view token_embd_type) {
  TypeRules rules;
  LUMEN_ASSIGN_OR_RETURN(rules.type, parse_target_type(type, "--type"));
  if (!output_type.empty()) {
    LUMEN_ASSIGN_OR_RETURN(rules.output_type, parse_target_type(output_type, "--output-type"));
  }
  if (!token_embd_type.empty()) {
    LUMEN_ASSIGN_OR_RETURN(rules.token_embd_type, parse_target_type(token_embd_type, "--token-embd-type"));
  }
  return rules;
}

uint32_t llama_file_type(DType requested) {
  switch (requested) {
    case DType::kF32: return 0;
    case DType::kF16: return 1;
    case DType::kQ4_0: return 2;
    case DType::kQ4_1: return 3;
    case DType::kQ8_0: return 7;
    case DType::kQ5_0: return 8;
    case DType::kQ5_1: return 9;
    case DType::kQ2_K: return 10;
    case DType::kQ3_K: return 11;  // MOSTLY_Q3_K_S
    case DType::kQ4_K: return 15;
    case DType::kQ5_K: return 16;  // MOSTLY_Q5_K_S
    case DType::kQ6_K: return 18;
    case DType::kBF16: return 32;
    default: break;
  }
  LUMEN_CHECK_MSG(false, "llama_file_type: not a target type");
  return 0;
}

}  // namespace lumen::convert
