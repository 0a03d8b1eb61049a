#include "gguf/hf_arch.h"

namespace lumen::gguf {
namespace {

// Per-layer names, as llama.cpp's gguf-py tensor_mapping.py maps them for each model.
constexpr HfTensorName kLlamaLayer[] = {
    {"input_layernorm.weight", "attn_norm.weight"},
    {"self_attn.q_proj.weight", "attn_q.weight"},
    {"self_attn.k_proj.weight", "attn_k.weight"},
    {"self_attn.v_proj.weight", "attn_v.weight"},
    {"self_attn.o_proj.weight", "attn_output.weight"},
    {"self_attn.q_proj.bias", "attn_q.bias"},
    {"self_attn.k_proj.bias", "attn_k.bias"},
    {"self_attn.v_proj.bias", "attn_v.bias"},
    {"self_attn.o_proj.bias", "attn_output.bias"},
    {"self_attn.q_norm.weight", "attn_q_norm.weight"},  // qwen3
    {"self_attn.k_norm.weight", "attn_k_norm.weight"},
    {"post_attention_layernorm.weight", "ffn_norm.weight"},
    {"mlp.gate_proj.weight", "ffn_gate.weight"},
    {"mlp.up_proj.weight", "ffn_up.weight"},
    {"mlp.down_proj.weight", "ffn_down.weight"},
};

// Gemma 2 / 3: four norms per layer; "post_attention_layernorm" is the norm AFTER
// attention here (in llama it is the one before the MLP).
constexpr HfTensorName kGemma2Layer[] = {
    {"input_layernorm.weight", "attn_norm.weight"},
    {"self_attn.q_proj.weight", "attn_q.weight"},
    {"self_attn.k_proj.weight", "attn_k.weight"},
    {"self_attn.v_proj.weight", "attn_v.weight"},
    {"self_attn.o_proj.weight", "attn_output.weight"},
    {"self_attn.q_norm.weight", "attn_q_norm.weight"},  // gemma3
    {"self_attn.k_norm.weight", "attn_k_norm.weight"},
    {"post_attention_layernorm.weight", "post_attention_norm.weight"},
    {"pre_feedforward_layernorm.weight", "ffn_norm.weight"},
    {"post_feedforward_layernorm.weight", "post_ffw_norm.weight"},
    {"mlp.gate_proj.weight", "ffn_gate.weight"},
    {"mlp.up_proj.weight", "ffn_up.weight"},
    {"mlp.down_proj.weight", "ffn_down.weight"},
};

// Phi-3: fused q|k|v rows and gate|up rows, the same order in both formats.
constexpr HfTensorName kPhi3Layer[] = {
    {"input_layernorm.weight", "attn_norm.weight"},
    {"self_attn.qkv_proj.weight", "attn_qkv.weight"},
    {"self_attn.o_proj.weight", "attn_output.weight"},
    {"post_attention_layernorm.weight", "ffn_norm.weight"},
    {"mlp.gate_up_proj.weight", "ffn_up.weight"},
    {"mlp.down_proj.weight", "ffn_down.weight"},
};

// StableLM 2: LayerNorms with bias, optional q/k/v bias.
constexpr HfTensorName kStableLmLayer[] = {
    {"input_layernorm.weight", "attn_norm.weight"},
    {"input_layernorm.bias", "attn_norm.bias"},
    {"self_attn.q_proj.weight", "attn_q.weight"},
    {"self_attn.k_proj.weight", "attn_k.weight"},
    {"self_attn.v_proj.weight", "attn_v.weight"},
    {"self_attn.o_proj.weight", "attn_output.weight"},
    {"self_attn.q_proj.bias", "attn_q.bias"},
    {"self_attn.k_proj.bias", "attn_k.bias"},
    {"self_attn.v_proj.bias", "attn_v.bias"},
    {"post_attention_layernorm.weight", "ffn_norm.weight"},
    {"post_attention_layernorm.bias", "ffn_norm.bias"},
    {"mlp.gate_proj.weight", "ffn_gate.weight"},
    {"mlp.up_proj.weight", "ffn_up.weight"},
    {"mlp.down_proj.weight", "ffn_down.weight"},
};

// StarCoder2: LayerNorms with bias, biases on every projection, c_fc / c_proj MLP.
constexpr HfTensorName kStarCoder2Layer[] = {
    {"input_layernorm.weight", "attn_norm.weight"},
    {"input_layernorm.bias", "attn_norm.bias"},
    {"self_attn.q_proj.weight", "attn_q.weight"},
    {"self_attn.k_proj.weight", "attn_k.weight"},
    {"self_attn.v_proj.weight", "attn_v.weight"},
    {"self_attn.o_proj.weight", "attn_output.weight"},
    {"self_attn.q_proj.bias", "attn_q.bias"},
    {"self_attn.k_proj.bias", "attn_k.bias"},
    {"self_attn.v_proj.bias", "attn_v.bias"},
    {"self_attn.o_proj.bias", "attn_output.bias"},
    {"post_attention_layernorm.weight", "ffn_norm.weight"},
    {"post_attention_layernorm.bias", "ffn_norm.bias"},
    {"mlp.c_fc.weight", "ffn_up.weight"},
    {"mlp.c_fc.bias", "ffn_up.bias"},
    {"mlp.c_proj.weight", "ffn_down.weight"},
    {"mlp.c_proj.bias", "ffn_down.bias"},
};

constexpr HfTensorName kGlobal[] = {
    {"model.embed_tokens.weight", "token_embd.weight"},
    {"model.norm.weight", "output_norm.weight"},
    {"model.norm.bias", "output_norm.bias"},
    {"lm_head.weight", "output.weight"},
};

// The first entry of each GGUF architecture is the one written (find_hf_arch_for_gguf).
constexpr HfArch kArchs[] = {
    {"llama", "llama", "LlamaForCausalLM", kLlamaLayer, false, true},
    {"llama", "mistral", "MistralForCausalLM", kLlamaLayer, false, true},
    {"qwen2", "qwen2", "Qwen2ForCausalLM", kLlamaLayer, false, false},
    {"qwen3", "qwen3", "Qwen3ForCausalLM", kLlamaLayer, false, false},
    {"smollm3", "smollm3", "SmolLM3ForCausalLM", kLlamaLayer, false, true},
    {"gemma", "gemma", "GemmaForCausalLM", kLlamaLayer, true, false},
    {"gemma2", "gemma2", "Gemma2ForCausalLM", kGemma2Layer, true, false},
    {"gemma3", "gemma3_text", "Gemma3ForCausalLM", kGemma2Layer, true, false},
    {"phi3", "phi3", "Phi3ForCausalLM", kPhi3Layer, false, false},
    {"stablelm", "stablelm", "StableLmForCausalLM", kStableLmLayer, false, false},
    {"starcoder2", "starcoder2", "Starcoder2ForCausalLM", kStarCoder2Layer, false, false},
};

}  // namespace

std::span<const HfTensorName> hf_global_names() { return kGlobal; }

const HfArch* find_hf_arch_by_model_type(std::string_view model_type) {
  for (const HfArch& a : kArchs)
    if (a.model_type == model_type) return &a;
  return nullptr;
}

const HfArch* find_hf_arch_by_class(std::string_view hf_class) {
  for (const HfArch& a : kArchs)
    if (a.hf_class == hf_class) return &a;
  return nullptr;
}

const HfArch* find_hf_arch_for_gguf(std::string_view gguf_arch) {
  for (const HfArch& a : kArchs)
    if (a.gguf_arch == gguf_arch) return &a;
  return nullptr;
}

std::string_view hf_model_type_list() {
  return "llama, mistral, qwen2, qwen3, smollm3, gemma, gemma2, gemma3_text, phi3, stablelm, starcoder2";
}

}  // namespace lumen::gguf
