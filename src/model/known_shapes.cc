#include "model/known_shapes.h"

namespace lumen::model {

std::span<const KnownShape> known_shapes() {
  // Figures from each model's published config.json (see known_shapes.h); head_dim is
  // hidden / heads unless the config says otherwise (Qwen3, Gemma). Mistral-7B is v0.1 (the
  // one with a sliding window), written as GGUF "llama" as llama.cpp's converter does.
  static constexpr KnownShape kShapes[] = {
      // name           arch     hidden lay head kv  hd    ffn   vocab    ctx     theta   eps   tied  bias  window period caps
      {"qwen1.5-0.5b",  "qwen2",   1024, 24, 16, 16,  64,  2816, 151936,  32768, 1e6f,  1e-6f, false, true,  0, 1, 0, 0, "Qwen/Qwen1.5-0.5B config.json"},
      {"qwen1.5-1.8b",  "qwen2",   2048, 24, 16, 16, 128,  5504, 151936,  32768, 1e6f,  1e-6f, false, true,  0, 1, 0, 0, "Qwen/Qwen1.5-1.8B config.json"},
      {"qwen1.5-4b",    "qwen2",   2560, 40, 20, 20, 128,  6912, 151936,  32768, 5e6f,  1e-6f, false, true,  0, 1, 0, 0, "Qwen/Qwen1.5-4B config.json"},
      {"qwen1.5-7b",    "qwen2",   4096, 32, 32, 32, 128, 11008, 151936,  32768, 1e6f,  1e-6f, false, true,  0, 1, 0, 0, "Qwen/Qwen1.5-7B config.json"},
      {"qwen1.5-14b",   "qwen2",   5120, 40, 40, 40, 128, 13696, 152064,  32768, 1e6f,  1e-6f, false, true,  0, 1, 0, 0, "Qwen/Qwen1.5-14B config.json"},
      {"qwen1.5-32b",   "qwen2",   5120, 64, 40,  8, 128, 27392, 152064,  32768, 1e6f,  1e-6f, false, true,  0, 1, 0, 0, "Qwen/Qwen1.5-32B config.json"},
      {"qwen1.5-72b",   "qwen2",   8192, 80, 64, 64, 128, 24576, 152064,  32768, 1e6f,  1e-6f, false, true,  0, 1, 0, 0, "Qwen/Qwen1.5-72B config.json"},
      {"qwen1.5-110b",  "qwen2",   8192, 80, 64,  8, 128, 49152, 152064,  32768, 1e6f,  1e-6f, false, true,  0, 1, 0, 0, "Qwen/Qwen1.5-110B config.json"},
      {"qwen2.5-0.5b",  "qwen2",    896, 24, 14,  2,  64,  4864, 151936,  32768, 1e6f,  1e-6f, true,  true,  0, 1, 0, 0, "Qwen/Qwen2.5-0.5B config.json"},
      {"qwen2.5-1.5b",  "qwen2",   1536, 28, 12,  2, 128,  8960, 151936,  32768, 1e6f,  1e-6f, true,  true,  0, 1, 0, 0, "Qwen/Qwen2.5-1.5B config.json"},
      {"qwen2.5-3b",    "qwen2",   2048, 36, 16,  2, 128, 11008, 151936,  32768, 1e6f,  1e-6f, true,  true,  0, 1, 0, 0, "Qwen/Qwen2.5-3B config.json"},
      {"qwen2.5-7b",    "qwen2",   3584, 28, 28,  4, 128, 18944, 152064,  32768, 1e6f,  1e-6f, false, true,  0, 1, 0, 0, "Qwen/Qwen2.5-7B config.json"},
      {"qwen2.5-14b",   "qwen2",   5120, 48, 40,  8, 128, 13824, 152064,  32768, 1e6f,  1e-5f, false, true,  0, 1, 0, 0, "Qwen/Qwen2.5-14B config.json"},
      {"qwen2.5-32b",   "qwen2",   5120, 64, 40,  8, 128, 27648, 152064,  32768, 1e6f,  1e-5f, false, true,  0, 1, 0, 0, "Qwen/Qwen2.5-32B config.json"},
      {"qwen2.5-72b",   "qwen2",   8192, 80, 64,  8, 128, 29568, 152064,  32768, 1e6f,  1e-5f, false, true,  0, 1, 0, 0, "Qwen/Qwen2.5-72B config.json"},
      {"qwen3-0.6b",    "qwen3",   1024, 28, 16,  8, 128,  3072, 151936,  40960, 1e6f,  1e-6f, true,  false, 0, 1, 0, 0, "Qwen/Qwen3-0.6B config.json"},
      {"qwen3-1.7b",    "qwen3",   2048, 28, 16,  8, 128,  6144, 151936,  40960, 1e6f,  1e-6f, true,  false, 0, 1, 0, 0, "Qwen/Qwen3-1.7B config.json"},
      {"llama-2-7b",    "llama",   4096, 32, 32, 32, 128, 11008,  32000,   4096, 1e4f,  1e-5f, false, false, 0, 1, 0, 0, "meta-llama/Llama-2-7b-hf config.json"},
      {"llama-2-13b",   "llama",   5120, 40, 40, 40, 128, 13824,  32000,   4096, 1e4f,  1e-5f, false, false, 0, 1, 0, 0, "meta-llama/Llama-2-13b-hf config.json"},
      {"llama-2-70b",   "llama",   8192, 80, 64,  8, 128, 28672,  32000,   4096, 1e4f,  1e-5f, false, false, 0, 1, 0, 0, "meta-llama/Llama-2-70b-hf config.json"},
      {"llama-3-8b",    "llama",   4096, 32, 32,  8, 128, 14336, 128256,   8192, 5e5f,  1e-5f, false, false, 0, 1, 0, 0, "meta-llama/Meta-Llama-3-8B config.json"},
      {"llama-3-70b",   "llama",   8192, 80, 64,  8, 128, 28672, 128256,   8192, 5e5f,  1e-5f, false, false, 0, 1, 0, 0, "meta-llama/Meta-Llama-3-70B config.json"},
      {"llama-3.1-8b",  "llama",   4096, 32, 32,  8, 128, 14336, 128256, 131072, 5e5f,  1e-5f, false, false, 0, 1, 0, 0, "meta-llama/Llama-3.1-8B config.json"},
      {"llama-3.1-70b", "llama",   8192, 80, 64,  8, 128, 28672, 128256, 131072, 5e5f,  1e-5f, false, false, 0, 1, 0, 0, "meta-llama/Llama-3.1-70B config.json"},
      {"llama-3.2-1b",  "llama",   2048, 16, 32,  8,  64,  8192, 128256, 131072, 5e5f,  1e-5f, true,  false, 0, 1, 0, 0, "meta-llama/Llama-3.2-1B config.json"},
      {"llama-3.2-3b",  "llama",   3072, 28, 24,  8, 128,  8192, 128256, 131072, 5e5f,  1e-5f, true,  false, 0, 1, 0, 0, "meta-llama/Llama-3.2-3B config.json"},
      {"smollm2-135m",  "llama",    576, 30,  9,  3,  64,  1536,  49152,   8192, 1e5f,  1e-5f, true,  false, 0, 1, 0, 0, "HuggingFaceTB/SmolLM2-135M config.json"},
      {"smollm2-360m",  "llama",    960, 32, 15,  5,  64,  2560,  49152,   8192, 1e5f,  1e-5f, true,  false, 0, 1, 0, 0, "HuggingFaceTB/SmolLM2-360M config.json"},
      {"smollm2-1.7b",  "llama",   2048, 24, 32, 32,  64,  8192,  49152,   8192, 1.3e5f, 1e-5f, true, false, 0, 1, 0, 0, "HuggingFaceTB/SmolLM2-1.7B config.json"},
      {"gemma2-2b",     "gemma2",  2304, 26,  8,  4, 256,  9216, 256000,   8192, 1e4f,  1e-6f, true,  false, 4096, 2, 50, 30, "google/gemma-2-2b config.json"},
      {"gemma3-1b",     "gemma3",  1152, 26,  4,  1, 256,  6912, 262144,  32768, 1e6f,  1e-6f, true,  false, 512, 6, 0, 0, "google/gemma-3-1b-pt config.json"},
      {"phi3-mini",     "phi3",    3072, 32, 32, 32,  96,  8192,  32064,   4096, 1e4f,  1e-5f, false, false, 2047, 1, 0, 0, "microsoft/Phi-3-mini-4k-instruct config.json"},
      {"mistral-7b",    "llama",   4096, 32, 32,  8, 128, 14336,  32000,  32768, 1e4f,  1e-5f, false, false, 4096, 1, 0, 0, "mistralai/Mistral-7B-v0.1 config.json"},
      // mixtures of experts (their experts: kMoe below)
      {"olmoe-1b-7b",   "olmoe",   2048, 16, 16, 16, 128,  1024,  50304,   4096, 1e4f,  1e-5f, false, false, 0, 1, 0, 0, "allenai/OLMoE-1B-7B-0924 config.json"},
      {"qwen3-30b-a3b", "qwen3moe", 2048, 48, 32, 4, 128,  6144, 151936,  40960, 1e6f,  1e-6f, false, false, 0, 1, 0, 0, "Qwen/Qwen3-30B-A3B config.json"},
      {"qwen1.5-moe-a2.7b", "qwen2moe", 2048, 24, 16, 16, 128, 5632, 151936, 8192, 1e6f, 1e-6f, false, true, 0, 1, 0, 0, "Qwen/Qwen1.5-MoE-A2.7B config.json"},
      {"mixtral-8x7b",  "llama",   4096, 32, 32,  8, 128, 14336,  32000,  32768, 1e6f,  1e-5f, false, false, 0, 1, 0, 0, "mistralai/Mixtral-8x7B-v0.1 config.json"},
      // multi-head latent attention (kMla below): head_dim is q/k's per head (128 + 64 rotated)
      {"deepseek-v2-lite", "deepseek2", 2048, 27, 16, 16, 192, 10944, 102400, 163840, 1e4f, 1e-6f, false, false, 0, 1, 0, 0, "deepseek-ai/DeepSeek-V2-Lite config.json"},
  };
  return kShapes;
}

const KnownShape* find_known_shape(std::string_view name) {
  for (const KnownShape& s : known_shapes())
    if (name == s.name) return &s;
  return nullptr;
}

const KnownMoe* find_known_moe(std::string_view name) {
  // name, experts, used per token, expert ffn, shared expert ffn (the same config.json files)
  static constexpr KnownMoe kMoe[] = {
      {"olmoe-1b-7b", 64, 8, 1024, 0},
      {"qwen3-30b-a3b", 128, 8, 768, 0},
      {"qwen1.5-moe-a2.7b", 60, 4, 1408, 5632},
      {"mixtral-8x7b", 8, 2, 14336, 0},
      {"deepseek-v2-lite", 64, 6, 1408, 2 * 1408},
  };
  for (const KnownMoe& m : kMoe)
    if (name == m.name) return &m;
  return nullptr;
}

const KnownMla* find_known_mla(std::string_view name) {
  // name, q_lora_rank (null: 0), kv_lora_rank, qk_rope_head_dim, v_head_dim, first_k_dense_replace,
  // n_shared_experts, routed_scaling_factor, rope_scaling yarn factor /
  // original_max_position_embeddings, 0.1 * mscale_all_dim (the converter's yarn_log_multiplier)
  static constexpr KnownMla kMla[] = {
      {"deepseek-v2-lite", 0, 512, 64, 128, 1, 2, 1.0f, 40.0f, 4096, 0.0707f},
  };
  for (const KnownMla& m : kMla)
    if (name == m.name) return &m;
  return nullptr;
}

}  // namespace lumen::model
