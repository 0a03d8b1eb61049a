// `lumen synth`: a GGUF with random weights at the shapes of a real model, with a real
// tokenizer embedded, for benchmarks (speed does not depend on weight values; run with EOS
// ignored). llama.cpp and lumen both load the files.
//
//   weights  N(0, 0.02), norms 1, q/k/v biases N(0, 0.02) (test presets: N(0, 0.15) and norms
//            1 + N(0, 0.1)); a counter-based generator keyed by (seed, tensor name, row), so
//            the bytes do not depend on the thread count
//   archs    synth_arch.h: llama (+ experts: Mixtral), qwen2, qwen3, smollm3, gemma, gemma2,
//            gemma3, phi3, stablelm, starcoder2, qwen2moe, qwen3moe, olmoe, deepseek2, with llama.cpp's
//            tensor names and metadata keys
//   types    type_rules.h (the same mix `lumen quantize` writes)
//   writing  streamed row by row (GgufStreamWriter + row_writer.h): a 1 GB file needs a few
//            MB of buffers, not the file
//   llama3   RoPE scaling (llama-3.2-1b) is written as rope_freqs.weight, the per-frequency
//            factors llama.cpp's converter stores, and no rope.scaling keys
//
// Presets at real shapes (the numbers: model/known_shapes.h, shared with lumen roofline):
//   qwen2.5-0.5b, qwen1.5-0.5b, llama-3.2-1b (llama3 RoPE scaling factor 32, low 1, high 4,
//   original context 8192), smollm2-135m, qwen3-0.6b, qwen3-1.7b, gemma2-2b, gemma3-1b,
//   phi3-mini (4k: sliding window 2047), mistral-7b (v0.1: sliding window 4096, GGUF "llama"),
//   and mixtures of experts olmoe-1b-7b, qwen3-30b-a3b, qwen1.5-moe-a2.7b, mixtral-8x7b (GGUF
//   "llama" with experts; 47 B parameters: for lumen roofline, or synth with fewer --layers),
//   deepseek-v2-lite (multi-head latent attention, 64 experts of 1408 + 2 shared, YaRN
//   factor 40; 15.7 B parameters, ~8.9 GB at q4_0; Llama 3's tokenizer truncated to 102400
//   tokens stands in for DeepSeek's)
// Test presets (tiny-llama, tiny-mistral (llama + a sliding window), tiny-llama-cla (layers 1
// and 3 read the K/V of layers 0 and 2), tiny-qwen2, tiny-qwen3,
// tiny-smollm3, tiny-gemma, tiny-gemma2, tiny-gemma3, tiny-phi3, tiny-phi3-longrope,
// tiny-stablelm, tiny-starcoder2, the mixtures of experts tiny-qwen3moe, tiny-olmoe,
// tiny-mixtral, tiny-qwen2moe: 8 experts of 16, 2 per token, and the DeepSeek-2 latent
// attention models tiny-deepseek2, tiny-deepseek2-lite (27 layers, no q bottleneck),
// tiny-deepseek3 (sigmoid router)): hidden 64, 3-6 layers, GQA, windows of 16, stories260K's
// 512-token vocabulary copied from its GGUF; tests/data/arch/FORMAT.md lists their features.
// Tokenizers (from the shared dir, $LUMEN_SHARED or ../shared): the Qwen2/3 tokenizer.json
// for the qwen presets, Llama 3's for llama-3.2-1b and smollm2-135m, Phi-3's vocab-only
// GGUF for phi3-mini. Stand-ins where the shared dir lacks the model's own (the embedding
// keeps the real shape and llama.cpp sees a valid vocabulary): SmolLM2 gets Llama 3's,
// truncated to 49152 tokens (the first 48896 regular tokens + Llama 3's 256 special
// tokens, tokenizer_to_gguf.h); Gemma 2 / 3 get Llama 3's padded to 256000 / 262144 with
// unused tokens; Mistral-7B and Mixtral get Llama 2's 32000-token SentencePiece vocabulary,
// OLMoE Llama 3's truncated to 50304 tokens.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "convert/type_rules.h"

namespace lumen::convert {

struct SynthConfig {
  std::string name;       // preset name
  // general.name. llama.cpp sets special-token attributes by it (a name with "phi3" makes it
  // look up "<|endoftext|>" and "</s>", which a small test vocabulary lacks), so the test
  // presets write a neutral one.
  std::string general_name;
  std::string arch;       // synth_arch_names(): "llama", "qwen2", "qwen3", "gemma2", ...
  int64_t n_embd = 0;
  int64_t n_layer = 0;
  int64_t n_head = 0;
  int64_t n_kv_head = 0;
  int64_t n_ff = 0;
  int64_t n_vocab = 0;
  int64_t n_ctx = 0;
  int64_t n_head_dim = 0;  // 0: n_embd / n_head; else written as attention.key_length (gemma, qwen3)
  int64_t n_rot = 0;       // rotary dims; 0: the head dim (stablelm's partial rotary: fewer)
  double rope_theta = 10000.0;
  double norm_eps = 1e-5;  // RMSNorm epsilon, or LayerNorm's for stablelm / starcoder2
  bool tied = true;       // no output.weight
  bool qkv_bias = false;  // qwen2 and starcoder2 always have them; stablelm optionally
  // Llama 3 RoPE scaling; factor 0 = none.
  double rope_scaling_factor = 0.0;
  double rope_low_freq_factor = 1.0;
  double rope_high_freq_factor = 4.0;
  int64_t rope_original_ctx = 8192;
  double rope_linear_factor = 0.0;     // gemma3: linear RoPE scaling of the global layers; 0 = none
  int64_t sliding_window = 0;          // gemma2 / gemma3 / phi3 (llama: written, llama.cpp ignores it)
  double attn_softcap = 0.0;           // gemma2: attention logit soft-capping
  double final_softcap = 0.0;          // gemma2: final logit soft-capping
  int64_t longrope_original_ctx = 0;   // phi3: > 0 writes LongRoPE factor tensors + attention factor
  // Cross-layer KV sharing, [n_layer] or empty: -1 for a layer with its own K/V, j for one
  // that attends over layer j's (no attn_k / attn_v tensors); written as the array
  // "<arch>.attention.kv_source_layers" (lumen's key, model/layer_spec.h).
  std::vector<int32_t> kv_source_layers;
  // Mixture of experts (0 experts: a dense MLP): expert_count, expert_used_count, one
  // expert's inner size (0: n_ff; written as expert_feed_forward_length by qwen2moe and
  // qwen3moe, whose n_ff is the dense size) and qwen2moe's shared expert's (0: n_ff).
  int64_t n_expert = 0;
  int64_t n_expert_used = 0;
  int64_t n_ff_exp = 0;
  int64_t n_ff_shexp = 0;
  // DeepSeek-2 (arch deepseek2, synth_deepseek2.cc): multi-head latent attention with a
  // latent of n_lora_kv, a query bottleneck of n_lora_q (0: one attn_q; llama.cpp
  // c392e5094 then insists on 27 layers, V2-Lite's), n_head_dim = nope + n_rot per head for
  // q and k, head_dim_v for v; experts of n_ff_exp with n_expert_shared shared ones, the
  // first n_dense_lead layers dense (n_ff); router weights scaled / renormalised; sigmoid
  // gating writes an expert selection bias (DeepSeek-V3); YaRN RoPE when yarn_factor > 0.
  int64_t n_lora_q = 0;
  int64_t n_lora_kv = 0;
  int64_t head_dim_v = 0;
  int64_t n_expert_shared = 0;
  int64_t n_dense_lead = 0;
  double expert_weights_scale = 1.0;
  bool expert_weights_norm = false;
  bool expert_gating_sigmoid = false;
  double yarn_factor = 0.0;
  int64_t yarn_original_ctx = 0;
  double yarn_log_mul = 0.0;

  // Weight values: matrices and biases N(0, weight_std); norm weights 1 + N(0, norm_std)
  // (as stored in the GGUF: a Gemma file stores 1 + w), norm biases N(0, weight_std).
  double weight_std = 0.02;
  double norm_std = 0.0;
  // Outlier key channels, as trained models have: in every layer, k_outliers dims of each
  // KV head (synth_k_outlier_dim) have their attn_k rows scaled by k_outlier_scale. What a
  // quantized K cache and --rotate-k are measured against.
  int64_t k_outliers = 0;
  double k_outlier_scale = 1.0;

  uint64_t seed = 42;
  // A tokenizer.json (tokenizer_config.json beside it is read too), or a .gguf whose
  // tokenizer.* metadata is copied as it is (its vocabulary must have n_vocab tokens).
  std::string tokenizer_path;
  TypeRules rules;
  int n_threads = 1;

  int64_t head_dim() const { return n_head_dim > 0 ? n_head_dim : n_embd / n_head; }
  int64_t rot_dims() const { return n_rot > 0 ? n_rot : head_dim(); }
  int64_t ff_exp() const { return n_ff_exp > 0 ? n_ff_exp : n_ff; }
  int64_t ff_shexp() const { return n_ff_shexp > 0 ? n_ff_shexp : n_ff; }
};

std::vector<std::string_view> synth_preset_names();
// The preset's shape; tokenizer_path defaults to the preset's tokenizer under shared_dir.
Result<SynthConfig> synth_preset(std::string_view name, const std::string& shared_dir);
// Checks shapes (after overrides): every count positive and bounded, an even head size,
// n_head a multiple of n_kv_head, and the architecture's own rules (synth_arch.h).
Status validate_synth_config(const SynthConfig& config);
// The head dim of outlier channel j < k_outliers (spread over the head, distinct).
int64_t synth_k_outlier_dim(const SynthConfig& config, int64_t j);

struct SynthReport {
  uint64_t file_bytes = 0;
  int64_t n_params = 0;       // elements of all tensors
  int64_t n_tensors = 0;
  std::vector<std::pair<DType, int64_t>> n_tensors_by_type;
  std::string tokenizer;      // what was embedded
};

Status synth_model(const SynthConfig& config, const std::string& out_path, SynthReport* report);
// The same weights as a Hugging Face directory (config.json + model.safetensors, f32), in
// the layout llama.cpp's converter turns into synth_model()'s GGUF (synth_hf.cc).
Status synth_model_hf(const SynthConfig& config, const std::string& dir, SynthReport* report);

}  // namespace lumen::convert
