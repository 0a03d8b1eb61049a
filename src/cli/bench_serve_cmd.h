// lumen bench serve: a load generator for OpenAI-compatible servers on this machine.
#pragma once

namespace lumen::cli {

// argv[first] is the first argument after "bench serve".
int cmd_bench_serve(int argc, char** argv, int first);

}  // namespace lumen::cli
