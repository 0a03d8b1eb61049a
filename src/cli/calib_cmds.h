// The calibration commands (the calib layer): `lumen imatrix` (an importance matrix from
// calibration text, llama.cpp's file format). `lumen perplexity` (with its KL-divergence
// mode) is declared with the engine commands in common.h.
#pragma once

#include <string>

#include "cli/args.h"
#include "engine/engine.h"

namespace lumen::cli {

// argv[first] is the first argument after the subcommand name; returns the exit code.
int cmd_imatrix(int argc, char** argv, int first);

// Shared by imatrix and perplexity (perplexity_cmd.cc):
//   prints "error: MSG" and returns code
int calib_fail(const std::string& msg, int code);
//   c evaluates one chunk of c.n_ctx tokens per pass, with logits at every position (one
//   sequence; the batch is the chunk unless --batch-size says otherwise)
void set_chunk_batch(const ArgParser& args, engine::EngineConfig& c);

}  // namespace lumen::cli
