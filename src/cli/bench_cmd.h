#pragma once

namespace lumen::cli {

// lumen bench: prompt processing (pp) and token generation (tg) rates, like llama-bench,
// measured through the engine, with bytes moved, % of measured bandwidth and a logits hash.
int cmd_bench(int argc, char** argv, int first);

}  // namespace lumen::cli
