// `lumen synth` for deepseek2 (DeepSeek-V2 / V2-Lite / V3): multi-head latent attention,
// dense leading layers, routed + shared experts, YaRN RoPE. Keys and tensors as llama.cpp's
// converter writes them and c392e5094 loads them (src/llama-model.cpp, LLM_ARCH_DEEPSEEK2).
#include <string>

#include "convert/synth.h"
#include "convert/synth_arch.h"

namespace lumen::convert {

using gguf::MetaValue;

Status validate_synth_deepseek2(const SynthConfig& c) {
  const std::string a = "arch deepseek2: ";
  if (c.n_lora_kv < 1 || c.n_lora_kv > 1 << 16) return error(a + "needs a latent rank (kv_lora_rank) in [1, 65536]");
  if (c.n_lora_q < 0 || c.n_lora_q > 1 << 16) return error(a + "q_lora_rank out of range");
  // llama.cpp c392e5094 takes a 27-layer file for V2-Lite (no q bottleneck) and every other
  // one for a model with it.
  if ((c.n_lora_q == 0) != (c.n_layer == 27))
    return error(a + "llama.cpp c392e5094 reads a q bottleneck (q_lora_rank > 0) exactly when layers != 27");
  if (c.rot_dims() <= 0 || c.rot_dims() % 2 != 0 || c.rot_dims() >= c.head_dim())
    return error(a + "rotary dims " + std::to_string(c.rot_dims()) + " must be even and below the key size " +
                 std::to_string(c.head_dim()));
  if (c.head_dim_v < 1 || c.head_dim_v > 4096) return error(a + "needs a value size (value_length) in [1, 4096]");
  if (c.n_kv_head != c.n_head) return error(a + "--kv-heads must equal --heads (every head reads the latent)");
  if (c.n_expert_shared < 1 || c.n_expert_shared > 64) return error(a + "needs 1 to 64 shared experts");
  if (c.n_dense_lead < 0 || c.n_dense_lead > c.n_layer) return error(a + "dense leading layers out of [0, layers]");
  if (!(c.expert_weights_scale > 0 && c.expert_weights_scale < 1e3)) return error(a + "expert weights scale out of range");
  if (c.yarn_factor != 0 && !(c.yarn_factor >= 1 && c.yarn_original_ctx > 0 && c.yarn_log_mul >= 0))
    return error(a + "YaRN needs a factor >= 1, an original context and a log multiplier >= 0");
  if (c.sliding_window != 0 || !c.kv_source_layers.empty() || c.qkv_bias)
    return error(a + "has no sliding window, shared KV or q/k/v biases");
  return Status();
}

void synth_deepseek2_metadata(const SynthConfig& c, std::vector<std::pair<std::string, MetaValue>>& m) {
  const std::string a = c.arch;
  auto u32 = [&](const std::string& key, int64_t v) { m.emplace_back(a + key, MetaValue::of_u32(static_cast<uint32_t>(v))); };
  auto f32 = [&](const std::string& key, double v) { m.emplace_back(a + key, MetaValue::of_f32(static_cast<float>(v))); };
  f32(".rope.freq_base", c.rope_theta);
  f32(".attention.layer_norm_rms_epsilon", c.norm_eps);
  u32(".expert_used_count", c.n_expert_used);
  u32(".vocab_size", c.n_vocab);
  u32(".leading_dense_block_count", c.n_dense_lead);
  u32(".expert_count", c.n_expert);
  u32(".expert_feed_forward_length", c.ff_exp());
  u32(".expert_shared_count", c.n_expert_shared);
  f32(".expert_weights_scale", c.expert_weights_scale);
  m.emplace_back(a + ".expert_weights_norm", MetaValue::of_bool(c.expert_weights_norm));
  u32(".expert_gating_func", c.expert_gating_sigmoid ? 2 : 1);
  if (c.n_lora_q > 0) u32(".attention.q_lora_rank", c.n_lora_q);
  u32(".attention.kv_lora_rank", c.n_lora_kv);
  u32(".attention.key_length", c.head_dim());
  u32(".attention.value_length", c.head_dim_v);
  u32(".rope.dimension_count", c.rot_dims());
  if (c.yarn_factor > 0) {
    m.emplace_back(a + ".rope.scaling.type", MetaValue::of_string("yarn"));
    f32(".rope.scaling.factor", c.yarn_factor);
    u32(".rope.scaling.original_context_length", c.yarn_original_ctx);
    f32(".rope.scaling.yarn_log_multiplier", c.yarn_log_mul);
  }
}

std::vector<SynthTensorPlan> synth_deepseek2_tensors(const SynthConfig& c) {
  const int64_t e = c.n_embd, H = c.n_head, hd = c.head_dim(), L = c.n_lora_kv, R = c.rot_dims();
  const int64_t nope = hd - R, v = c.head_dim_v, n = c.n_expert, fe = c.ff_exp(), fs = fe * c.n_expert_shared;
  std::vector<SynthTensorPlan> ts;
  auto add = [&](std::string name, std::vector<int64_t> ne, SynthInit init) {
    ts.push_back(SynthTensorPlan{std::move(name), std::move(ne), init, {}});
  };
  add("token_embd.weight", {e, c.n_vocab}, SynthInit::kWeight);
  for (int64_t il = 0; il < c.n_layer; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    add(p + "attn_norm.weight", {e}, SynthInit::kNorm);
    if (c.n_lora_q > 0) {
      add(p + "attn_q_a_norm.weight", {c.n_lora_q}, SynthInit::kNorm);
      add(p + "attn_q_a.weight", {e, c.n_lora_q}, SynthInit::kWeight);
      add(p + "attn_q_b.weight", {c.n_lora_q, H * hd}, SynthInit::kWeight);
    } else {
      add(p + "attn_q.weight", {e, H * hd}, SynthInit::kWeight);
    }
    add(p + "attn_kv_a_norm.weight", {L}, SynthInit::kNorm);
    add(p + "attn_kv_a_mqa.weight", {e, L + R}, SynthInit::kWeight);
    add(p + "attn_kv_b.weight", {L, H * (nope + v)}, SynthInit::kWeight);
    add(p + "attn_output.weight", {H * v, e}, SynthInit::kWeight);
    add(p + "ffn_norm.weight", {e}, SynthInit::kNorm);
    if (il < c.n_dense_lead) {
      add(p + "ffn_gate.weight", {e, c.n_ff}, SynthInit::kWeight);
      add(p + "ffn_up.weight", {e, c.n_ff}, SynthInit::kWeight);
      add(p + "ffn_down.weight", {c.n_ff, e}, SynthInit::kWeight);
      continue;
    }
    add(p + "ffn_gate_inp.weight", {e, n}, SynthInit::kWeight);
    if (c.expert_gating_sigmoid) add(p + "exp_probs_b.bias", {n}, SynthInit::kBias);
    add(p + "ffn_gate_exps.weight", {e, fe, n}, SynthInit::kWeight);
    add(p + "ffn_up_exps.weight", {e, fe, n}, SynthInit::kWeight);
    add(p + "ffn_down_exps.weight", {fe, e, n}, SynthInit::kWeight);
    add(p + "ffn_gate_shexp.weight", {e, fs}, SynthInit::kWeight);
    add(p + "ffn_up_shexp.weight", {e, fs}, SynthInit::kWeight);
    add(p + "ffn_down_shexp.weight", {fs, e}, SynthInit::kWeight);
  }
  add("output_norm.weight", {e}, SynthInit::kNorm);
  add("output.weight", {e, c.n_vocab}, SynthInit::kWeight);
  return ts;
}

}  // namespace lumen::convert
