#include "convert/synth.h"

#include <cmath>
#include <cstdio>
#include <map>
#include <numbers>

#include "base/check.h"
#include "base/thread_pool.h"
#include "convert/gguf_stream.h"
#include "convert/quantize_ref.h"
#include "convert/row_writer.h"
#include "convert/synth_arch.h"
#include "convert/tokenizer_to_gguf.h"
#include "kernels/ops.h"
#include "model/known_shapes.h"

namespace lumen::convert {
namespace {

using gguf::MetaValue;

constexpr std::string_view kQwenTokenizer = "tokenizers/hf/qwen2-qwen3/tokenizer.json";
constexpr std::string_view kLlama3Tokenizer = "tokenizers/hf/llama3/tokenizer.json";
constexpr std::string_view kPhi3Vocab = "tokenizers/vocab/ggml-vocab-phi-3.gguf";
constexpr std::string_view kLlamaSpmVocab = "tokenizers/vocab/ggml-vocab-llama-spm.gguf";
// stories260K's 512-token SentencePiece vocabulary (with <0xXX> byte tokens): every
// architecture's loader in llama.cpp accepts it, and prompts tokenize the same everywhere.
constexpr std::string_view kTinyVocab = "models/stories260K/stories260K.gguf";

// Real shapes: the shape comes from model/known_shapes.h (shared with lumen roofline); a
// preset adds what a file needs beyond it. Tokenizers without their own in the shared dir
// get a documented stand-in of the real size (synth.h).
struct RealPreset {
  std::string_view name;             // a known shape
  std::string_view tokenizer;        // under the shared dir
  double llama3_rope_factor = 0.0;   // Llama 3 RoPE scaling (rope_freqs.weight), 0 = none
};

constexpr RealPreset kRealPresets[] = {
    {"qwen2.5-0.5b", kQwenTokenizer},  {"qwen1.5-0.5b", kQwenTokenizer}, {"llama-3.2-1b", kLlama3Tokenizer, 32.0},
    {"smollm2-135m", kLlama3Tokenizer}, {"qwen3-0.6b", kQwenTokenizer},  {"qwen3-1.7b", kQwenTokenizer},
    {"gemma2-2b", kLlama3Tokenizer},    {"gemma3-1b", kLlama3Tokenizer}, {"phi3-mini", kPhi3Vocab},
    {"mistral-7b", kLlamaSpmVocab},     {"olmoe-1b-7b", kLlama3Tokenizer}, {"qwen3-30b-a3b", kQwenTokenizer},
    {"qwen1.5-moe-a2.7b", kQwenTokenizer}, {"mixtral-8x7b", kLlamaSpmVocab},
    {"deepseek-v2-lite", kLlama3Tokenizer},
};

// Test models: fields in the order the table's designated initializers name them.
struct TinyPreset {
  std::string_view name;
  std::string_view arch;
  int64_t n_embd, n_layer, n_head, n_kv_head, n_ff;
  double rope_theta, norm_eps;
  bool tied = true, qkv_bias = false;
  int64_t n_head_dim = 0, n_rot = 0, sliding_window = 0, longrope_original_ctx = 0;
  double attn_softcap = 0.0, final_softcap = 0.0, rope_linear_factor = 0.0;
  bool cla_pairs = false;  // odd layers read the K/V of the layer before them
  int64_t n_expert = 0, n_expert_used = 0, n_ff_exp = 0, n_ff_shexp = 0;  // mixture of experts
  // deepseek2 (SynthConfig): latent attention, shared experts, dense leading layers, YaRN
  int64_t n_lora_q = 0, n_lora_kv = 0, head_dim_v = 0, n_expert_shared = 0, n_dense_lead = 0;
  double expert_weights_scale = 1.0, yarn_factor = 0.0;
  bool expert_weights_norm = false, expert_gating_sigmoid = false;
};

// Test models ("tiny-*"): a few hundred KiB at f32, vocabulary 512, context 512, windows
// shorter than the test prompts, GQA, weights N(0, 0.15) and norms 1 + N(0, 0.1) so logits
// have top-2 margins well above the golden tolerances; tests/data/arch/ holds files made
// from these with llama.cpp goldens.
constexpr double kTinyStd = 0.15, kTinyNormStd = 0.1;
constexpr TinyPreset kTinyPresets[] = {
    {.name = "tiny-llama", .arch = "llama", .n_embd = 64, .n_layer = 3, .n_head = 4, .n_kv_head = 2, .n_ff = 128,
     .rope_theta = 10000.0, .norm_eps = 1e-5, .tied = false},
    {.name = "tiny-llama-cla", .arch = "llama", .n_embd = 64, .n_layer = 4, .n_head = 4, .n_kv_head = 2,
     .n_ff = 128, .rope_theta = 10000.0, .norm_eps = 1e-5, .tied = true, .cla_pairs = true},
    {.name = "tiny-mistral", .arch = "llama", .n_embd = 64, .n_layer = 3, .n_head = 4, .n_kv_head = 1, .n_ff = 128,
     .rope_theta = 10000.0, .norm_eps = 1e-5, .tied = false, .sliding_window = 16},
    {.name = "tiny-qwen2", .arch = "qwen2", .n_embd = 64, .n_layer = 3, .n_head = 4, .n_kv_head = 2, .n_ff = 128,
     .rope_theta = 1e6, .norm_eps = 1e-6, .tied = true, .qkv_bias = true},
    {.name = "tiny-qwen3", .arch = "qwen3", .n_embd = 64, .n_layer = 3, .n_head = 4, .n_kv_head = 2, .n_ff = 128,
     .rope_theta = 1e6, .norm_eps = 1e-6, .tied = true, .n_head_dim = 32},
    {.name = "tiny-smollm3", .arch = "smollm3", .n_embd = 64, .n_layer = 4, .n_head = 4, .n_kv_head = 2, .n_ff = 128,
     .rope_theta = 1e6, .norm_eps = 1e-6, .tied = true},
    {.name = "tiny-gemma", .arch = "gemma", .n_embd = 64, .n_layer = 3, .n_head = 4, .n_kv_head = 1, .n_ff = 128,
     .rope_theta = 10000.0, .norm_eps = 1e-6, .tied = true, .n_head_dim = 32},
    {.name = "tiny-gemma2", .arch = "gemma2", .n_embd = 64, .n_layer = 4, .n_head = 4, .n_kv_head = 2, .n_ff = 128,
     .rope_theta = 10000.0, .norm_eps = 1e-6, .tied = true, .sliding_window = 16, .attn_softcap = 5.0,
     .final_softcap = 8.0},
    {.name = "tiny-gemma3", .arch = "gemma3", .n_embd = 64, .n_layer = 6, .n_head = 4, .n_kv_head = 2, .n_ff = 64,
     .rope_theta = 1e6, .norm_eps = 1e-6, .tied = true, .sliding_window = 16},
    {.name = "tiny-phi3", .arch = "phi3", .n_embd = 64, .n_layer = 3, .n_head = 4, .n_kv_head = 4, .n_ff = 128,
     .rope_theta = 10000.0, .norm_eps = 1e-5, .tied = false, .sliding_window = 16},
    {.name = "tiny-phi3-longrope", .arch = "phi3", .n_embd = 64, .n_layer = 3, .n_head = 4, .n_kv_head = 2,
     .n_ff = 128, .rope_theta = 10000.0, .norm_eps = 1e-5, .tied = false, .longrope_original_ctx = 64},
    {.name = "tiny-stablelm", .arch = "stablelm", .n_embd = 64, .n_layer = 3, .n_head = 4, .n_kv_head = 2,
     .n_ff = 128, .rope_theta = 10000.0, .norm_eps = 1e-5, .tied = false, .qkv_bias = true, .n_rot = 4},
    {.name = "tiny-starcoder2", .arch = "starcoder2", .n_embd = 64, .n_layer = 3, .n_head = 4, .n_kv_head = 2,
     .n_ff = 256, .rope_theta = 100000.0, .norm_eps = 1e-5, .tied = true},
    // Mixtures of experts: 8 experts of inner size 16, 2 per token (enough that routing
    // decides the output; a file of ~0.7 MiB at f32).
    {.name = "tiny-qwen3moe", .arch = "qwen3moe", .n_embd = 64, .n_layer = 3, .n_head = 4, .n_kv_head = 2,
     .n_ff = 128, .rope_theta = 1e6, .norm_eps = 1e-6, .tied = true, .n_head_dim = 32, .n_expert = 8,
     .n_expert_used = 2, .n_ff_exp = 16},
    {.name = "tiny-olmoe", .arch = "olmoe", .n_embd = 64, .n_layer = 3, .n_head = 4, .n_kv_head = 4, .n_ff = 16,
     .rope_theta = 10000.0, .norm_eps = 1e-5, .tied = false, .n_expert = 8, .n_expert_used = 2},
    {.name = "tiny-mixtral", .arch = "llama", .n_embd = 64, .n_layer = 3, .n_head = 4, .n_kv_head = 2, .n_ff = 16,
     .rope_theta = 1e6, .norm_eps = 1e-5, .tied = false, .n_expert = 8, .n_expert_used = 2},
    {.name = "tiny-qwen2moe", .arch = "qwen2moe", .n_embd = 64, .n_layer = 3, .n_head = 4, .n_kv_head = 2,
     .n_ff = 32, .rope_theta = 1e6, .norm_eps = 1e-6, .tied = false, .n_expert = 8, .n_expert_used = 2,
     .n_ff_exp = 16, .n_ff_shexp = 32},
    // DeepSeek-2 (multi-head latent attention): heads of 16 + 16 rotated q/k dims, values of
    // 16, a latent of 32, a dense first layer, then 8 experts (2 per token) + 1 shared one,
    // YaRN (factor 4 over an original context of 64). tiny-deepseek2 has a q bottleneck of
    // 24; tiny-deepseek2-lite has none, and so (llama.cpp c392e5094 decides by the layer
    // count) V2-Lite's 27 layers, kept small with a hidden size of 32 and 4 experts of 8;
    // tiny-deepseek3 is DeepSeek-V3's router: sigmoid scores, a selection bias per expert,
    // renormalised and scaled weights.
    {.name = "tiny-deepseek2", .arch = "deepseek2", .n_embd = 64, .n_layer = 4, .n_head = 4, .n_kv_head = 4,
     .n_ff = 64, .rope_theta = 10000.0, .norm_eps = 1e-6, .tied = false, .n_head_dim = 32, .n_rot = 16,
     .n_expert = 8, .n_expert_used = 2, .n_ff_exp = 16, .n_lora_q = 24, .n_lora_kv = 32, .head_dim_v = 16,
     .n_expert_shared = 1, .n_dense_lead = 1, .expert_weights_scale = 1.0, .yarn_factor = 4.0},
    {.name = "tiny-deepseek2-lite", .arch = "deepseek2", .n_embd = 32, .n_layer = 27, .n_head = 2, .n_kv_head = 2,
     .n_ff = 32, .rope_theta = 10000.0, .norm_eps = 1e-6, .tied = false, .n_head_dim = 32, .n_rot = 16,
     .n_expert = 4, .n_expert_used = 2, .n_ff_exp = 8, .n_lora_kv = 32, .head_dim_v = 16, .n_expert_shared = 1,
     .n_dense_lead = 1, .expert_weights_scale = 1.0, .yarn_factor = 4.0},
    {.name = "tiny-deepseek3", .arch = "deepseek2", .n_embd = 64, .n_layer = 4, .n_head = 4, .n_kv_head = 4,
     .n_ff = 64, .rope_theta = 10000.0, .norm_eps = 1e-6, .tied = false, .n_head_dim = 32, .n_rot = 16,
     .n_expert = 8, .n_expert_used = 2, .n_ff_exp = 16, .n_lora_q = 24, .n_lora_kv = 32, .head_dim_v = 16,
     .n_expert_shared = 1, .n_dense_lead = 1, .expert_weights_scale = 2.5, .yarn_factor = 4.0,
     .expert_weights_norm = true, .expert_gating_sigmoid = true},
};

// --- deterministic random weights ---

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t fnv1a(std::string_view s) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (char c : s) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001B3ull;
  }
  return h;
}

// Fills out[0..n) with N(0, stddev) values for row `row_idx` of the tensor keyed `tensor_key`:
// a splitmix64 stream seeded from (key, row), two 24-bit uniforms per draw, Box-Muller.
void gaussian_row(uint64_t tensor_key, int64_t row_idx, float stddev, float* out, int64_t n) {
  uint64_t state = tensor_key ^ (static_cast<uint64_t>(row_idx) * 0xD1B54A32D192ED03ull);
  splitmix64(state);
  constexpr float kTwoPi = 2.0f * std::numbers::pi_v<float>;
  for (int64_t i = 0; i < n; i += 2) {
    const uint64_t bits = splitmix64(state);
    const float u1 = (static_cast<float>(bits >> 40) + 1.0f) * (1.0f / 16777216.0f);  // (0, 1]
    const float u2 = static_cast<float>(bits & 0xFFFFFF) * (1.0f / 16777216.0f);     // [0, 1)
    const float r = stddev * std::sqrt(-2.0f * std::log(u1));
    out[i] = r * std::cos(kTwoPi * u2);
    if (i + 1 < n) out[i + 1] = r * std::sin(kTwoPi * u2);
  }
}

Status check_range(const char* what, int64_t v, int64_t max) {
  if (v < 1 || v > max)
    return error(std::string(what) + " = " + std::to_string(v) + " is out of range [1, " + std::to_string(max) + "]");
  return Status();
}

}  // namespace

std::vector<std::string_view> synth_preset_names() {
  std::vector<std::string_view> names;
  for (const RealPreset& p : kRealPresets) names.push_back(p.name);
  for (const TinyPreset& p : kTinyPresets) names.push_back(p.name);
  return names;
}

Result<SynthConfig> synth_preset(std::string_view name, const std::string& shared_dir) {
  SynthConfig c;
  c.rules.mix = find_quant_mix("q8_0");
  for (const RealPreset& p : kRealPresets) {
    if (p.name != name) continue;
    const model::KnownShape* shape = model::find_known_shape(p.name);
    LUMEN_CHECK_MSG(shape != nullptr, "synth preset without a known shape");
    c.name = std::string(p.name);
    c.general_name = c.name + " (synthetic)";
    c.arch = shape->arch;
    c.n_embd = shape->n_embd;
    c.n_layer = shape->n_layer;
    c.n_head = shape->n_head;
    c.n_kv_head = shape->n_kv_head;
    c.n_ff = shape->n_ff;
    c.n_vocab = shape->n_vocab;
    c.n_ctx = shape->n_ctx;
    if (shape->head_dim * shape->n_head != shape->n_embd) c.n_head_dim = shape->head_dim;
    c.rope_theta = shape->rope_theta;
    c.norm_eps = shape->norm_eps;
    c.tied = shape->tied_output;
    c.qkv_bias = shape->has_qkv_bias;
    c.sliding_window = shape->sliding_window;
    c.attn_softcap = shape->attn_softcap;
    c.final_softcap = shape->final_softcap;
    c.rope_scaling_factor = p.llama3_rope_factor;
    if (const model::KnownMoe* m = model::find_known_moe(p.name)) {
      c.n_expert = m->n_expert;
      c.n_expert_used = m->n_expert_used;
      c.n_ff_exp = c.arch == "qwen2moe" || c.arch == "qwen3moe" || c.arch == "deepseek2" ? m->n_ff_exp : 0;  // others: n_ff
      c.n_ff_shexp = c.arch == "deepseek2" ? 0 : m->n_ff_shexp;  // deepseek2: n_expert_shared below
    }
    if (const model::KnownMla* m = model::find_known_mla(p.name)) {
      c.n_rot = m->rope_dims;
      c.n_lora_q = m->n_lora_q;
      c.n_lora_kv = m->n_lora_kv;
      c.head_dim_v = m->head_dim_v;
      c.n_dense_lead = m->n_dense_lead;
      c.n_expert_shared = m->n_expert_shared;
      c.expert_weights_scale = m->expert_weights_scale;
      c.yarn_factor = m->yarn_factor;
      c.yarn_original_ctx = m->yarn_original_ctx;
      c.yarn_log_mul = m->yarn_log_mul;
    }
    c.tokenizer_path = shared_dir + "/" + std::string(p.tokenizer);
    return c;
  }
  for (const TinyPreset& p : kTinyPresets) {
    if (p.name != name) continue;
    c.name = std::string(p.name);
    c.general_name = "lumen synth test model";
    c.arch = std::string(p.arch);
    c.n_embd = p.n_embd;
    c.n_layer = p.n_layer;
    c.n_head = p.n_head;
    c.n_kv_head = p.n_kv_head;
    c.n_ff = p.n_ff;
    c.n_vocab = 512;
    c.n_ctx = 512;
    c.n_head_dim = p.n_head_dim;
    c.n_rot = p.n_rot;
    c.rope_theta = p.rope_theta;
    c.norm_eps = p.norm_eps;
    c.tied = p.tied;
    c.qkv_bias = p.qkv_bias;
    c.rope_linear_factor = p.rope_linear_factor;
    c.sliding_window = p.sliding_window;
    c.attn_softcap = p.attn_softcap;
    c.final_softcap = p.final_softcap;
    c.longrope_original_ctx = p.longrope_original_ctx;
    if (p.cla_pairs)
      for (int64_t il = 0; il < p.n_layer; ++il) c.kv_source_layers.push_back(il % 2 == 1 ? static_cast<int32_t>(il - 1) : -1);
    c.n_expert = p.n_expert;
    c.n_expert_used = p.n_expert_used;
    c.n_ff_exp = p.n_ff_exp;
    c.n_ff_shexp = p.n_ff_shexp;
    c.n_lora_q = p.n_lora_q;
    c.n_lora_kv = p.n_lora_kv;
    c.head_dim_v = p.head_dim_v;
    c.n_expert_shared = p.n_expert_shared;
    c.n_dense_lead = p.n_dense_lead;
    c.expert_weights_scale = p.expert_weights_scale;
    c.expert_weights_norm = p.expert_weights_norm;
    c.expert_gating_sigmoid = p.expert_gating_sigmoid;
    if (p.yarn_factor > 0) {
      c.yarn_factor = p.yarn_factor;
      c.yarn_original_ctx = 64;
      c.yarn_log_mul = 0.1;
    }
    c.weight_std = kTinyStd;
    c.norm_std = kTinyNormStd;
    c.tokenizer_path = shared_dir + "/" + std::string(kTinyVocab);
    return c;
  }
  std::string known;
  for (std::string_view n : synth_preset_names()) known += (known.empty() ? "" : ", ") + std::string(n);
  return error("--preset: unknown preset '" + std::string(name) + "' (known: " + known + ")");
}

Status validate_synth_config(const SynthConfig& c) {
  LUMEN_TRY(check_range("--hidden", c.n_embd, 1 << 16));
  LUMEN_TRY(check_range("--layers", c.n_layer, 1024));
  LUMEN_TRY(check_range("--heads", c.n_head, 1024));
  LUMEN_TRY(check_range("--kv-heads", c.n_kv_head, 1024));
  LUMEN_TRY(check_range("--ffn", c.n_ff, 1 << 18));
  LUMEN_TRY(check_range("--vocab", c.n_vocab, 1 << 22));
  LUMEN_TRY(check_range("--ctx", c.n_ctx, 1 << 24));
  if (c.n_head_dim < 0 || c.n_head_dim > 1024) return error("--head-dim " + std::to_string(c.n_head_dim) + " is out of range");
  if ((c.n_head_dim == 0 && c.n_embd % c.n_head != 0) || c.head_dim() % 2 != 0)
    return error("--hidden " + std::to_string(c.n_embd) + " must split into --heads " + std::to_string(c.n_head) +
                 " heads of even size (or give --head-dim)");
  if (c.n_head % c.n_kv_head != 0)
    return error("--heads " + std::to_string(c.n_head) + " must be a multiple of --kv-heads " +
                 std::to_string(c.n_kv_head));
  if (c.sliding_window < 0 || c.sliding_window > c.n_ctx)
    return error("--sliding-window " + std::to_string(c.sliding_window) + " is out of range [0, --ctx]");
  if (c.k_outliers < 0 || c.k_outliers > c.head_dim() || !(c.k_outlier_scale > 0 && c.k_outlier_scale <= 1000))
    return error("--k-outliers: at most the head size (" + std::to_string(c.head_dim()) +
                 ") channels, scaled by a factor in (0, 1000]");
  if (!(c.weight_std > 0 && c.weight_std < 10) || !(c.norm_std >= 0 && c.norm_std < 10))
    return error("--weight-std / --norm-std out of range");
  if (!c.rules.mix || !can_quantize_to(c.rules.mix->base))
    return error("--type: lumen cannot write " + std::string(c.rules.mix ? c.rules.mix->name : "this type") + " yet");
  return validate_synth_arch(c);
}

namespace {

// The tokenizer.* metadata to embed: converted from a tokenizer.json, or copied from a
// GGUF (whose vocabulary must then have exactly n_vocab tokens).
Result<TokenizerGguf> tokenizer_metadata(const SynthConfig& c) {
  if (c.tokenizer_path.ends_with(".gguf")) {
    Result<gguf::ModelFile> f = gguf::open_model(c.tokenizer_path);
    if (!f.ok()) return error("--tokenizer '" + c.tokenizer_path + "': " + f.message());
    TokenizerGguf tok;
    for (const auto& [key, value] : f->metadata())
      if (key.starts_with("tokenizer.")) tok.metadata.emplace_back(key, value);
    const std::vector<std::string>* tokens = f->get_string_array("tokenizer.ggml.tokens");
    if (!tokens) return error("--tokenizer '" + c.tokenizer_path + "': no tokenizer.ggml.tokens");
    if (static_cast<int64_t>(tokens->size()) != c.n_vocab)
      return error("--tokenizer '" + c.tokenizer_path + "' has " + std::to_string(tokens->size()) +
                   " tokens, but --vocab is " + std::to_string(c.n_vocab) + " (a GGUF vocabulary is copied as it is)");
    tok.model = std::string(f->get_string("tokenizer.ggml.model").value_or("?"));
    tok.pre = std::string(f->get_string("tokenizer.ggml.pre").value_or("default"));
    tok.n_tokens_tokenizer = tok.n_tokens_kept = c.n_vocab;
    return tok;
  }
  Result<HfTokenizerTexts> texts = read_hf_tokenizer_files(c.tokenizer_path);
  if (!texts.ok())
    return error("tokenizer: " + texts.message() +
                 " (pass --tokenizer PATH/tokenizer.json, or set LUMEN_SHARED to the shared data directory)");
  TokenizerGgufOptions topt;
  topt.n_vocab = c.n_vocab;
  Result<TokenizerGguf> tok = hf_tokenizer_to_gguf(*texts, topt);
  if (!tok.ok()) return error("--tokenizer '" + c.tokenizer_path + "': " + tok.message());
  return tok;
}

}  // namespace

// The values of one row of tensor t (see SynthConfig: weights and biases N(0, weight_std),
// norms 1 + N(0, norm_std)), from a generator keyed by (seed, tensor name, row).
int64_t synth_k_outlier_dim(const SynthConfig& c, int64_t j) {
  const int64_t hd = c.head_dim();
  return (hd / std::max<int64_t>(c.k_outliers, 1) * j + 5) % hd;
}

void synth_make_row(const SynthConfig& c, const SynthTensorPlan& t, int64_t row, float* out) {
  const int64_t n = t.ne[0];
  const uint64_t key = fnv1a(t.name) ^ (c.seed * 0x9E3779B97F4A7C15ull);
  switch (t.init) {
    case SynthInit::kWeight:
      gaussian_row(key, row, static_cast<float>(c.weight_std), out, n);
      if (c.k_outliers > 0 && t.name.ends_with(".attn_k.weight")) {
        const int64_t d = row % c.head_dim();
        for (int64_t j = 0; j < c.k_outliers; ++j)
          if (synth_k_outlier_dim(c, j) == d)
            for (int64_t i = 0; i < n; ++i) out[i] *= static_cast<float>(c.k_outlier_scale);
      }
      break;
    case SynthInit::kBias: gaussian_row(key, row, static_cast<float>(c.weight_std), out, n); break;
    case SynthInit::kNorm:
      if (c.norm_std > 0) {
        gaussian_row(key, row, static_cast<float>(c.norm_std), out, n);
        for (int64_t i = 0; i < n; ++i) out[i] += 1.0f;
      } else {
        std::fill(out, out + n, 1.0f);
      }
      break;
    case SynthInit::kGiven: std::copy(t.values.begin(), t.values.end(), out); break;
  }
}

Status synth_model(const SynthConfig& c, const std::string& out_path, SynthReport* report) {
  LUMEN_TRY(validate_synth_config(c));
  SynthReport local;
  if (!report) report = &local;
  *report = SynthReport();

  LUMEN_ASSIGN_OR_RETURN(TokenizerGguf tok, tokenizer_metadata(c));
  GgufStreamWriter w;
  w.set("general.architecture", MetaValue::of_string(c.arch));
  w.set("general.type", MetaValue::of_string("model"));
  w.set("general.name", MetaValue::of_string(c.general_name.empty() ? c.name + " (synthetic)" : c.general_name));
  char desc[160];
  std::snprintf(desc, sizeof desc, "lumen synth: random weights N(0, %g), norms 1 + N(0, %g), seed %llu", c.weight_std,
                c.norm_std, static_cast<unsigned long long>(c.seed));
  std::string description = desc;
  if (c.k_outliers > 0)
    description += ", " + std::to_string(c.k_outliers) + " outlier K channels per head x " +
                   std::to_string(c.k_outlier_scale);
  w.set("general.description", MetaValue::of_string(description));
  w.set("general.file_type", MetaValue::of_u32(static_cast<uint32_t>(c.rules.mix->ftype)));
  w.set("general.quantization_version", MetaValue::of_u32(2));
  for (auto& [key, value] : synth_arch_metadata(c)) w.set(key, value);
  w.set("lumen.synth.seed", MetaValue::of_u64(c.seed));
  for (auto& [key, value] : tok.metadata) w.set(key, value);
  report->tokenizer = c.tokenizer_path + " -> " + tok.model + " (pre " + tok.pre + ", " +
                      std::to_string(tok.n_tokens_kept) + " of " + std::to_string(tok.n_tokens_tokenizer) +
                      " tokens kept, " + std::to_string(tok.n_tokens_padded) + " padding)";

  const std::vector<SynthTensorPlan> tensors = synth_arch_tensors(c);
  // Types: the mix of c.rules (type_rules.h), except that a type lumen cannot multiply yet
  // becomes q8_0 (a synthetic file is for benchmarks, so it must run); given values (RoPE
  // factors) stay F32.
  std::vector<TensorDesc> descs;
  for (const SynthTensorPlan& t : tensors) descs.push_back(TensorDesc{t.name, t.ne, DType::kF32});
  LUMEN_ASSIGN_OR_RETURN(std::vector<DType> dtypes,
                         plan_tensor_types(c.rules, make_mix_model_info(c.arch, c.n_layer, c.n_head, c.n_kv_head, 0),
                                           descs));
  std::map<DType, int64_t> by_type;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const SynthTensorPlan& t = tensors[i];
    DType& dtype = dtypes[i];
    if (t.init == SynthInit::kGiven) dtype = DType::kF32;
    if (dtype_info(dtype).is_quantized && !kernels::matmul_supports(dtype)) dtype = DType::kQ8_0;
    Status st = w.add_tensor(t.name, dtype, t.ne);
    if (!st.ok()) return st;
    int64_t n = 1;
    for (int64_t d : t.ne) n *= d;
    report->n_params += n;
    ++by_type[dtype];
  }
  report->n_tensors = static_cast<int64_t>(tensors.size());
  report->n_tensors_by_type.assign(by_type.begin(), by_type.end());

  ThreadPool pool(std::max(1, c.n_threads));
  Status st = w.write_file(out_path, [&](size_t idx, TensorSink& sink) -> Status {
    const SynthTensorPlan& t = tensors[idx];
    int64_t n_rows = 1;
    for (size_t d = 1; d < t.ne.size(); ++d) n_rows *= t.ne[d];
    return write_rows(pool, dtypes[idx], t.ne[0], n_rows, [&](int64_t row, float* out) { synth_make_row(c, t, row, out); },
                      sink);
  });
  if (!st.ok()) return error("writing '" + out_path + "': " + st.message());
  report->file_bytes = w.file_bytes();
  return Status();
}

}  // namespace lumen::convert
