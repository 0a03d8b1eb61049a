// lumen perplexity: llama-perplexity's method. The text is tokenized once (BOS added as the
// model says), cut into whole chunks of n_ctx tokens (the tail is unused), each chunk is
// evaluated from an empty cache with its first token replaced by BOS, and only the second
// half of every chunk is scored, so each scored token sees at least n_ctx/2 of context
// (calib/chunks.h):
//   ppl = exp(-(1/N) * sum log p(tokens[k+1] | tokens[start..k])),  k in [n_ctx/2, n_ctx-2]
//
// KL-divergence (calib/kld.h, llama-perplexity's file format and statistics):
//   --kl-divergence-base F                  also writes the log-probabilities of every
//                                           scored position to F (run it on the base model)
//   --kl-divergence-base F --kl-divergence  scores another model on F's tokens and compares:
//                                           mean / percentile KLD, Δppl, same top token, Δp
#include <unistd.h>

#include <cmath>
#include <optional>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "base/mapped_file.h"
#include "calib/chunks.h"
#include "calib/kld.h"
#include "cli/calib_cmds.h"
#include "cli/common.h"
#include "cli/progress_bar.h"

namespace lumen::cli {
namespace {

void print_kld_summary(const calib::KldSummary& s) {
  std::printf("====== Perplexity statistics ======\n");
  std::printf("Mean PPL(Q)                   : %10.6f ± %10.6f\n", s.ppl, s.ppl_unc);
  std::printf("Mean PPL(base)                : %10.6f ± %10.6f\n", s.ppl_base, s.ppl_base_unc);
  std::printf("Cor(ln(PPL(Q)), ln(PPL(base))): %6.2f%%\n", 100.0 * s.cor);
  std::printf("Mean ln(PPL(Q)/PPL(base))     : %10.6f ± %10.6f\n", s.log_ppl_ratio, s.log_ppl_ratio_unc);
  std::printf("Mean PPL(Q)/PPL(base)         : %10.6f ± %10.6f\n", s.ppl_ratio, s.ppl_ratio_unc);
  std::printf("Mean PPL(Q)-PPL(base)         : %10.6f ± %10.6f\n\n", s.ppl_diff, s.ppl_diff_unc);
  std::printf("====== KL divergence statistics ======\n");
  std::printf("Mean    KLD: %10.6f ± %10.6f\n", s.kld, s.kld_unc);
  std::printf("Maximum KLD: %10.6f\n99.9%%   KLD: %10.6f\n99.0%%   KLD: %10.6f\nMedian  KLD: %10.6f\n", s.kld_max,
              s.kld_999, s.kld_99, s.kld_median);
  std::printf("10.0%%   KLD: %10.6f\n 5.0%%   KLD: %10.6f\n 1.0%%   KLD: %10.6f\nMinimum KLD: %10.6f\n\n", s.kld_10,
              s.kld_5, s.kld_1, s.kld_min);
  std::printf("====== Token probability statistics ======\n");
  std::printf("Mean    Δp: %6.3f ± %5.3f %%\n", 100.0 * s.dp_mean, 100.0 * s.dp_mean_unc);
  const std::pair<const char*, double> dps[] = {
      {"Maximum Δp", s.dp_max}, {"99.9%   Δp", s.dp_999}, {"99.0%   Δp", s.dp_99}, {"95.0%   Δp", s.dp_95},
      {"90.0%   Δp", s.dp_90},  {"75.0%   Δp", s.dp_75},  {"Median  Δp", s.dp_median}, {"25.0%   Δp", s.dp_25},
      {"10.0%   Δp", s.dp_10},  {" 5.0%   Δp", s.dp_5},   {" 1.0%   Δp", s.dp_1},  {" 0.1%   Δp", s.dp_01},
      {"Minimum Δp", s.dp_min}};
  for (const auto& [label, v] : dps) std::printf("%s: %6.3f%%\n", label, 100.0 * v);
  std::printf("RMS Δp    : %6.3f ± %5.3f %%\n", 100.0 * s.dp_rms, 100.0 * s.dp_rms_unc);
  std::printf("Same top p: %6.3f ± %5.3f %%\n", 100.0 * s.same_top, 100.0 * s.same_top_unc);
}

nlohmann::json kld_json(const calib::KldSummary& s) {
  return {{"n_tokens_scored", s.count}, {"ppl", s.ppl},          {"ppl_base", s.ppl_base},
          {"ppl_diff", s.ppl_diff},     {"ppl_diff_unc", s.ppl_diff_unc},
          {"ln_ppl_ratio", s.log_ppl_ratio}, {"kld_mean", s.kld}, {"kld_mean_unc", s.kld_unc},
          {"kld_99", s.kld_99},         {"kld_99_9", s.kld_999}, {"kld_median", s.kld_median},
          {"kld_max", s.kld_max},       {"same_top", s.same_top}, {"dp_rms", s.dp_rms}};
}

}  // namespace

int calib_fail(const std::string& msg, int code) {
  std::fprintf(stderr, "error: %s\n", msg.c_str());
  return code;
}

void set_chunk_batch(const ArgParser& args, engine::EngineConfig& c) {
  if (!args.has("--batch-size")) c.max_batch_tokens = c.n_ctx;
  c.max_logit_rows = c.max_batch_tokens;
  c.max_seqs = 1;
}

int cmd_perplexity(int argc, char** argv, int first) {
  std::vector<OptionSpec> specs = engine_option_specs();
  specs.push_back({{"-f", "--file"}, "PATH", "text file to score"});
  specs.push_back({{"--chunks"}, "N", "score at most N chunks (default: all)"});
  specs.push_back({{"--kl-divergence-base"}, "PATH",
                   "write the log-probabilities to PATH (base model), or read them with --kl-divergence"});
  specs.push_back({{"--kl-divergence"}, "", "compare with --kl-divergence-base (its tokens; no -f needed)"});
  specs.push_back({{"--json"}, "", "print {\"ppl\", \"n_chunks\", \"n_tokens_scored\", ...}"});
  ArgParser args("perplexity", "lumen perplexity -m MODEL -f TEXT [-c 512] [--kl-divergence-base F [--kl-divergence]]",
                 specs);
  int rc = 0;
  if (!parse_or_report(args, argc, argv, first, rc)) return rc;
  auto fail = calib_fail;
  auto config = engine_config_from_args(args);
  if (!config.ok()) return fail(config.message(), 2);
  auto max_chunks = args.get_int("--chunks", -1, -1, 1 << 30);
  if (!max_chunks.ok()) return fail(max_chunks.message(), 2);
  const bool kld_mode = args.has("--kl-divergence");
  const std::string base_path = args.get_or("--kl-divergence-base", "");
  if (kld_mode && base_path.empty()) return fail("--kl-divergence needs --kl-divergence-base FILE", 2);

  engine::EngineConfig c = *config;
  calib::KldBase base;
  std::vector<int32_t> tokens;
  std::string text;
  if (kld_mode) {
    auto b = calib::read_kld_base(base_path);
    if (!b.ok()) return fail("--kl-divergence-base: " + b.message(), 2);
    base = std::move(*b);
    if (c.n_ctx > 0 && c.n_ctx != static_cast<int32_t>(base.n_ctx))
      return fail("-c " + std::to_string(c.n_ctx) + " differs from the base file's context " + std::to_string(base.n_ctx), 2);
    c.n_ctx = static_cast<int32_t>(base.n_ctx);
    tokens = base.tokens;
  } else {
    auto path = args.get("--file");
    if (!path) return fail("missing -f/--file TEXT", 2);
    auto t = read_text_file(*path);
    if (!t.ok()) return fail("--file: " + t.message(), 2);
    text = std::move(*t);
  }
  if (c.n_ctx <= 0) c.n_ctx = 512;
  if (c.n_ctx < 4) return fail("-c must be at least 4 for perplexity", 2);
  set_chunk_batch(args, c);
  std::unique_ptr<engine::Engine> eng = load_engine_or_report(args, c);
  if (!eng) return 1;
  const int64_t n_ctx = c.n_ctx;
  const int32_t n_vocab = eng->hparams().n_vocab;
  if (!kld_mode) tokens = eng->tokenizer().encode(text, true, false);
  int64_t n_chunks = calib::count_chunks(static_cast<int64_t>(tokens.size()), n_ctx, *max_chunks);
  if (n_chunks == 0)
    return fail("the text has " + std::to_string(tokens.size()) + " tokens, fewer than one chunk of " +
                    std::to_string(n_ctx) + " (-c)",
                1);
  if (kld_mode && base.n_vocab != n_vocab)
    return fail("the base file has a vocabulary of " + std::to_string(base.n_vocab) + " tokens, the model " +
                    std::to_string(n_vocab) + " (not the same tokenizer)",
                1);

  calib::KldBaseWriter writer;
  if (!base_path.empty() && !kld_mode) {
    Status st = writer.open(base_path, static_cast<uint32_t>(n_ctx), n_vocab, static_cast<int32_t>(n_chunks), tokens);
    if (!st.ok()) return fail("--kl-divergence-base: " + st.message(), 1);
  }
  const bool json = args.has("--json");
  if (!json)
    std::fprintf(stderr, "perplexity: %zu tokens, %lld chunks of %lld, scoring positions >= %lld\n", tokens.size(),
                 static_cast<long long>(n_chunks), static_cast<long long>(n_ctx), static_cast<long long>(n_ctx / 2));
  double nll_sum = 0.0;
  int64_t count = 0;
  calib::KldStats kld;
  Status row_status;
  calib::ChunkObserver obs;
  if (kld_mode) {
    obs.on_scored = [&](int64_t chunk, int64_t pos, int32_t next, std::span<const float> logits) {
      kld.add(logits, base.row(chunk, pos - n_ctx / 2), next);
    };
  } else if (!base_path.empty()) {
    obs.on_scored = [&](int64_t, int64_t, int32_t next, std::span<const float> logits) {
      if (row_status.ok()) row_status = writer.write_row(logits, next);
    };
  }
  // A bar on stderr when it is a terminal that stdout does not stream to (--json, or stdout
  // redirected); otherwise the per-chunk lines on stdout show the progress.
  std::optional<ProgressBar> bar;
  if (::isatty(::fileno(stderr)) && (json || !::isatty(::fileno(stdout)))) {
    bar.emplace(stderr, true);
    bar->start("perplexity", static_cast<uint64_t>(n_chunks), "chunks");
  }
  obs.on_chunk_done = [&](int64_t chunk, double chunk_nll, int64_t n_scored) {
    nll_sum += chunk_nll;
    count += n_scored;
    if (bar) bar->update(static_cast<uint64_t>(chunk + 1), "chunk " + std::to_string(chunk + 1));
    if (json) return;
    if (kld_mode) {
      const calib::KldSummary s = kld.summary();
      std::printf("%4lld    %9.4f ± %9.4f    %10.5f ± %10.5f    %10.5f ± %10.5f    %6.3f ± %6.3f %%    %6.3f ± %6.3f %%\n",
                  static_cast<long long>(chunk + 1), s.ppl, s.ppl_unc, s.log_ppl_ratio, s.log_ppl_ratio_unc, s.kld,
                  s.kld_unc, 100.0 * s.dp_rms, 100.0 * s.dp_rms_unc, 100.0 * s.same_top, 100.0 * s.same_top_unc);
    } else {
      std::printf("[%lld]%.4f,", static_cast<long long>(chunk + 1), std::exp(nll_sum / count));
    }
    std::fflush(stdout);
  };
  if (kld_mode && !json)
    std::printf("chunk             PPL               ln(PPL(Q)/PPL(base))          KL Divergence              Δp RMS            Same top p\n");
  Status st = calib::run_chunks(*eng, tokens, n_ctx, n_chunks, obs);
  if (bar) bar->finish();
  if (!st.ok()) return fail(st.message(), 1);
  if (!row_status.ok()) return fail("--kl-divergence-base: " + row_status.message(), 1);
  if (!base_path.empty() && !kld_mode) {
    st = writer.close();
    if (!st.ok()) return fail("--kl-divergence-base: " + st.message(), 1);
  }
  const double ppl = std::exp(nll_sum / count);
  if (json) {
    nlohmann::json j = {{"ppl", ppl},          {"n_chunks", n_chunks}, {"n_tokens_scored", count},
                        {"nll_sum", nll_sum},  {"n_ctx", n_ctx},       {"n_tokens", tokens.size()}};
    if (kld_mode) j["kl_divergence"] = kld_json(kld.summary());
    std::puts(j.dump().c_str());
    return 0;
  }
  if (kld_mode) {
    std::printf("\n");
    if (kld.count() < 100) {
      std::printf("(%lld scored tokens: too few for the statistics, as llama-perplexity)\n",
                  static_cast<long long>(kld.count()));
      return 0;
    }
    print_kld_summary(kld.summary());
    return 0;
  }
  std::printf("\nFinal estimate: PPL = %.4f (%lld tokens scored in %lld chunks)\n", ppl, static_cast<long long>(count),
              static_cast<long long>(n_chunks));
  if (!base_path.empty()) std::printf("log-probabilities written to %s\n", base_path.c_str());
  return 0;
}

}  // namespace lumen::cli
