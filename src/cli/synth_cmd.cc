// lumen synth: a random-weight GGUF at a real model's shape, with a real tokenizer, for
// benchmarks (see convert/synth.h for the presets, weights and type rules).
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "base/shared_dir.h"
#include "cli/common.h"
#include "cli/convert_cmds.h"
#include "convert/synth.h"

namespace lumen::cli {

int cmd_synth(int argc, char** argv, int first) {
  std::string presets;
  for (std::string_view p : convert::synth_preset_names()) presets += (presets.empty() ? "" : ", ") + std::string(p);
  ArgParser args("synth", "lumen synth --preset NAME --type TYPE -o OUT.gguf [overrides]",
                 {
                     {{"--preset"}, "NAME", "model shape: " + presets},
                     {{"--type"}, "TYPE", "a llama-quantize type (q8_0, q4_0, q4_k_m, ...; default q8_0); types lumen cannot multiply yet become q8_0"},
                     {{"-o", "--output"}, "PATH", "GGUF file to write (a directory with --format hf)"},
                     {{"--format"}, "FMT", "gguf (default) or hf: a Hugging Face directory of the same weights (f32)"},
                     {{"--hidden"}, "N", "override the hidden size"},
                     {{"--layers"}, "N", "override the number of layers"},
                     {{"--heads"}, "N", "override the number of attention heads"},
                     {{"--kv-heads"}, "N", "override the number of KV heads"},
                     {{"--ffn"}, "N", "override the MLP inner size"},
                     {{"--vocab"}, "N", "override the vocabulary size (the tokenizer is padded or truncated)"},
                     {{"--ctx"}, "N", "override the training context length"},
                     {{"--head-dim"}, "N", "override the head size (default hidden / heads; gemma and qwen3 differ)"},
                     {{"--sliding-window"}, "N", "override the sliding window (gemma2, gemma3, phi3; 0 = none)"},
                     {{"--experts"}, "N", "override the number of experts (MoE presets; llama: 0 = dense)"},
                     {{"--experts-used"}, "N", "override the experts each token is routed to"},
                     {{"--expert-ffn"}, "N", "override one expert's inner size (qwen2moe, qwen3moe; others: --ffn)"},
                     {{"--weight-std"}, "X", "standard deviation of the weights (default: the preset's)"},
                     {{"--norm-std"}, "X", "norm weights are 1 + N(0, X) (default: the preset's)"},
                     {{"--k-outliers"}, "N", "N outlier key channels per KV head in every layer (default 0)"},
                     {{"--k-outlier-scale"}, "X", "their attn_k rows scaled by X (default 16)"},
                     {{"--seed"}, "N", "random seed (default 42)"},
                     {{"--tokenizer"}, "PATH", "tokenizer.json to embed (default: the preset's, under $LUMEN_SHARED)"},
                     {{"--output-type"}, "TYPE", "type of the output matrix (default: q6_k for q4_k, else --type)"},
                     {{"--token-embd-type"}, "TYPE", "type of token_embd.weight of an untied model"},
                     {{"-t", "--threads"}, "N", "threads (default: all cores)"},
                     {{"-v", "--verbose"}, "", "verbose logging"},
                 });
  int rc = 0;
  if (!parse_or_report(args, argc, argv, first, rc)) return rc;
  auto fail = [](const std::string& msg) {
    std::fprintf(stderr, "error: %s\n", msg.c_str());
    return 2;
  };
  const auto preset = args.get("--preset");
  const auto out_path = args.get("--output");
  if (!preset) return fail("missing --preset NAME (" + presets + ")");
  if (!out_path) return fail("missing -o/--output PATH");
  if (!args.positional().empty()) return fail("unexpected argument '" + args.positional().front() + "'");

  Result<convert::SynthConfig> config = convert::synth_preset(*preset, shared_dir());
  if (!config.ok()) return fail(config.message());
  convert::SynthConfig& c = *config;
  Result<convert::TypeRules> rules = convert::make_type_rules(args.get_or("--type", "q8_0"), args.get_or("--output-type", ""),
                                                              args.get_or("--token-embd-type", ""));
  if (!rules.ok()) return fail(rules.message());
  c.rules = *rules;
  struct Override {
    const char* flag;
    int64_t* value;
    int64_t max;
  };
  for (const Override& o : {Override{"--hidden", &c.n_embd, 1 << 16}, Override{"--layers", &c.n_layer, 1024},
                            Override{"--heads", &c.n_head, 1024}, Override{"--kv-heads", &c.n_kv_head, 1024},
                            Override{"--ffn", &c.n_ff, 1 << 18}, Override{"--vocab", &c.n_vocab, 1 << 22},
                            Override{"--ctx", &c.n_ctx, 1 << 24}, Override{"--head-dim", &c.n_head_dim, 1024},
                            Override{"--sliding-window", &c.sliding_window, 1 << 24},
                            Override{"--experts", &c.n_expert, 4096}, Override{"--experts-used", &c.n_expert_used, 4096},
                            Override{"--expert-ffn", &c.n_ff_exp, 1 << 18}}) {
    const int64_t min_value =
        (o.value == &c.n_head_dim || o.value == &c.sliding_window || o.value == &c.n_expert) ? 0 : 1;
    Result<int64_t> v = args.get_int(o.flag, *o.value, min_value, o.max);
    if (!v.ok()) return fail(v.message());
    *o.value = *v;
  }
  for (auto [flag, value] : {std::pair{"--weight-std", &c.weight_std}, std::pair{"--norm-std", &c.norm_std}}) {
    Result<double> v = args.get_float(flag, *value, 0.0, 10.0);
    if (!v.ok()) return fail(v.message());
    *value = *v;
  }
  Result<int64_t> k_outliers = args.get_int("--k-outliers", 0, 0, 1 << 16);
  if (!k_outliers.ok()) return fail(k_outliers.message());
  c.k_outliers = *k_outliers;
  Result<double> k_scale = args.get_float("--k-outlier-scale", 16.0, 0.0, 1000.0);
  if (!k_scale.ok()) return fail(k_scale.message());
  c.k_outlier_scale = *k_scale;
  if (c.k_outliers == 0 && args.has("--k-outlier-scale")) return fail("--k-outlier-scale: needs --k-outliers N");
  Result<int64_t> seed = args.get_int("--seed", 42, 0, INT64_MAX);
  if (!seed.ok()) return fail(seed.message());
  c.seed = static_cast<uint64_t>(*seed);
  const int64_t n_cores = std::max(1u, std::thread::hardware_concurrency());
  Result<int64_t> threads = args.get_int("--threads", n_cores, 1, 1024);
  if (!threads.ok()) return fail(threads.message());
  c.n_threads = static_cast<int>(*threads);
  if (auto t = args.get("--tokenizer")) c.tokenizer_path = *t;
  if (Status st = convert::validate_synth_config(c); !st.ok()) return fail(st.message());

  const auto t0 = std::chrono::steady_clock::now();
  convert::SynthReport report;
  const std::string format = args.get_or("--format", "gguf");
  if (format != "gguf" && format != "hf") return fail("--format: '" + format + "' is not gguf or hf");
  Status st = format == "hf" ? convert::synth_model_hf(c, *out_path, &report) : convert::synth_model(c, *out_path, &report);
  if (!st.ok()) {
    std::fprintf(stderr, "error: %s\n", st.message().c_str());
    return 1;
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::string types;
  for (const auto& [dtype, n] : report.n_tensors_by_type)
    types += (types.empty() ? "" : ", ") + std::string(dtype_name(dtype)) + " " + std::to_string(n);
  std::printf("lumen synth: %s %s -> %s\n", c.name.c_str(), std::string(c.rules.mix->name).c_str(),
              out_path->c_str());
  std::printf("  %s: hidden %lld, %lld layers, %lld heads / %lld KV of %lld, ffn %lld, vocab %lld, ctx %lld, %s, seed %llu\n",
              c.arch.c_str(), static_cast<long long>(c.n_embd), static_cast<long long>(c.n_layer),
              static_cast<long long>(c.n_head), static_cast<long long>(c.n_kv_head), static_cast<long long>(c.head_dim()),
              static_cast<long long>(c.n_ff), static_cast<long long>(c.n_vocab), static_cast<long long>(c.n_ctx),
              c.tied ? "tied" : "untied", static_cast<unsigned long long>(c.seed));
  if (c.sliding_window > 0) std::printf("  sliding window %lld\n", static_cast<long long>(c.sliding_window));
  if (c.n_expert > 0)
    std::printf("  %lld experts, %lld used per token, expert ffn %lld\n", static_cast<long long>(c.n_expert),
                static_cast<long long>(c.n_expert_used), static_cast<long long>(c.ff_exp()));
  std::printf("  %.1fM params, %lld tensors (%s), %.1f MiB, %.1f s\n", report.n_params / 1e6,
              static_cast<long long>(report.n_tensors), types.c_str(), report.file_bytes / 1048576.0, secs);
  std::printf("  tokenizer: %s\n", report.tokenizer.c_str());
  return 0;
}

}  // namespace lumen::cli
