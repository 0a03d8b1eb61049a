#include "convert/synth.h"

#include <cmath>
#include <map>
#include <numbers>

#include "base/thread_pool.h"
#include "convert/gguf_stream.h"
#include "convert/quantize_ref.h"
#include "convert/row_writer.h"
#include "convert/tokenizer_to_gguf.h"

namespace lumen::convert {
namespace {

using gguf::MetaValue;

struct Preset {
  std::string_view name;
  std::string_view arch;
  int64_t n_embd, n_layer, n_head, n_kv_head, n_ff, n_vocab, n_ctx;
  double rope_theta, rms_eps;
  bool tied, qkv_bias;
  double rope_scaling_factor;        // llama3 scaling, 0 = none
  std::string_view tokenizer;        // under the shared dir
};

constexpr std::string_view kQwenTokenizer = "tokenizers/hf/qwen2-qwen3/tokenizer.json";
constexpr std::string_view kLlama3Tokenizer = "tokenizers/hf/llama3/tokenizer.json";

constexpr Preset kPresets[] = {
    {"qwen2.5-0.5b", "qwen2", 896, 24, 14, 2, 4864, 151936, 32768, 1e6, 1e-6, true, true, 0.0, kQwenTokenizer},
    {"llama-3.2-1b", "llama", 2048, 16, 32, 8, 8192, 128256, 131072, 500000.0, 1e-5, true, false, 32.0,
     kLlama3Tokenizer},
    {"smollm2-135m", "llama", 576, 30, 9, 3, 1536, 49152, 8192, 100000.0, 1e-5, true, false, 0.0, kLlama3Tokenizer},
    {"qwen1.5-0.5b", "qwen2", 1024, 24, 16, 16, 2816, 151936, 32768, 1e6, 1e-6, false, true, 0.0, kQwenTokenizer},
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

// Llama 3 RoPE frequency factors as convert_hf_to_gguf.py computes them (f32 arithmetic):
// theta_i = base^(-2i/d); wavelengths shorter than original_ctx / high_freq_factor keep
// factor 1, longer than original_ctx / low_freq_factor get `factor`, in between a smooth
// interpolation.
std::vector<float> llama3_rope_factors(const SynthConfig& c) {
  const int64_t dim = c.head_dim();
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

enum class Init : uint8_t { kGaussian, kOnes, kGiven };

struct SynthTensor {
  std::string name;
  std::vector<int64_t> ne;
  DType dtype;
  Init init;
  std::vector<float> values;  // kGiven
};

std::vector<SynthTensor> plan_tensors(const SynthConfig& c) {
  const int64_t e = c.n_embd, q = c.n_head * c.head_dim(), kv = c.n_kv_head * c.head_dim();
  std::vector<SynthTensor> ts;
  auto add = [&](std::string name, std::vector<int64_t> ne, Init init) {
    const DType t = choose_tensor_type(c.rules, name, ne, c.tied);
    ts.push_back(SynthTensor{std::move(name), std::move(ne), t, init, {}});
  };
  add("token_embd.weight", {e, c.n_vocab}, Init::kGaussian);
  if (c.rope_scaling_factor > 0) {
    add("rope_freqs.weight", {c.head_dim() / 2}, Init::kGiven);
    ts.back().values = llama3_rope_factors(c);
  }
  for (int64_t il = 0; il < c.n_layer; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    add(p + "attn_norm.weight", {e}, Init::kOnes);
    add(p + "attn_q.weight", {e, q}, Init::kGaussian);
    if (c.qkv_bias) add(p + "attn_q.bias", {q}, Init::kGaussian);
    add(p + "attn_k.weight", {e, kv}, Init::kGaussian);
    if (c.qkv_bias) add(p + "attn_k.bias", {kv}, Init::kGaussian);
    add(p + "attn_v.weight", {e, kv}, Init::kGaussian);
    if (c.qkv_bias) add(p + "attn_v.bias", {kv}, Init::kGaussian);
    add(p + "attn_output.weight", {q, e}, Init::kGaussian);
    add(p + "ffn_norm.weight", {e}, Init::kOnes);
    add(p + "ffn_gate.weight", {e, c.n_ff}, Init::kGaussian);
    add(p + "ffn_up.weight", {e, c.n_ff}, Init::kGaussian);
    add(p + "ffn_down.weight", {c.n_ff, e}, Init::kGaussian);
  }
  add("output_norm.weight", {e}, Init::kOnes);
  if (!c.tied) add("output.weight", {e, c.n_vocab}, Init::kGaussian);
  return ts;
}

Status check_range(const char* what, int64_t v, int64_t max) {
  if (v < 1 || v > max)
    return error(std::string(what) + " = " + std::to_string(v) + " is out of range [1, " + std::to_string(max) + "]");
  return Status();
}

}  // namespace

std::vector<std::string_view> synth_preset_names() {
  std::vector<std::string_view> names;
  for (const Preset& p : kPresets) names.push_back(p.name);
  return names;
}

Result<SynthConfig> synth_preset(std::string_view name, const std::string& shared_dir) {
  for (const Preset& p : kPresets) {
    if (p.name != name) continue;
    SynthConfig c;
    c.name = std::string(p.name);
    c.arch = std::string(p.arch);
    c.n_embd = p.n_embd;
    c.n_layer = p.n_layer;
    c.n_head = p.n_head;
    c.n_kv_head = p.n_kv_head;
    c.n_ff = p.n_ff;
    c.n_vocab = p.n_vocab;
    c.n_ctx = p.n_ctx;
    c.rope_theta = p.rope_theta;
    c.rms_eps = p.rms_eps;
    c.tied = p.tied;
    c.qkv_bias = p.qkv_bias;
    c.rope_scaling_factor = p.rope_scaling_factor;
    c.tokenizer_path = shared_dir + "/" + std::string(p.tokenizer);
    return c;
  }
  std::string known;
  for (const Preset& p : kPresets) known += (known.empty() ? "" : ", ") + std::string(p.name);
  return error("--preset: unknown preset '" + std::string(name) + "' (known: " + known + ")");
}

Status validate_synth_config(const SynthConfig& c) {
  if (c.arch != "llama" && c.arch != "qwen2") return error("arch '" + c.arch + "' is not llama or qwen2");
  LUMEN_TRY(check_range("--hidden", c.n_embd, 1 << 16));
  LUMEN_TRY(check_range("--layers", c.n_layer, 1024));
  LUMEN_TRY(check_range("--heads", c.n_head, 1024));
  LUMEN_TRY(check_range("--kv-heads", c.n_kv_head, 1024));
  LUMEN_TRY(check_range("--ffn", c.n_ff, 1 << 18));
  LUMEN_TRY(check_range("--vocab", c.n_vocab, 1 << 22));
  LUMEN_TRY(check_range("--ctx", c.n_ctx, 1 << 24));
  if (c.n_embd % c.n_head != 0 || c.head_dim() % 2 != 0)
    return error("--hidden " + std::to_string(c.n_embd) + " must split into --heads " + std::to_string(c.n_head) +
                 " heads of even size");
  if (c.n_head % c.n_kv_head != 0)
    return error("--heads " + std::to_string(c.n_head) + " must be a multiple of --kv-heads " +
                 std::to_string(c.n_kv_head));
  if (!can_quantize_to(c.rules.type)) return error("--type: unsupported type");
  return Status();
}

Status synth_model(const SynthConfig& c, const std::string& out_path, SynthReport* report) {
  LUMEN_TRY(validate_synth_config(c));
  SynthReport local;
  if (!report) report = &local;
  *report = SynthReport();

  Result<HfTokenizerTexts> texts = read_hf_tokenizer_files(c.tokenizer_path);
  if (!texts.ok())
    return error("tokenizer: " + texts.message() +
                 " (pass --tokenizer PATH/tokenizer.json, or set LUMEN_SHARED to the shared data directory)");
  TokenizerGgufOptions topt;
  topt.n_vocab = c.n_vocab;
  Result<TokenizerGguf> tok = hf_tokenizer_to_gguf(*texts, topt);
  if (!tok.ok()) return error("--tokenizer '" + c.tokenizer_path + "': " + tok.message());

  GgufStreamWriter w;
  const std::string& a = c.arch;
  w.set("general.architecture", MetaValue::of_string(a));
  w.set("general.type", MetaValue::of_string("model"));
  w.set("general.name", MetaValue::of_string(c.name + " (synthetic)"));
  w.set("general.description",
        MetaValue::of_string("lumen synth: random weights N(0, 0.02), norms 1, seed " + std::to_string(c.seed) +
                             "; for benchmarks only"));
  w.set("general.file_type", MetaValue::of_u32(llama_file_type(c.rules.type)));
  w.set("general.quantization_version", MetaValue::of_u32(2));
  w.set(a + ".block_count", MetaValue::of_u32(static_cast<uint32_t>(c.n_layer)));
  w.set(a + ".context_length", MetaValue::of_u32(static_cast<uint32_t>(c.n_ctx)));
  w.set(a + ".embedding_length", MetaValue::of_u32(static_cast<uint32_t>(c.n_embd)));
  w.set(a + ".feed_forward_length", MetaValue::of_u32(static_cast<uint32_t>(c.n_ff)));
  w.set(a + ".attention.head_count", MetaValue::of_u32(static_cast<uint32_t>(c.n_head)));
  w.set(a + ".attention.head_count_kv", MetaValue::of_u32(static_cast<uint32_t>(c.n_kv_head)));
  w.set(a + ".rope.freq_base", MetaValue::of_f32(static_cast<float>(c.rope_theta)));
  w.set(a + ".attention.layer_norm_rms_epsilon", MetaValue::of_f32(static_cast<float>(c.rms_eps)));
  w.set(a + ".rope.dimension_count", MetaValue::of_u32(static_cast<uint32_t>(c.head_dim())));
  w.set(a + ".vocab_size", MetaValue::of_u32(static_cast<uint32_t>(c.n_vocab)));
  w.set("lumen.synth.seed", MetaValue::of_u64(c.seed));
  for (auto& [key, value] : tok->metadata) w.set(key, value);
  report->tokenizer = c.tokenizer_path + " -> " + tok->model + " (pre " + tok->pre + ", " +
                      std::to_string(tok->n_tokens_kept) + " of " + std::to_string(tok->n_tokens_tokenizer) +
                      " tokens kept, " + std::to_string(tok->n_tokens_padded) + " padding)";

  const std::vector<SynthTensor> tensors = plan_tensors(c);
  std::map<DType, int64_t> by_type;
  for (const SynthTensor& t : tensors) {
    Status st = w.add_tensor(t.name, t.dtype, t.ne);
    if (!st.ok()) return st;
    int64_t n = 1;
    for (int64_t d : t.ne) n *= d;
    report->n_params += n;
    ++by_type[t.dtype];
  }
  report->n_tensors = static_cast<int64_t>(tensors.size());
  report->n_tensors_by_type.assign(by_type.begin(), by_type.end());

  ThreadPool pool(std::max(1, c.n_threads));
  Status st = w.write_file(out_path, [&](size_t idx, TensorSink& sink) -> Status {
    const SynthTensor& t = tensors[idx];
    const int64_t n_per_row = t.ne[0];
    int64_t n_rows = 1;
    for (size_t d = 1; d < t.ne.size(); ++d) n_rows *= t.ne[d];
    const uint64_t key = fnv1a(t.name) ^ (c.seed * 0x9E3779B97F4A7C15ull);
    return write_rows(pool, t.dtype, n_per_row, n_rows, [&](int64_t row, float* out) {
      switch (t.init) {
        case Init::kGaussian: gaussian_row(key, row, 0.02f, out, n_per_row); break;
        case Init::kOnes: std::fill(out, out + n_per_row, 1.0f); break;
        case Init::kGiven: std::copy(t.values.begin(), t.values.end(), out); break;
      }
    }, sink);
  });
  if (!st.ok()) return error("writing '" + out_path + "': " + st.message());
  report->file_bytes = w.file_bytes();
  return Status();
}

}  // namespace lumen::convert
