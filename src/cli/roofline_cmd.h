// lumen roofline: the prefill / decode limits of a model on a machine, as a capacity
// planner (memory footprint, KV tokens that fit, TTFT, per-token latency, batch
// throughput, speculative-decoding speedup), from a model file or a named shape, on a
// named machine or this one (measured). Human table, --json, or an SVG chart (--plot).
#pragma once

namespace lumen::cli {

// argv[first] is the first argument after "roofline". Returns the process exit code:
// 0 ok, 1 a file could not be read or written, 2 bad flags.
int cmd_roofline(int argc, char** argv, int first);

}  // namespace lumen::cli
