// The convert layer's commands: `lumen synth` (random-weight GGUF at a real model's shape)
// and `lumen quantize` (any model container -> quantized GGUF). main.cc dispatches to them;
// they live in their own header so cli/common.h stays the dispatcher's.
#pragma once

namespace lumen::cli {

// argv[first] is the first argument after the subcommand name; returns the exit code.
int cmd_synth(int argc, char** argv, int first);
int cmd_quantize(int argc, char** argv, int first);

}  // namespace lumen::cli
