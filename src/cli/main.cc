// lumen: the command-line front end. One binary, one subcommand per task; every
// subcommand that generates goes through the same engine.
#include <cstdio>
#include <cstring>
#include <string>

#include "cli/bench_cmd.h"
#include "cli/bench_serve_cmd.h"
#include "cli/cache_cmd.h"
#include "cli/calib_cmds.h"
#include "cli/common.h"
#include "cli/convert_cmds.h"
#include "cli/roofline_cmd.h"
#include "cli/serve_cmd.h"
#include "cli/version.h"

namespace {

void print_usage() {
  std::fputs(
      "usage: lumen COMMAND [options]   (lumen COMMAND --help for its options)\n"
      "       lumen --version\n\n"
      "commands:\n"
      "  run         generate a continuation of a prompt\n"
      "  chat        interactive chat with the model's chat template\n"
      "  serve       OpenAI-compatible HTTP server (continuous batching, prefix cache)\n"
      "  tokenize    text -> token ids (--vectors FILE.inp for conformance files)\n"
      "  embed       text -> its embedding (pooled, L2-normalised; as /v1/embeddings)\n"
      "  info        what a model file holds\n"
      "  perplexity  llama-perplexity's method over a text file (and its KL-divergence mode)\n"
      "  imatrix     an importance matrix from calibration text (llama.cpp's file format)\n"
      "  bench       prompt / generation speed vs this machine's bandwidth (like llama-bench)\n"
      "  bench serve load generator for OpenAI-compatible servers (TTFT, TPOT, goodput)\n"
      "  roofline    prefill / decode limits of a model on a machine (capacity planner)\n"
      "  synth       write a random-weight GGUF at a real model's shape\n"
      "  quantize    a model -> GGUF with llama-quantize's types and mixes (q4_k_m, q8_0, ...)\n"
      "  cache       ls | clear [MODEL] | prune: the interleaved-weight copies kept on disk (cap: LUMEN_CACHE_MAX)\n",
      stdout);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "--help") ||
      !std::strcmp(argv[1], "help")) {
    print_usage();
    return argc < 2 ? 2 : 0;
  }
  const std::string cmd = argv[1];
  if (cmd == "--version" || cmd == "version") {
    std::fputs(lumen::cli::version_text().c_str(), stdout);
    return 0;
  }
  using namespace lumen::cli;
  if (cmd == "run") return cmd_run(argc, argv, 2);
  if (cmd == "chat") return cmd_chat(argc, argv, 2);
  if (cmd == "tokenize") return cmd_tokenize(argc, argv, 2);
  if (cmd == "embed") return cmd_embed(argc, argv, 2);
  if (cmd == "info") return cmd_info(argc, argv, 2);
  if (cmd == "perplexity") return cmd_perplexity(argc, argv, 2);
  if (cmd == "imatrix") return cmd_imatrix(argc, argv, 2);
  if (cmd == "serve") return cmd_serve(argc, argv, 2);
  if (cmd == "bench" && argc > 2 && !std::strcmp(argv[2], "serve")) return cmd_bench_serve(argc, argv, 3);
  if (cmd == "bench") return cmd_bench(argc, argv, 2);
  if (cmd == "roofline") return cmd_roofline(argc, argv, 2);
  if (cmd == "synth") return cmd_synth(argc, argv, 2);
  if (cmd == "quantize") return cmd_quantize(argc, argv, 2);
  if (cmd == "cache") return cmd_cache(argc, argv, 2);
  std::fprintf(stderr, "error: unknown command '%s'\n\n", cmd.c_str());
  print_usage();
  return 2;
}
