#pragma once

#include <cstdint>

#include "cli/common.h"

namespace lumen::cli {

// lumen bench --json-schema FILE | --grammar-file FILE: decoding with and without the
// grammar, alternating, and the per-step mask cost (bench_grammar.cc). `base` is the
// bench's engine config.
int run_grammar_bench(const ArgParser& args, engine::EngineConfig base, int64_t n_gen, int64_t reps, bool json);

}  // namespace lumen::cli
