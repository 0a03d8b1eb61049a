#include "convert/type_rules.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <initializer_list>
#include <numeric>

#include "base/check.h"
#include "convert/quantize_ref.h"

namespace lumen::convert {
namespace {

using D = DType;
using F = Ftype;

// llama-quantize's TYPE names (examples/quantize/quantize.cpp, QUANT_OPTIONS) that lumen
// writes; the ternary TQ types are left out.
constexpr QuantMix kMixes[] = {
    {"q4_0", F::kQ4_0, D::kQ4_0},          {"q4_1", F::kQ4_1, D::kQ4_1},
    {"q5_0", F::kQ5_0, D::kQ5_0},          {"q5_1", F::kQ5_1, D::kQ5_1},
    {"iq2_xxs", F::kIQ2_XXS, D::kIQ2_XXS}, {"iq2_xs", F::kIQ2_XS, D::kIQ2_XS},
    {"iq2_s", F::kIQ2_S, D::kIQ2_XS},      {"iq2_m", F::kIQ2_M, D::kIQ2_S},
    {"iq1_s", F::kIQ1_S, D::kIQ1_S},       {"iq1_m", F::kIQ1_M, D::kIQ1_M},
    {"q2_k", F::kQ2_K, D::kQ2_K},          {"q2_k_s", F::kQ2_K_S, D::kQ2_K},
    {"iq3_xxs", F::kIQ3_XXS, D::kIQ3_XXS}, {"iq3_s", F::kIQ3_S, D::kIQ3_S},
    {"iq3_m", F::kIQ3_M, D::kIQ3_S},       {"iq3_xs", F::kIQ3_XS, D::kIQ3_S},
    {"q3_k_s", F::kQ3_K_S, D::kQ3_K},      {"q3_k_m", F::kQ3_K_M, D::kQ3_K},
    {"q3_k_l", F::kQ3_K_L, D::kQ3_K},      {"iq4_nl", F::kIQ4_NL, D::kIQ4_NL},
    {"iq4_xs", F::kIQ4_XS, D::kIQ4_XS},    {"q4_k_s", F::kQ4_K_S, D::kQ4_K},
    {"q4_k_m", F::kQ4_K_M, D::kQ4_K},      {"q5_k_s", F::kQ5_K_S, D::kQ5_K},
    {"q5_k_m", F::kQ5_K_M, D::kQ5_K},      {"q6_k", F::kQ6_K, D::kQ6_K},
    {"q8_0", F::kQ8_0, D::kQ8_0},          {"f16", F::kF16, D::kF16},
    {"bf16", F::kBF16, D::kBF16},          {"f32", F::kF32, D::kF32},
};

struct Alias {
  std::string_view name;
  std::string_view mix;
};
constexpr Alias kAliases[] = {{"q3_k", "q3_k_m"}, {"q4_k", "q4_k_m"}, {"q5_k", "q5_k_m"}};

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool one_of(Ftype f, std::initializer_list<Ftype> set) { return std::find(set.begin(), set.end(), f) != set.end(); }

bool contains(std::string_view name, std::string_view part) { return name.find(part) != std::string_view::npos; }

// The 1-2 bit i-quant mixes, which share one branch of rules.
bool is_low_bit_iq(Ftype f) {
  return one_of(f, {F::kIQ2_XXS, F::kIQ2_XS, F::kIQ1_S, F::kIQ2_S, F::kIQ2_M, F::kIQ1_M});
}

// "More bits" layers: the first and last eighth, and every third layer between.
bool use_more_bits(int64_t i_layer, int64_t n_layer) {
  return i_layer < n_layer / 8 || i_layer >= 7 * n_layer / 8 || (i_layer - n_layer / 8) % 3 == 2;
}

bool divides(DType t, const TensorDesc& t_desc) { return t_desc.ne[0] % dtype_info(t).block_size == 0; }

// A row length the chosen type cannot hold: the type llama-quantize falls back to.
DType fallback_type(DType t) {
  switch (t) {
    case D::kIQ2_XXS: case D::kIQ2_XS: case D::kIQ2_S: case D::kIQ3_XXS: case D::kIQ3_S:
    case D::kIQ1_S: case D::kIQ1_M: case D::kQ2_K: case D::kQ3_K: case D::kIQ4_XS:
      return D::kIQ4_NL;
    case D::kQ4_K: return D::kQ5_0;
    case D::kQ5_K: return D::kQ5_1;
    case D::kQ6_K: return D::kQ8_0;
    default: return D::kF16;
  }
}

// llama_tensor_get_type as a planner: the counters (attn_v and ffn_* tensors seen so far)
// advance as tensors are visited in llama-quantize's order.
class MixPlanner {
 public:
  MixPlanner(const TypeRules& rules, const MixModelInfo& model, bool has_output)
      : rules_(rules), model_(model), f_(rules.mix->ftype), has_output_(has_output) {}

  Result<DType> choose(const TensorDesc& t) {
    DType type = rules_.mix->base;
    const std::string_view name = t.name;
    const bool is_output = name == "output.weight" || (!has_output_ && name == "token_embd.weight");
    if (is_output) {
      type = output_type(t, type);
    } else if (name == "token_embd.weight") {
      type = token_embd_type(type);
    } else if (is_low_bit_iq(f_)) {
      LUMEN_ASSIGN_OR_RETURN(type, low_bit_iq_type(t, type));
    } else if (contains(name, "attn_v.weight")) {
      type = attn_v_type(type);
    } else if (contains(name, "attn_k.weight")) {
      if (model_.n_expert == 8) type = D::kQ8_0;
      else if (f_ == F::kIQ3_XS) type = D::kIQ3_XXS;
      else if (f_ == F::kIQ3_XXS) type = D::kIQ2_S;
    } else if (contains(name, "attn_q.weight")) {
      if (f_ == F::kIQ3_XS) type = D::kIQ3_XXS;
      else if (f_ == F::kIQ3_XXS) type = D::kIQ2_S;
    } else if (contains(name, "ffn_down")) {
      LUMEN_ASSIGN_OR_RETURN(type, ffn_down_type(t, type));
    } else if (contains(name, "attn_output.weight")) {
      type = attn_output_type(type);
    } else if (contains(name, "attn_qkv.weight")) {
      if (one_of(f_, {F::kQ3_K_M, F::kQ3_K_L, F::kIQ3_M})) type = D::kQ4_K;
      else if (f_ == F::kQ4_K_M) type = D::kQ5_K;
      else if (f_ == F::kQ5_K_M) type = D::kQ6_K;
    } else if (contains(name, "ffn_gate") || contains(name, "ffn_up")) {
      int64_t& counter = contains(name, "ffn_gate") ? i_ffn_gate_ : i_ffn_up_;
      int64_t i_layer = 0;
      LUMEN_ASSIGN_OR_RETURN(i_layer, layer_of(t.name, counter));
      if (f_ == F::kIQ3_XS && i_layer >= model_.n_layer / 8 && i_layer < 7 * model_.n_layer / 8) type = D::kIQ3_XXS;
      ++counter;
    }
    return divides(type, t) ? type : fallback(t, type);
  }

 private:
  DType output_type(const TensorDesc& t, DType type) const {
    if (rules_.output_type) return *rules_.output_type;
    if (model_.arch == "falcon" || !divides(type, t)) return D::kQ8_0;
    if (one_of(f_, {F::kIQ2_XXS, F::kIQ2_XS, F::kIQ3_XXS, F::kIQ1_S, F::kIQ2_S, F::kIQ2_M, F::kIQ1_M})) return D::kQ5_K;
    return type != D::kQ8_0 ? D::kQ6_K : type;
  }

  DType token_embd_type(DType type) const {
    if (rules_.token_embd_type) return *rules_.token_embd_type;
    if (one_of(f_, {F::kIQ2_XXS, F::kIQ2_XS, F::kIQ1_S, F::kIQ1_M})) return D::kQ2_K;
    if (one_of(f_, {F::kIQ2_S, F::kIQ2_M, F::kIQ3_XXS})) return D::kIQ3_S;
    return type;
  }

  Result<DType> low_bit_iq_type(const TensorDesc& t, DType type) {
    const bool iq2_s_or_m = one_of(f_, {F::kIQ2_S, F::kIQ2_M});
    if (contains(t.name, "attn_v.weight")) {
      if (model_.n_gqa() >= 4 || model_.n_expert >= 4) type = D::kQ4_K;
      else type = iq2_s_or_m ? D::kIQ3_S : D::kQ2_K;
      ++i_attention_wv_;
    } else if (model_.n_expert == 8 && contains(t.name, "attn_k.weight")) {
      type = D::kQ4_K;
    } else if (contains(t.name, "ffn_down")) {
      // The counter, not the layer, even for MoE models (as llama.cpp does here).
      if (i_ffn_down_ < model_.n_layer / 8) type = iq2_s_or_m ? D::kIQ3_S : D::kQ2_K;
      ++i_ffn_down_;
    } else if (contains(t.name, "attn_output.weight")) {
      if (model_.n_expert == 8) type = D::kQ5_K;
      else if (one_of(f_, {F::kIQ1_S, F::kIQ1_M})) type = D::kIQ2_XXS;
      else if (iq2_s_or_m) type = D::kIQ3_S;
    }
    return type;
  }

  DType attn_v_type(DType type) {
    const int64_t gqa = model_.n_gqa();
    const int64_t i = i_attention_wv_;
    if (f_ == F::kQ2_K) type = gqa >= 4 ? D::kQ4_K : D::kQ3_K;
    else if (f_ == F::kQ2_K_S && gqa >= 4) type = D::kQ4_K;
    else if (f_ == F::kIQ3_XXS) type = gqa >= 4 ? D::kQ4_K : !rules_.has_imatrix ? D::kIQ3_S : D::kIQ3_XXS;
    else if (one_of(f_, {F::kIQ3_XS, F::kIQ3_S}) && gqa >= 4) type = D::kQ4_K;
    else if (f_ == F::kIQ3_M) type = D::kQ4_K;
    else if (f_ == F::kQ3_K_M) type = i < 2 ? D::kQ5_K : D::kQ4_K;
    else if (f_ == F::kQ3_K_L) type = D::kQ5_K;
    else if (one_of(f_, {F::kIQ4_NL, F::kIQ4_XS}) && gqa >= 4) type = D::kQ5_K;
    else if (one_of(f_, {F::kQ4_K_M, F::kQ5_K_M}) && use_more_bits(i, n_attention_wv_)) type = D::kQ6_K;
    else if (f_ == F::kQ4_K_S && i < 4) type = D::kQ5_K;
    // A 70B model shares each attn_v among 8 heads: the matrix is 8x smaller than attn_q,
    // so more bits cost little.
    if (model_.is_70b && (type == D::kQ3_K || type == D::kQ4_K)) type = D::kQ5_K;
    if (model_.n_expert == 8) type = D::kQ8_0;
    ++i_attention_wv_;
    return type;
  }

  Result<DType> ffn_down_type(const TensorDesc& t, DType type) {
    int64_t i_layer = 0;
    LUMEN_ASSIGN_OR_RETURN(i_layer, layer_of(t.name, i_ffn_down_));
    const int64_t n_layer = model_.n_layer;
    const bool falcon = model_.arch == "falcon";
    if (f_ == F::kQ2_K) {
      type = D::kQ3_K;
    } else if (f_ == F::kQ2_K_S) {
      if (i_layer < n_layer / 8) type = D::kQ4_K;
    } else if (f_ == F::kIQ3_XXS && !rules_.has_imatrix) {
      type = i_layer < n_layer / 8 ? D::kQ4_K : D::kQ3_K;
    } else if (f_ == F::kQ3_K_M) {
      type = i_layer < n_layer / 16                          ? D::kQ5_K
             : !falcon || use_more_bits(i_layer, n_layer) ? D::kQ4_K
                                                            : D::kQ3_K;
    } else if (f_ == F::kIQ3_M &&
               (i_layer < n_layer / 8 || (model_.n_expert == 8 && use_more_bits(i_layer, n_layer)))) {
      type = D::kQ4_K;
    } else if (f_ == F::kQ3_K_L) {
      type = falcon ? D::kQ4_K : D::kQ5_K;
    } else if (f_ == F::kQ4_K_M) {
      if (falcon) {
        type = i_layer < n_layer / 16 ? D::kQ6_K : use_more_bits(i_layer, n_layer) ? D::kQ5_K : D::kQ4_K;
      } else if (use_more_bits(i_layer, n_layer)) {
        type = D::kQ6_K;
      }
    } else if (i_layer < n_layer / 8 && one_of(f_, {F::kIQ4_NL, F::kIQ4_XS}) && !rules_.has_imatrix) {
      type = D::kQ5_K;
    } else if (f_ == F::kQ5_K_M && use_more_bits(i_layer, n_layer)) {
      type = D::kQ6_K;
    } else if (f_ == F::kQ4_K_S && !falcon && i_layer < n_layer / 8) {
      type = D::kQ5_K;
    } else if (one_of(f_, {F::kQ4_0, F::kQ5_0}) && rules_.has_imatrix && i_layer < n_layer / 8) {
      // With an imatrix the first ffn_down layers get the _1 type (llama.cpp: they "go
      // crazy" otherwise; without one the result stays what it always was).
      type = f_ == F::kQ4_0 ? D::kQ4_1 : D::kQ5_1;
    }
    ++i_ffn_down_;
    return type;
  }

  DType attn_output_type(DType type) const {
    if (model_.arch == "falcon") return f_ == F::kQ3_K_L ? D::kQ4_K : type;
    if (model_.n_expert == 8) {
      if (one_of(f_, {F::kQ2_K, F::kIQ3_XS, F::kIQ3_XXS, F::kQ3_K_S, F::kQ3_K_M, F::kIQ4_NL, F::kQ4_K_S, F::kQ4_K_M,
                      F::kIQ3_S, F::kIQ3_M, F::kIQ4_XS}))
        type = D::kQ5_K;
      return type;
    }
    if (f_ == F::kQ2_K) return D::kQ3_K;
    if (f_ == F::kIQ3_XXS) return D::kIQ3_S;
    if (f_ == F::kQ3_K_M) return D::kQ4_K;
    if (f_ == F::kQ3_K_L) return D::kQ5_K;
    if (f_ == F::kIQ3_M) return D::kQ4_K;
    return type;
  }

  // The layer a per-layer rule uses: dense models count the tensors of that kind seen so far;
  // MoE models read it from the name ("blk.N."), since expert tensors are not consecutive.
  Result<int64_t> layer_of(std::string_view name, int64_t counter) const {
    if (model_.n_expert <= 1) return counter;
    int layer = -1;
    if (std::sscanf(std::string(name).c_str(), "blk.%d.", &layer) != 1)
      return error("tensor '" + std::string(name) + "': no layer number in its name (a MoE model's rules need it)");
    if (layer < 0 || layer >= model_.n_layer)
      return error("tensor '" + std::string(name) + "': layer " + std::to_string(layer) + " is not in [0, " +
                   std::to_string(model_.n_layer) + ")");
    return layer;
  }

  static DType fallback(const TensorDesc& t, DType type) {
    type = fallback_type(type);
    return divides(type, t) ? type : D::kF16;
  }

 public:
  int64_t n_attention_wv_ = 0;  // set by the caller from the tensor list

 private:
  const TypeRules& rules_;
  const MixModelInfo& model_;
  Ftype f_;
  bool has_output_;
  int64_t i_attention_wv_ = 0;
  int64_t i_ffn_down_ = 0;
  int64_t i_ffn_gate_ = 0;
  int64_t i_ffn_up_ = 0;
};

// llama-quantize quantizes a tensor only when its name ends in "weight", it has 2+
// dimensions (trailing 1s do not count) and it is not a norm, a MoE router, a positional or
// token-type embedding, or one of a few small architecture-specific matrices.
bool is_quantizable(const TensorDesc& t) {
  int n_dims = 1;
  for (size_t d = 1; d < t.ne.size(); ++d)
    if (t.ne[d] > 1) n_dims = static_cast<int>(d) + 1;
  const std::string_view name = t.name;
  if (!name.ends_with("weight") || n_dims < 2) return false;
  for (std::string_view skip : {"_norm.weight", "ffn_gate_inp.weight", "ssm_conv1d.weight", "time_mix_first.weight",
                                "time_mix_w1.weight", "time_mix_w2.weight", "time_mix_decay_w1.weight",
                                "time_mix_decay_w2.weight", "time_mix_lerp_fused.weight", "attn_rel_b.weight"})
    if (contains(name, skip)) return false;
  return name != "position_embd.weight" && name != "token_types.weight";
}

// llama-quantize's visiting order: tensors of no layer first, then by layer number, and by
// name within each.
int layer_number(std::string_view name) {
  int layer = -1;
  std::sscanf(std::string(name).c_str(), "blk.%d.", &layer);
  return layer;
}

}  // namespace

std::span<const QuantMix> quant_mixes() { return kMixes; }

const QuantMix* find_quant_mix(std::string_view name) {
  std::string key = lower(name);
  for (const Alias& a : kAliases)
    if (key == a.name) key = a.mix;
  for (const QuantMix& m : kMixes)
    if (m.name == key) return &m;
  return nullptr;
}

Result<const QuantMix*> parse_quant_mix(std::string_view name, std::string_view flag) {
  if (const QuantMix* m = find_quant_mix(name)) return m;
  std::string names;
  for (const QuantMix& m : kMixes) names += (names.empty() ? "" : ", ") + std::string(m.name);
  return error(std::string(flag) + ": unknown type '" + std::string(name) + "' (" + names +
               "; q3_k, q4_k, q5_k = the _m mixes)");
}

Result<DType> parse_target_type(std::string_view value, std::string_view flag) {
  const DTypeInfo* info = find_dtype_by_name(lower(value));
  if (info && can_quantize_to(info->dtype)) return info->dtype;
  std::string names;
  for (uint32_t id = 0; id < 64; ++id)
    if (const DTypeInfo* t = find_dtype_info(id); t && can_quantize_to(t->dtype))
      names += (names.empty() ? "" : ", ") + lower(t->name);
  return error(std::string(flag) + ": unsupported type '" + std::string(value) + "' (supported: " + names + ")");
}

Result<TypeRules> make_type_rules(std::string_view type, std::string_view output_type,
                                  std::string_view token_embd_type) {
  TypeRules rules;
  LUMEN_ASSIGN_OR_RETURN(rules.mix, parse_quant_mix(type, "--type"));
  if (!output_type.empty()) {
    LUMEN_ASSIGN_OR_RETURN(rules.output_type, parse_target_type(output_type, "--output-type"));
  }
  if (!token_embd_type.empty()) {
    LUMEN_ASSIGN_OR_RETURN(rules.token_embd_type, parse_target_type(token_embd_type, "--token-embd-type"));
  }
  return rules;
}

MixModelInfo make_mix_model_info(std::string arch, int64_t n_layer, int64_t n_head, int64_t n_head_kv,
                                 int64_t n_expert) {
  MixModelInfo m;
  m.arch = std::move(arch);
  m.n_layer = n_layer;
  m.n_head = n_head;
  m.n_head_kv = n_head_kv;
  m.n_expert = n_expert;
  // llama.cpp's LLM_TYPE_70B (llama-model.cpp, load_hparams): 80 layers of llama (dense, with
  // GQA; 80 layers without GQA is its 65B), qwen2, deci or olmo.
  m.is_70b = n_layer == 80 && ((m.arch == "llama" && n_expert != 8 && n_head != n_head_kv) || m.arch == "qwen2" ||
                               m.arch == "deci" || m.arch == "olmo");
  return m;
}

Result<std::vector<DType>> plan_tensor_types(const TypeRules& rules, const MixModelInfo& model,
                                             std::span<const TensorDesc> tensors) {
  LUMEN_CHECK(rules.mix != nullptr);
  bool has_output = false;
  int64_t n_attention_wv = 0;
  for (const TensorDesc& t : tensors) {
    has_output |= t.name == "output.weight";
    n_attention_wv += contains(t.name, "attn_v.weight") || contains(t.name, "attn_qkv.weight") ||
                      contains(t.name, "attn_kv_b.weight");
  }
  std::vector<size_t> order(tensors.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const int la = layer_number(tensors[a].name), lb = layer_number(tensors[b].name);
    return la != lb ? la < lb : tensors[a].name < tensors[b].name;
  });

  MixPlanner planner(rules, model, has_output);
  planner.n_attention_wv_ = n_attention_wv;
  const DType base = rules.mix->base;
  const bool base_quantized = dtype_info(base).is_quantized;
  std::vector<DType> types(tensors.size());
  for (size_t idx : order) {
    const TensorDesc& t = tensors[idx];
    if (!is_quantizable(t)) {
      // Kept as they are; lumen writes vectors (norms, biases) as F32, as llama.cpp's
      // converters do, so any input container gives the same file.
      types[idx] = t.ne.size() == 1 || std::all_of(t.ne.begin() + 1, t.ne.end(), [](int64_t n) { return n == 1; })
                       ? D::kF32
                       : t.dtype;
      continue;
    }
    DType type = base;
    if (!rules.pure && base_quantized) {
      LUMEN_ASSIGN_OR_RETURN(type, planner.choose(t));
    } else if (!divides(type, t)) {
      type = divides(fallback_type(type), t) ? fallback_type(type) : D::kF16;
    }
    // The explicit overrides win over the mix (llama-quantize applies them last).
    if (rules.token_embd_type && t.name == "token_embd.weight") type = *rules.token_embd_type;
    if (rules.output_type && t.name == "output.weight") type = *rules.output_type;
    if (!divides(type, t)) type = divides(fallback_type(type), t) ? fallback_type(type) : D::kF16;
    types[idx] = type;
  }
  return types;
}

bool requires_imatrix(const TypeRules& rules, std::string_view name, DType to) {
  const bool embedding = name == "token_embd.weight" || name == "output.weight";
  switch (to) {
    case D::kIQ2_XXS: case D::kIQ2_XS: case D::kIQ2_S: case D::kIQ1_S: return true;
    case D::kIQ1_M: return !embedding;
    case D::kQ2_K: return rules.mix && rules.mix->ftype == F::kQ2_K_S && name != "token_embd.weight";
    default: return false;
  }
}

}  // namespace lumen::convert
