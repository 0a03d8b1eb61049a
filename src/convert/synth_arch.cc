#include "convert/synth_arch.h"

#include <cmath>
#include <numbers>

#include "convert/synth.h"

namespace lumen::convert {
namespace {

using gguf::MetaValue;

enum class Mlp : uint8_t { kGated, kFusedGateUp, kPlainBiased };
enum class Moe : uint8_t { kNone, kOptional, kRequired, kRequiredShared };
enum class Output : uint8_t { kTiedOrNot, kTiedOnly, kUntiedOnly };

// One row per architecture: which tensors its layers have (see the table in synth_arch.h).
struct ArchTraits {
  std::string_view name;
  bool layer_norm = false;     // LayerNorm with bias (else RMSNorm, no bias)
  bool fused_qkv = false;      // attn_qkv.weight
  bool qkv_bias_always = false;
  bool qkv_bias_allowed = false;
  bool o_bias = false;         // attn_output.bias
  bool qk_norm = false;        // attn_q_norm / attn_k_norm [head_dim]
  bool qk_norm_whole = false;  // with qk_norm: [n_head * head_dim] / [n_kv_head * head_dim] (olmoe)
  bool post_norms = false;     // post_attention_norm, post_ffw_norm
  bool square_attention = false;  // llama.cpp c392e5094 shapes q/o as [n_embd, n_embd]
  bool sliding = false;        // reads <arch>.attention.sliding_window
  Mlp mlp = Mlp::kGated;
  Moe moe = Moe::kNone;
  bool expert_ff_key = false;  // writes expert_feed_forward_length (n_ff is the dense size)
  Output output = Output::kTiedOrNot;
};

constexpr ArchTraits kArchs[] = {
    {.name = "llama", .sliding = true, .moe = Moe::kOptional},
    {.name = "qwen2", .qkv_bias_always = true, .square_attention = true},
    {.name = "qwen3", .qk_norm = true},
    {.name = "smollm3"},
    {.name = "gemma", .output = Output::kTiedOnly},
    {.name = "gemma2", .post_norms = true, .sliding = true, .output = Output::kTiedOnly},
    {.name = "gemma3", .qk_norm = true, .post_norms = true, .sliding = true},
    {.name = "phi3", .fused_qkv = true, .square_attention = true, .sliding = true, .mlp = Mlp::kFusedGateUp,
     .output = Output::kUntiedOnly},
    {.name = "stablelm", .layer_norm = true, .qkv_bias_allowed = true, .square_attention = true,
     .output = Output::kUntiedOnly},
    {.name = "starcoder2", .layer_norm = true, .qkv_bias_always = true, .o_bias = true, .square_attention = true,
     .mlp = Mlp::kPlainBiased},
    {.name = "qwen2moe", .qkv_bias_always = true, .square_attention = true, .moe = Moe::kRequiredShared,
     .expert_ff_key = true, .output = Output::kUntiedOnly},
    {.name = "qwen3moe", .qk_norm = true, .moe = Moe::kRequired, .expert_ff_key = true},
    // c392e5094 shapes olmoe's k norm [n_embd]: its KV heads must equal its heads
    {.name = "olmoe", .qk_norm = true, .qk_norm_whole = true, .square_attention = true, .moe = Moe::kRequired,
     .output = Output::kUntiedOnly},
    // attention and experts: synth_deepseek2.cc
    {.name = "deepseek2", .moe = Moe::kRequired, .expert_ff_key = true, .output = Output::kUntiedOnly},
};

const ArchTraits* find_arch(std::string_view name) {
  for (const ArchTraits& t : kArchs)
    if (t.name == name) return &t;
  return nullptr;
}

// LongRoPE factors for a test model: short factors near 1, long ones growing to 8 with the
// wavelength, as the published Phi-3 factors do (the values only need to be distinct).
std::vector<float> longrope_factors(int64_t n, bool long_factors) {
  std::vector<float> out(n);
  for (int64_t i = 0; i < n; ++i) {
    const float x = static_cast<float>(i) / static_cast<float>(std::max<int64_t>(1, n - 1));
    out[i] = long_factors ? 1.0f + 7.0f * x * x : 1.0f + 0.25f * x;
  }
  return out;
}

}  // namespace

std::vector<std::string_view> synth_arch_names() {
  std::vector<std::string_view> names;
  for (const ArchTraits& t : kArchs) names.push_back(t.name);
  return names;
}

bool synth_arch_known(std::string_view arch) { return find_arch(arch) != nullptr; }

Status validate_synth_arch(const SynthConfig& c) {
  const ArchTraits* t = find_arch(c.arch);
  if (!t) {
    std::string known;
    for (std::string_view n : synth_arch_names()) known += (known.empty() ? "" : ", ") + std::string(n);
    return error("arch '" + c.arch + "' is not one synth can write (" + known + ")");
  }
  const std::string a = "arch " + c.arch + ": ";
  if (t->square_attention && c.n_head * c.head_dim() != c.n_embd)
    return error(a + "heads x head dim (" + std::to_string(c.n_head) + " x " + std::to_string(c.head_dim()) +
                 ") must equal --hidden " + std::to_string(c.n_embd));
  if (c.qkv_bias && !t->qkv_bias_always && !t->qkv_bias_allowed)
    return error(a + "has no q/k/v biases");
  if (t->output == Output::kTiedOnly && !c.tied) return error(a + "always ties the output to the embeddings");
  if (t->output == Output::kUntiedOnly && c.tied) return error(a + "needs an output matrix (untied)");
  if (c.sliding_window < 0 || (c.sliding_window > 0 && !t->sliding))
    return error(a + "has no sliding-window attention");
  if (c.arch == "gemma2" && c.sliding_window == 0)
    return error(a + "needs a sliding window (llama.cpp would assume 4096)");
  if ((c.attn_softcap != 0 || c.final_softcap != 0) && c.arch != "gemma2")
    return error(a + "has no logit soft-capping");
  if (c.arch == "gemma2" && !(c.attn_softcap > 0 && c.final_softcap > 0))
    return error(a + "needs positive attention and final soft-caps");
  if (t->moe == Moe::kNone && c.n_expert != 0) return error(a + "has no mixture-of-experts form");
  if (t->moe >= Moe::kRequired && c.n_expert == 0) return error(a + "needs experts (--experts)");
  if (c.n_expert < 0 || c.n_expert > 4096 || (c.n_expert > 0 && (c.n_expert_used < 1 || c.n_expert_used > c.n_expert)))
    return error(a + std::to_string(c.n_expert) + " experts, " + std::to_string(c.n_expert_used) +
                 " used per token: need 1 <= used <= experts <= 4096");
  if (c.n_ff_exp < 0 || c.n_ff_shexp < 0 || (t->moe != Moe::kRequiredShared && c.n_ff_shexp != 0) ||
      (!t->expert_ff_key && c.n_ff_exp != 0 && c.n_ff_exp != c.n_ff))
    return error(a + "expert inner sizes: " + (t->expert_ff_key ? "" : "experts use --ffn; ") +
                 (t->moe == Moe::kRequiredShared ? "" : "no shared expert"));
  if (t->qk_norm_whole && c.n_kv_head != c.n_head)
    return error(a + "llama.cpp shapes its k norm [hidden]: --kv-heads must equal --heads");
  if (c.rot_dims() > c.head_dim() || c.rot_dims() % 2 != 0 || c.rot_dims() <= 0)
    return error(a + "rotary dims " + std::to_string(c.rot_dims()) + " must be even and at most the head dim");
  if (c.arch == "deepseek2") return validate_synth_deepseek2(c);
  if (c.rot_dims() != c.head_dim() && c.arch != "stablelm")
    return error(a + "partial rotary embeddings are stablelm's only");
  if (c.longrope_original_ctx > 0 && c.arch != "phi3") return error(a + "LongRoPE is phi3's only");
  if (c.rope_linear_factor != 0 && c.arch != "gemma3") return error(a + "linear RoPE scaling is gemma3's only here");
  if (c.rope_scaling_factor != 0 && c.arch != "llama") return error(a + "llama3 RoPE scaling is llama's only");
  if (!c.kv_source_layers.empty()) {
    if (t->fused_qkv) return error(a + "fused q/k/v weights cannot leave out K/V for shared layers");
    if (static_cast<int64_t>(c.kv_source_layers.size()) != c.n_layer)
      return error(a + "kv_source_layers has " + std::to_string(c.kv_source_layers.size()) + " entries for " +
                   std::to_string(c.n_layer) + " layers");
    for (size_t il = 0; il < c.kv_source_layers.size(); ++il) {
      const int32_t j = c.kv_source_layers[il];
      if (j >= 0 && (j >= static_cast<int32_t>(il) || c.kv_source_layers[j] != -1))
        return error(a + "kv_source_layers[" + std::to_string(il) + "] = " + std::to_string(j) +
                     " must name an earlier layer with its own K/V");
      if (j < -1) return error(a + "kv_source_layers[" + std::to_string(il) + "] = " + std::to_string(j));
    }
  }
  return Status();
}

std::vector<std::pair<std::string, MetaValue>> synth_arch_metadata(const SynthConfig& c) {
  const ArchTraits& t = *find_arch(c.arch);
  const std::string& a = c.arch;
  std::vector<std::pair<std::string, MetaValue>> m;
  auto u32 = [&](const std::string& key, int64_t v) { m.emplace_back(a + key, MetaValue::of_u32(static_cast<uint32_t>(v))); };
  auto f32 = [&](const std::string& key, double v) { m.emplace_back(a + key, MetaValue::of_f32(static_cast<float>(v))); };
  u32(".block_count", c.n_layer);
  u32(".context_length", c.n_ctx);
  u32(".embedding_length", c.n_embd);
  u32(".feed_forward_length", c.n_ff);
  u32(".attention.head_count", c.n_head);
  u32(".attention.head_count_kv", c.n_kv_head);
  if (c.arch == "deepseek2") {
    synth_deepseek2_metadata(c, m);
    return m;
  }
  if (c.head_dim() != c.n_embd / c.n_head || c.n_embd % c.n_head != 0) {
    u32(".attention.key_length", c.head_dim());
    u32(".attention.value_length", c.head_dim());
  }
  f32(".rope.freq_base", c.rope_theta);
  u32(".rope.dimension_count", c.rot_dims());
  f32(t.layer_norm ? ".attention.layer_norm_epsilon" : ".attention.layer_norm_rms_epsilon", c.norm_eps);
  u32(".vocab_size", c.n_vocab);
  if (c.arch == "phi3" || c.sliding_window > 0) u32(".attention.sliding_window", c.sliding_window);
  if (c.n_expert > 0) {
    u32(".expert_count", c.n_expert);
    u32(".expert_used_count", c.n_expert_used);
    if (t.expert_ff_key) u32(".expert_feed_forward_length", c.ff_exp());
    if (t.moe == Moe::kRequiredShared) u32(".expert_shared_feed_forward_length", c.ff_shexp());
  }
  if (c.arch == "gemma2") {
    f32(".attn_logit_softcapping", c.attn_softcap);
    f32(".final_logit_softcapping", c.final_softcap);
  }
  if (!c.kv_source_layers.empty()) {
    m.emplace_back(a + ".attention.kv_source_layers",
                   MetaValue::of_int_array(gguf::ValueType::kI32,
                                           std::vector<int64_t>(c.kv_source_layers.begin(), c.kv_source_layers.end())));
  }
  if (c.rope_linear_factor > 0) {
    m.emplace_back(a + ".rope.scaling.type", MetaValue::of_string("linear"));
    f32(".rope.scaling.factor", c.rope_linear_factor);
  }
  if (c.arch == "phi3") {
    // convert_hf_to_gguf.py writes original_max_position_embeddings always, and the
    // attention factor sqrt(1 + ln(s) / ln(original)) with s = context / original when the
    // model has LongRoPE factors.
    const int64_t orig = c.longrope_original_ctx > 0 ? c.longrope_original_ctx : c.n_ctx;
    u32(".rope.scaling.original_context_length", orig);
    if (c.longrope_original_ctx > 0) {
      const double scale = static_cast<double>(c.n_ctx) / static_cast<double>(orig);
      const double attn_factor = scale > 1.0 ? std::sqrt(1.0 + std::log(scale) / std::log(static_cast<double>(orig))) : 1.0;
      f32(".rope.scaling.attn_factor", attn_factor);
    }
  }
  return m;
}

std::vector<SynthTensorPlan> synth_arch_tensors(const SynthConfig& c) {
  const ArchTraits& t = *find_arch(c.arch);
  if (c.arch == "deepseek2") return synth_deepseek2_tensors(c);
  const int64_t e = c.n_embd, hd = c.head_dim(), q = c.n_head * hd, kv = c.n_kv_head * hd;
  std::vector<SynthTensorPlan> ts;
  auto add = [&](std::string name, std::vector<int64_t> ne, SynthInit init) {
    ts.push_back(SynthTensorPlan{std::move(name), std::move(ne), init, {}});
  };
  auto norm = [&](const std::string& name, int64_t n) {
    add(name + ".weight", {n}, SynthInit::kNorm);
    if (t.layer_norm) add(name + ".bias", {n}, SynthInit::kBias);
  };
  add("token_embd.weight", {e, c.n_vocab}, SynthInit::kWeight);
  if (c.rope_scaling_factor > 0) {
    add("rope_freqs.weight", {c.rot_dims() / 2}, SynthInit::kGiven);
    ts.back().values = llama3_rope_factors(c);
  }
  if (c.longrope_original_ctx > 0) {
    add("rope_factors_long.weight", {c.rot_dims() / 2}, SynthInit::kGiven);
    ts.back().values = longrope_factors(c.rot_dims() / 2, true);
    add("rope_factors_short.weight", {c.rot_dims() / 2}, SynthInit::kGiven);
    ts.back().values = longrope_factors(c.rot_dims() / 2, false);
  }
  const bool qkv_bias = t.qkv_bias_always || c.qkv_bias;
  for (int64_t il = 0; il < c.n_layer; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    norm(p + "attn_norm", e);
    if (t.fused_qkv) {
      add(p + "attn_qkv.weight", {e, q + 2 * kv}, SynthInit::kWeight);
    } else {
      const bool shares_kv = !c.kv_source_layers.empty() && c.kv_source_layers[il] >= 0;
      for (auto [name, rows] : {std::pair{"attn_q", q}, std::pair{"attn_k", kv}, std::pair{"attn_v", kv}}) {
        if (shares_kv && name != std::string_view("attn_q")) continue;  // reads another layer's K/V
        add(p + name + ".weight", {e, rows}, SynthInit::kWeight);
        if (qkv_bias) add(p + name + ".bias", {rows}, SynthInit::kBias);
      }
    }
    if (t.qk_norm) {
      add(p + "attn_q_norm.weight", {t.qk_norm_whole ? q : hd}, SynthInit::kNorm);
      add(p + "attn_k_norm.weight", {t.qk_norm_whole ? kv : hd}, SynthInit::kNorm);
    }
    add(p + "attn_output.weight", {q, e}, SynthInit::kWeight);
    if (t.o_bias) add(p + "attn_output.bias", {e}, SynthInit::kBias);
    if (t.post_norms) add(p + "post_attention_norm.weight", {e}, SynthInit::kNorm);
    norm(p + "ffn_norm", e);
    if (c.n_expert > 0) {
      const int64_t fe = c.ff_exp(), n = c.n_expert;
      add(p + "ffn_gate_inp.weight", {e, n}, SynthInit::kWeight);
      add(p + "ffn_gate_exps.weight", {e, fe, n}, SynthInit::kWeight);
      add(p + "ffn_up_exps.weight", {e, fe, n}, SynthInit::kWeight);
      add(p + "ffn_down_exps.weight", {fe, e, n}, SynthInit::kWeight);
      if (t.moe == Moe::kRequiredShared) {
        add(p + "ffn_gate_inp_shexp.weight", {e}, SynthInit::kWeight);
        add(p + "ffn_gate_shexp.weight", {e, c.ff_shexp()}, SynthInit::kWeight);
        add(p + "ffn_up_shexp.weight", {e, c.ff_shexp()}, SynthInit::kWeight);
        add(p + "ffn_down_shexp.weight", {c.ff_shexp(), e}, SynthInit::kWeight);
      }
      continue;
    }
    switch (t.mlp) {
      case Mlp::kGated:
        add(p + "ffn_gate.weight", {e, c.n_ff}, SynthInit::kWeight);
        add(p + "ffn_up.weight", {e, c.n_ff}, SynthInit::kWeight);
        add(p + "ffn_down.weight", {c.n_ff, e}, SynthInit::kWeight);
        break;
      case Mlp::kFusedGateUp:  // rows [0, n_ff) are the gate, [n_ff, 2 n_ff) the up projection
        add(p + "ffn_up.weight", {e, 2 * c.n_ff}, SynthInit::kWeight);
        add(p + "ffn_down.weight", {c.n_ff, e}, SynthInit::kWeight);
        break;
      case Mlp::kPlainBiased:
        add(p + "ffn_up.weight", {e, c.n_ff}, SynthInit::kWeight);
        add(p + "ffn_up.bias", {c.n_ff}, SynthInit::kBias);
        add(p + "ffn_down.weight", {c.n_ff, e}, SynthInit::kWeight);
        add(p + "ffn_down.bias", {e}, SynthInit::kBias);
        break;
    }
    if (t.post_norms) add(p + "post_ffw_norm.weight", {e}, SynthInit::kNorm);
  }
  norm("output_norm", e);
  if (!c.tied) add("output.weight", {e, c.n_vocab}, SynthInit::kWeight);
  return ts;
}

// Llama 3 RoPE frequency factors as convert_hf_to_gguf.py computes them (f32 arithmetic):
// theta_i = base^(-2i/d); wavelengths shorter than original_ctx / high_freq_factor keep
// factor 1, longer than original_ctx / low_freq_factor get `factor`, in between a smooth
// interpolation.
std::vector<float> llama3_rope_factors(const SynthConfig& c) {
  const int64_t dim = c.rot_dims();
  const float base = static_cast<float>(c.rope_theta);
  const float factor = static_cast<float>(c.rope_scaling_factor);
  const float lo = static_cast<float>(c.rope_low_freq_factor);
  const float hi = static_cast<float>(c.rope_high_freq_factor);
  const float orig = static_cast<float>(c.rope_original_ctx);
  const float low_freq_wavelen = orig / lo;
  const float high_freq_wavelen = orig / hi;
  std::vector<float> out;
  for (int64_t i = 0; i < dim; i += 2) {
    const float freq = 1.0f / std::pow(base, static_cast<float>(i) / static_cast<float>(dim));
    const float wavelen = 2.0f * std::numbers::pi_v<float> / freq;
    if (wavelen < high_freq_wavelen) {
      out.push_back(1.0f);
    } else if (wavelen > low_freq_wavelen) {
      out.push_back(factor);
    } else {
      const float smooth = (orig / wavelen - lo) / (hi - lo);
      out.push_back(1.0f / ((1.0f - smooth) / factor + smooth));
    }
  }
  return out;
}

}  // namespace lumen::convert
