// Options and helpers shared by the subcommands.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cli/args.h"
#include "engine/engine.h"

namespace lumen::cli {

// -m, -t, -c, -b, --kv-type, -ctk, -ctv, -fa, --reference-kernels, --no-interleave, --cache-dir, -v
std::vector<OptionSpec> engine_option_specs();
// --temp, --top-k, --top-p, --min-p, --repeat-penalty, --repeat-last-n,
// --presence-penalty, --frequency-penalty, --seed, -n, --ignore-eos, --stop
std::vector<OptionSpec> sampling_option_specs();
// --spec, --draft-model, --ngram-min, --ngram-max, --draft-max, --draft-min, --spec-knee
std::vector<OptionSpec> spec_option_specs();
// Fills *c from those flags (errors name the flag; a tuning flag without --spec is one).
Status spec_config_from_args(const ArgParser& args, spec::SpecConfig* c);
// --keep, --no-context-shift, --shift-mode (lumen run and chat)
std::vector<OptionSpec> context_shift_option_specs();
// --shift-mode rerope|recompute -> c->context_shift_mode.
Status context_shift_mode_from_args(const ArgParser& args, engine::EngineConfig* c);
// Sets g->context_shift and g->n_keep from those flags. --keep N counts tokens after the
// BOS (as llama.cpp's): n_keep = N + n_bos; --keep -1: n_all (run: the whole prompt);
// without --keep: n_default (run: the BOS; chat: BOS and system message).
Status context_shift_from_args(const ArgParser& args, int32_t n_bos, int32_t n_default, int32_t n_all,
                               engine::GenerationParams* g);
std::vector<OptionSpec> concat(std::vector<OptionSpec> a, const std::vector<OptionSpec>& b);

// --kv-type, -ctk, -ctv, -fa into *c (errors name the flag and the allowed values).
Status kv_config_from_args(const ArgParser& args, engine::EngineConfig* c);
// threads: whether -t is one number to read (lumen bench reads its list itself).
Result<engine::EngineConfig> engine_config_from_args(const ArgParser& args, bool threads = true);
// Where interleaved weights are cached by default: $LUMEN_CACHE_DIR, else
// $XDG_CACHE_HOME/lumen, else $HOME/.cache/lumen, else "" (in memory).
std::string default_cache_dir();
Result<engine::GenerationParams> generation_params_from_args(const ArgParser& args);
// --json-schema PATH / --grammar-file PATH (run, bench) and the grammar they ask for,
// compiled for the engine's vocabulary (null: neither given).
std::vector<OptionSpec> grammar_option_specs();
Result<std::shared_ptr<const grammar::CompiledGrammar>> grammar_from_args(const ArgParser& args,
                                                                          const engine::Engine& eng);
// One grammar file (a JSON Schema when json_schema, else GBNF) compiled for `vocab`; errors
// name the flag and the path.
Result<std::shared_ptr<const grammar::CompiledGrammar>> grammar_from_file(
    const std::string& path, bool json_schema, std::shared_ptr<const grammar::TokenTable> vocab);

// Parses argv, handling --help and -v; returns false (with exit_code set) when the
// command should stop (help printed or an error reported).
bool parse_or_report(ArgParser& args, int argc, char** argv, int first, int& exit_code);

// The thread count a `-t N` asks for: N, or every core when N <= 0 (as the engine does).
int threads_or_all_cores(int64_t requested);

// Loads the engine, printing a clear error on failure (nullptr).
std::unique_ptr<engine::Engine> load_engine_or_report(const ArgParser& args,
                                                      const engine::EngineConfig& config);
// The same for a model path of the caller's choice (lumen bench with several -m).
std::unique_ptr<engine::Engine> load_engine_or_report(const std::string& model_path,
                                                      const engine::EngineConfig& config);

// A benchmark's run: adds `req`, steps the engine until it is idle and passes each event to
// on_event. The request's timings, or the error of adding it or of an event.
Result<engine::RequestTimings> run_until_idle(engine::Engine& eng, engine::Request req,
                                              const std::function<void(const engine::RequestEvent&)>& on_event);

// Commands (argv[first] is the first argument after the subcommand name).
int cmd_run(int argc, char** argv, int first);
int cmd_chat(int argc, char** argv, int first);
int cmd_tokenize(int argc, char** argv, int first);
int cmd_embed(int argc, char** argv, int first);
int cmd_info(int argc, char** argv, int first);
int cmd_perplexity(int argc, char** argv, int first);

}  // namespace lumen::cli
