// lumen perplexity: llama-perplexity's method. The text is tokenized once (BOS added as the
// model says), cut into whole chunks of n_ctx tokens (the tail is unused), each chunk is
// evaluated from an empty cache with its first token replaced by BOS, and only the second
// half of every chunk is scored, so each scored token sees at least n_ctx/2 of context:
//   ppl = exp(-(1/N) * sum log p(tokens[k+1] | tokens[start..k])),  k in [n_ctx/2, n_ctx-2]
#include <cmath>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "base/mapped_file.h"
#include "cli/common.h"

namespace lumen::cli {

int cmd_perplexity(int argc, char** argv, int first) {
  std::vector<OptionSpec> specs = engine_option_specs();
  specs.push_back({{"-f", "--file"}, "PATH", "text file to score"});
  specs.push_back({{"--chunks"}, "N", "score at most N chunks (default: all)"});
  specs.push_back({{"--json"}, "", "print {\"ppl\", \"n_chunks\", \"n_tokens_scored\", ...}"});
  ArgParser args("perplexity", "lumen perplexity -m MODEL -f TEXT [-c 512] [--json]", specs);
  int rc = 0;
  if (!parse_or_report(args, argc, argv, first, rc)) return rc;
  auto config = engine_config_from_args(args);
  auto max_chunks = args.get_int("--chunks", -1, -1, 1 << 30);
  for (const Status* st : {&config.status(), &max_chunks.status()}) {
    if (!st->ok()) {
      std::fprintf(stderr, "error: %s\n", st->message().c_str());
      return 2;
    }
  }
  auto path = args.get("--file");
  if (!path) {
    std::fprintf(stderr, "error: missing -f/--file TEXT\n");
    return 2;
  }
  auto text = read_text_file(*path);
  if (!text.ok()) {
    std::fprintf(stderr, "error: --file: %s\n", text.message().c_str());
    return 2;
  }
  engine::EngineConfig c = *config;
  if (c.n_ctx <= 0) c.n_ctx = 512;
  if (c.n_ctx < 4) {
    std::fprintf(stderr, "error: -c must be at least 4 for perplexity\n");
    return 2;
  }
  if (!args.has("--batch-size")) c.max_batch_tokens = c.n_ctx;
  c.max_logit_rows = c.max_batch_tokens;
  c.max_seqs = 1;
  std::unique_ptr<engine::Engine> eng = load_engine_or_report(args, c);
  if (!eng) return 1;
  const tok::Tokenizer& tk = eng->tokenizer();
  const std::vector<int32_t> tokens = tk.encode(*text, true, false);
  const int64_t n_ctx = c.n_ctx;
  int64_t n_chunks = static_cast<int64_t>(tokens.size()) / n_ctx;
  if (*max_chunks >= 0) n_chunks = std::min<int64_t>(n_chunks, *max_chunks);
  if (n_chunks == 0) {
    std::fprintf(stderr, "error: the text has %zu tokens, fewer than one chunk of %lld (-c)\n",
                 tokens.size(), static_cast<long long>(n_ctx));
    return 1;
  }
  const int64_t first_scored = n_ctx / 2;
  double nll_sum = 0.0;
  int64_t count = 0;
  const bool json = args.has("--json");
  if (!json)
    std::fprintf(stderr, "perplexity: %zu tokens, %lld chunks of %lld, scoring positions >= %lld\n",
                 tokens.size(), static_cast<long long>(n_chunks), static_cast<long long>(n_ctx),
                 static_cast<long long>(first_scored));
  for (int64_t ci = 0; ci < n_chunks; ++ci) {
    engine::Request req;
    req.prompt_ids.assign(tokens.begin() + ci * n_ctx, tokens.begin() + (ci + 1) * n_ctx);
    if (tk.add_bos() && tk.bos_id() >= 0) req.prompt_ids[0] = tk.bos_id();
    req.params.max_tokens = 0;
    req.params.prompt_logprobs = true;
    req.params.sampling.temperature = 0;
    auto id = eng->add_request(std::move(req));
    if (!id.ok()) {
      std::fprintf(stderr, "error: %s\n", id.message().c_str());
      return 1;
    }
    while (eng->has_work()) {
      for (engine::RequestEvent& ev : eng->step()) {
        for (size_t k = first_scored; k < ev.prompt_logprobs.size(); ++k) {
          nll_sum -= ev.prompt_logprobs[k];
          ++count;
        }
        if (ev.finish_reason == engine::FinishReason::kError) {
          std::fprintf(stderr, "error: %s\n", ev.error.c_str());
          return 1;
        }
      }
    }
    if (!json) {
      std::printf("[%lld]%.4f,", static_cast<long long>(ci + 1), std::exp(nll_sum / count));
      std::fflush(stdout);
    }
  }
  const double ppl = std::exp(nll_sum / count);
  if (json) {
    nlohmann::json j = {{"ppl", ppl},          {"n_chunks", n_chunks}, {"n_tokens_scored", count},
                        {"nll_sum", nll_sum},  {"n_ctx", n_ctx},       {"n_tokens", tokens.size()}};
    std::puts(j.dump().c_str());
  } else {
    std::printf("\nFinal estimate: PPL = %.4f (%lld tokens scored in %lld chunks)\n", ppl,
                static_cast<long long>(count), static_cast<long long>(n_chunks));
  }
  return 0;
}

}  // namespace lumen::cli
