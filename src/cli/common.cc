#include "cli/common.h"

#include <cstdlib>

#include <algorithm>
#include <cstdio>
#include <random>
#include <thread>

#include "base/log.h"
#include "base/mapped_file.h"
#include "cli/cache_cmd.h"
#include "cli/progress_bar.h"
#include "grammar/compiled_grammar.h"
#include "grammar/json_schema.h"
#include "kernels/ops.h"

namespace lumen::cli {

std::vector<OptionSpec> engine_option_specs() {
  return {
      {{"-m", "--model"}, "PATH", "model: .gguf file, Hugging Face directory, or llama2.c .bin"},
      {{"-t", "--threads"}, "N", "compute threads (default: all cores)"},
      {{"-c", "--ctx-size"}, "N", "context size in tokens (default: min(trained, 4096))"},
      {{"-b", "--batch-size"}, "N", "tokens per forward step / prefill chunk (default 512)"},
      {{"--kv-type"}, "TYPE", "KV cache type of K and V: f16 (default), f32, bf16, q8_0, q4_0"},
      {{"-ctk", "--cache-type-k"}, "TYPE", "KV cache type of K (overrides --kv-type)"},
      {{"-ctv", "--cache-type-v"}, "TYPE", "KV cache type of V (overrides --kv-type)"},
      {{"-fa", "--flash-attn"}, "on|off|auto", "flash attention (default auto: on for bf16 / q8_0 / q4_0 caches, "
                                               "which only it reads)"},
      {{"--rotate-k"}, "", "rotate K and Q per head (randomized Hadamard) before K is cached: less error in a "
                           "q8_0 / q4_0 K cache, same q.k"},
      {{"--mla-expand"}, "N|off", "multi-head latent attention (deepseek2): a sequence's step of at least N "
                                  "tokens runs in the expanded form, a smaller one in the absorbed form (default 64, "
                                  "measured: docs/perf.md); off: always absorbed"},
      {{"--reference-kernels"}, "", "use the scalar reference kernels (debugging)"},
      {{"--no-interleave"}, "", "keep the matrices in the file's layout (no copy; slower decode)"},
      {{"--refresh-pages"}, "", "if the GGUF file sits in the page cache mostly on 4 KiB pages, drop and re-read it "
                                "once so that its weights map on 2 MiB pages (one cold read; faster decode after)"},
      {{"--cache-dir"}, "DIR", "where interleaved weights are cached, '' = in memory only (default "
                               "$LUMEN_CACHE_DIR, else $XDG_CACHE_HOME/lumen, else ~/.cache/lumen)"},
      {{"-v", "--verbose"}, "", "log what the engine does to stderr"},
  };
}

std::vector<OptionSpec> spec_option_specs() {
  return {
      {{"--spec"}, "KIND", "speculative decoding: 'ngram' (prompt lookup over the request's own tokens)"},
      {{"--draft-model"}, "PATH", "speculative decoding with this draft model (same vocabulary as -m)"},
      {{"--ngram-min"}, "N", "with --spec ngram: shortest n-gram matched (default 2)"},
      {{"--ngram-max"}, "N", "with --spec ngram: longest n-gram matched, tried first (default 4)"},
      {{"--draft-max"}, "N", "speculative tokens proposed per step at most (default: chosen from the verify cost measured at start)"},
      {{"--draft-min"}, "N", "fewer proposals than this are not verified (default 1)"},
      {{"--spec-knee"}, "N", "no proposals once a step already holds N tokens (default 64)"},
  };
}

Status spec_config_from_args(const ArgParser& args, spec::SpecConfig* c) {
  if (args.has("--spec")) {
    const std::string kind = args.get_or("--spec", "");
    if (kind != "ngram") return error("--spec: '" + kind + "' is not a proposer (ngram)");
    c->kind = spec::ProposerKind::kNgram;
  }
  if (auto draft = args.get("--draft-model")) {
    if (c->kind != spec::ProposerKind::kNone) return error("--draft-model: give one of --draft-model and --spec");
    c->kind = spec::ProposerKind::kDraft;
    c->draft_model = *draft;
  }
  for (const char* flag : {"--ngram-min", "--ngram-max"})
    if (args.has(flag) && c->kind != spec::ProposerKind::kNgram) return error(std::string(flag) + ": needs --spec ngram");
  for (const char* flag : {"--draft-max", "--draft-min", "--spec-knee"})
    if (args.has(flag) && c->kind == spec::ProposerKind::kNone)
      return error(std::string(flag) + ": needs --spec ngram or --draft-model");
  LUMEN_ASSIGN_OR_RETURN(int64_t nmin, args.get_int("--ngram-min", 2, 1, 64));
  LUMEN_ASSIGN_OR_RETURN(int64_t nmax, args.get_int("--ngram-max", std::max<int64_t>(4, nmin), 1, 64));
  LUMEN_ASSIGN_OR_RETURN(int64_t dmax, args.get_int("--draft-max", 0, 1, 64));
  LUMEN_ASSIGN_OR_RETURN(int64_t dmin, args.get_int("--draft-min", 1, 1, 64));
  LUMEN_ASSIGN_OR_RETURN(int64_t knee, args.get_int("--spec-knee", 64, 1, 1 << 20));
  c->ngram_min = static_cast<int32_t>(nmin);
  c->ngram_max = static_cast<int32_t>(nmax);
  c->draft_max = static_cast<int32_t>(dmax);
  c->draft_min = static_cast<int32_t>(dmin);
  c->max_step_tokens = static_cast<int32_t>(knee);
  return spec::validate(*c);
}

std::vector<OptionSpec> sampling_option_specs() {
  return {
      {{"-n", "--n-predict"}, "N", "tokens to generate at most (default 128; -1: until context is full)"},
      {{"--temp"}, "T", "temperature; 0 = greedy (default 0.8)"},
      {{"--top-k"}, "K", "top-k sampling, 0 = off (default 40)"},
      {{"--top-p"}, "P", "top-p (nucleus) sampling, 1 = off (default 0.95)"},
      {{"--min-p"}, "P", "min-p sampling, 0 = off (default 0.05)"},
      {{"--repeat-penalty"}, "X", "repetition penalty, 1 = off (default 1.0)"},
      {{"--repeat-last-n"}, "N", "window of the penalties in tokens (default 64, -1 = all)"},
      {{"--presence-penalty"}, "X", "presence penalty (default 0)"},
      {{"--frequency-penalty"}, "X", "frequency penalty (default 0)"},
      {{"-s", "--seed"}, "N", "random seed (default: random)"},
      {{"--ignore-eos"}, "", "do not stop at end-of-generation tokens"},
      {{"--stop"}, "TEXT", "stop string (repeatable)", true},
  };
}

std::vector<OptionSpec> context_shift_option_specs() {
  return {
      {{"--keep"}, "N", "context shift: tokens kept after the BOS when a full context drops the oldest "
                        "half of the rest (default: run 0, chat the system message; run -1: the prompt)"},
      {{"--no-context-shift"}, "", "end the reply when the context is full instead of shifting it"},
      {{"--shift-mode"}, "MODE", "context shift: 'rerope' (default: the kept cache's K rotated to its new "
                                 "positions, as llama.cpp) or 'recompute' (exact: what a fresh run over the kept "
                                 "tokens gives; always used with sliding windows)"},
  };
}

Status context_shift_mode_from_args(const ArgParser& args, engine::EngineConfig* c) {
  const std::string mode = args.get_or("--shift-mode", "rerope");
  if (mode == "rerope") c->context_shift_mode = engine::ContextShiftMode::kReRope;
  else if (mode == "recompute") c->context_shift_mode = engine::ContextShiftMode::kRecompute;
  else return error("--shift-mode: '" + mode + "' is not a mode (rerope or recompute)");
  return Status();
}

Status context_shift_from_args(const ArgParser& args, int32_t n_bos, int32_t n_default, int32_t n_all,
                               engine::GenerationParams* g) {
  g->context_shift = !args.has("--no-context-shift");
  if (!args.has("--keep")) {
    g->n_keep = n_default;
    return Status();
  }
  if (!g->context_shift) return error("--keep: there is no context shift (--no-context-shift)");
  LUMEN_ASSIGN_OR_RETURN(int64_t keep, args.get_int("--keep", 0, -1, 1 << 20));
  g->n_keep = keep < 0 ? n_all : static_cast<int32_t>(keep) + n_bos;
  return Status();
}

std::vector<OptionSpec> concat(std::vector<OptionSpec> a, const std::vector<OptionSpec>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

std::string default_cache_dir() {
  auto env = [](const char* name) -> std::string {
    const char* v = std::getenv(name);
    return v ? v : "";
  };
  if (!env("LUMEN_CACHE_DIR").empty()) return env("LUMEN_CACHE_DIR");
  if (!env("XDG_CACHE_HOME").empty()) return env("XDG_CACHE_HOME") + "/lumen";
  if (!env("HOME").empty()) return env("HOME") + "/.cache/lumen";
  return "";
}

Status kv_config_from_args(const ArgParser& args, engine::EngineConfig* c) {
  auto type_of = [&](const char* flag, DType fallback) -> Result<DType> {
    const auto name = args.get(flag);
    if (!name) return fallback;
    const DTypeInfo* info = find_dtype_by_name(*name);
    if (info == nullptr || !kernels::kv_cache_supports(info->dtype))
      return error(std::string(flag) + ": '" + *name + "' is not a KV cache type (" + kernels::kv_cache_type_names() +
                   ")");
    return info->dtype;
  };
  LUMEN_ASSIGN_OR_RETURN(const DType both, type_of("--kv-type", DType::kF16));
  LUMEN_ASSIGN_OR_RETURN(c->kv_dtypes.k, type_of("--cache-type-k", both));
  LUMEN_ASSIGN_OR_RETURN(c->kv_dtypes.v, type_of("--cache-type-v", both));
  const std::string fa = args.get_or("--flash-attn", "auto");
  if (fa == "on" || fa == "1") c->flash_attn = engine::FlashAttn::kOn;
  else if (fa == "off" || fa == "0") c->flash_attn = engine::FlashAttn::kOff;
  else if (fa == "auto") c->flash_attn = engine::FlashAttn::kAuto;
  else return error("-fa/--flash-attn: '" + fa + "' is not on, off or auto");
  c->rotate_k = args.has("--rotate-k");
  // The same checks the engine makes, before a model is loaded.
  LUMEN_TRY(engine::check_rotate_k(c->rotate_k, c->kv_dtypes));
  return engine::resolve_flash_attn(c->flash_attn, c->kv_dtypes).status();
}

Result<engine::EngineConfig> engine_config_from_args(const ArgParser& args, bool threads) {
  engine::EngineConfig c;
  if (!args.get("--model")) return error("missing -m/--model PATH");
  if (threads) {
    LUMEN_ASSIGN_OR_RETURN(int64_t n_threads, args.get_int("--threads", 0, 1, 1024));
    c.n_threads = static_cast<int>(n_threads);
  }
  LUMEN_ASSIGN_OR_RETURN(int64_t ctx, args.get_int("--ctx-size", 0, 0, 1 << 20));
  c.n_ctx = static_cast<int32_t>(ctx);
  LUMEN_ASSIGN_OR_RETURN(int64_t batch, args.get_int("--batch-size", 512, 1, 1 << 16));
  c.max_batch_tokens = static_cast<int32_t>(batch);
  LUMEN_TRY(kv_config_from_args(args, &c));
  if (args.get_or("--mla-expand", "") == "off") {
    c.mla_expand_tokens = -1;
  } else if (args.has("--mla-expand")) {
    LUMEN_ASSIGN_OR_RETURN(int64_t mla_expand, args.get_int("--mla-expand", 0, 1, 1 << 30));
    c.mla_expand_tokens = static_cast<int32_t>(mla_expand);
  }
  c.use_reference_kernels = args.has("--reference-kernels");
  c.interleave_weights = !args.has("--no-interleave");
  c.refresh_page_cache = args.has("--refresh-pages");
  c.interleave_cache_dir = args.has("--cache-dir") ? args.get_or("--cache-dir", "") : default_cache_dir();
  return c;
}

Result<engine::GenerationParams> generation_params_from_args(const ArgParser& args) {
  engine::GenerationParams g;
  LUMEN_ASSIGN_OR_RETURN(int64_t n, args.get_int("--n-predict", 128, -1, 1 << 24));
  g.max_tokens = n < 0 ? (1 << 30) : static_cast<int32_t>(n);
  sample::SamplingParams& s = g.sampling;
  LUMEN_ASSIGN_OR_RETURN(double temp, args.get_float("--temp", 0.8, 0.0, 100.0));
  s.temperature = static_cast<float>(temp);
  LUMEN_ASSIGN_OR_RETURN(int64_t top_k, args.get_int("--top-k", 40, 0, 1 << 24));
  s.top_k = static_cast<int32_t>(top_k);
  LUMEN_ASSIGN_OR_RETURN(double top_p, args.get_float("--top-p", 0.95, 1e-6, 1.0));
  s.top_p = static_cast<float>(top_p);
  LUMEN_ASSIGN_OR_RETURN(double min_p, args.get_float("--min-p", 0.05, 0.0, 1.0));
  s.min_p = static_cast<float>(min_p);
  LUMEN_ASSIGN_OR_RETURN(double rp, args.get_float("--repeat-penalty", 1.0, 1e-3, 100.0));
  s.repeat_penalty = static_cast<float>(rp);
  LUMEN_ASSIGN_OR_RETURN(int64_t last_n, args.get_int("--repeat-last-n", 64, -1, 1 << 24));
  s.penalty_last_n = static_cast<int32_t>(last_n);
  LUMEN_ASSIGN_OR_RETURN(double pp, args.get_float("--presence-penalty", 0.0, -10.0, 10.0));
  s.presence_penalty = static_cast<float>(pp);
  LUMEN_ASSIGN_OR_RETURN(double fp, args.get_float("--frequency-penalty", 0.0, -10.0, 10.0));
  s.frequency_penalty = static_cast<float>(fp);
  if (args.has("--seed")) {
    LUMEN_ASSIGN_OR_RETURN(int64_t seed, args.get_int("--seed", 0, 0, INT64_MAX));
    s.seed = static_cast<uint64_t>(seed);
  } else {
    s.seed = std::random_device{}();
  }
  g.ignore_eos = args.has("--ignore-eos");
  g.stop = args.get_all("--stop");
  return g;
}

bool parse_or_report(ArgParser& args, int argc, char** argv, int first, int& exit_code) {
  Status st = args.parse(argc, argv, first);
  if (!st.ok()) {
    std::fprintf(stderr, "error: %s\n", st.message().c_str());
    exit_code = 2;
    return false;
  }
  if (args.help_requested()) {
    std::fputs(args.help_text().c_str(), stdout);
    exit_code = 0;
    return false;
  }
  if (args.has("--verbose")) set_log_level(LogLevel::kInfo);
  return true;
}

int threads_or_all_cores(int64_t requested) {
  return requested > 0 ? static_cast<int>(requested) : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

Result<engine::RequestTimings> run_until_idle(engine::Engine& eng, engine::Request req,
                                              const std::function<void(const engine::RequestEvent&)>& on_event) {
  auto id = eng.add_request(std::move(req));
  if (!id.ok()) return id.status();
  std::string err;
  while (eng.has_work()) {
    for (const engine::RequestEvent& ev : eng.step()) {
      on_event(ev);
      if (ev.finish_reason == engine::FinishReason::kError) err = ev.error;
    }
  }
  if (!err.empty()) return error(err);
  return eng.timings(*id).value_or(engine::RequestTimings{});
}

std::unique_ptr<engine::Engine> load_engine_or_report(const ArgParser& args,
                                                      const engine::EngineConfig& config) {
  return load_engine_or_report(*args.get("--model"), config);
}

std::unique_ptr<engine::Engine> load_engine_or_report(const std::string& model_path,
                                                      const engine::EngineConfig& config_in) {
  LoadProgress progress(stderr);
  engine::EngineConfig config = config_in;
  if (!config.load_progress) config.load_progress = &progress;
  auto e = engine::Engine::create(model_path, config);
  if (!e.ok()) {
    std::fprintf(stderr, "error: %s\n", e.message().c_str());
    return nullptr;
  }
  report_cache_write(**e, config.interleave_cache_dir);
  const model::HParams& hp = (*e)->hparams();
  const int32_t n_ctx = (*e)->config().n_ctx;
  if (hp.n_ctx_train > 0 && n_ctx > hp.n_ctx_train && hp.rope_scaling_type.empty() && hp.rope_freq_scale == 1.0f)
    std::fprintf(stderr,
                 "warning: -c %d is beyond the %d tokens this model was trained with, and the model states no "
                 "RoPE scaling: expect output to degrade past token %d (use -c %d or less)\n",
                 n_ctx, hp.n_ctx_train, hp.n_ctx_train, hp.n_ctx_train);
  return std::move(e).value();
}

std::vector<OptionSpec> grammar_option_specs() {
  return {
      {{"--json-schema"}, "PATH", "constrain the output to JSON valid under this JSON Schema"},
      {{"--grammar-file"}, "PATH", "constrain the output to this GBNF grammar (llama.cpp's syntax)"},
  };
}

// The grammar --json-schema or --grammar-file asks for (null: neither), compiled for the model.
Result<std::shared_ptr<const grammar::CompiledGrammar>> grammar_from_args(const ArgParser& args,
                                                                          const engine::Engine& eng) {
  const auto schema = args.get("--json-schema");
  const auto gfile = args.get("--grammar-file");
  if (schema && gfile) return error("--json-schema and --grammar-file: give one of them");
  if (!schema && !gfile) return std::shared_ptr<const grammar::CompiledGrammar>();
  return grammar_from_file(schema ? *schema : *gfile, schema.has_value(),
                           grammar::TokenTable::build(eng.tokenizer(), eng.hparams().n_vocab));
}

Result<std::shared_ptr<const grammar::CompiledGrammar>> grammar_from_file(
    const std::string& path, bool json_schema, std::shared_ptr<const grammar::TokenTable> vocab) {
  const std::string flag = json_schema ? "--json-schema" : "--grammar-file";
  auto text = read_text_file(path);
  if (!text.ok()) return error(flag + ": " + text.message());
  std::string gbnf = std::move(text).value();
  if (json_schema) {
    auto converted = grammar::json_schema_to_gbnf(gbnf);
    if (!converted.ok()) return error(flag + " " + path + ": " + converted.message());
    gbnf = std::move(converted).value();
  }
  auto g = grammar::CompiledGrammar::from_gbnf(gbnf, std::move(vocab));
  if (!g.ok()) return error(flag + " " + path + ": " + g.message());
  return std::move(g).value();
}

}  // namespace lumen::cli
