#pragma once

#include <cstdint>

#include "cli/common.h"

namespace lumen::cli {

// lumen bench --spec ngram|replay|random: plain and speculative greedy generation,
// alternating, on the same prompts (bench_spec.cc). `base` is the bench's engine config.
int run_spec_bench(const ArgParser& args, engine::EngineConfig base, int64_t n_gen, int64_t reps, bool json);

}  // namespace lumen::cli
