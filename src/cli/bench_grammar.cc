// lumen bench --json-schema FILE | --grammar-file FILE: what constrained decoding costs.
//
// One engine runs the same prompts without and with the grammar in turn (plain, grammar,
// plain, ...: both see the same machine load), sampled at --temp (default 1.0) with the same
// seed. TPOT per run = (finish - first token) / (tokens - 1) from the engine's own timings,
// so the grammar's share holds the mask, the masked sampling and the matcher's advance.
// Issue 17 asks TPOT with a JSON Schema grammar <= 1.05x TPOT without.
//
// Then the mask alone: every grammar run's tokens are replayed through a fresh matcher,
// timing fill_mask (what the engine calls before sampling each token) and accept_token at
// every step; p50 / p99 / max over all steps (issue 17: the mask < 50 us at p99).
#include "cli/bench_grammar.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "grammar/matcher.h"

namespace lumen::cli {
namespace {

const char* kPrompts[] = {
    "Describe a person as JSON.",
    "Once upon a time, there was a little girl named Lily. She wrote down what she knew:",
};

struct Run {
  std::vector<int32_t> generated;
  double tpot_ms = 0;
  std::string error;
};

Run generate(engine::Engine& eng, const std::vector<int32_t>& prompt, int32_t n_gen, float temp, uint64_t seed,
             std::shared_ptr<const grammar::CompiledGrammar> g) {
  Run out;
  engine::Request req;
  req.prompt_ids = prompt;
  req.params.max_tokens = n_gen;
  req.params.ignore_eos = true;  // a grammar still ends the completion when it is complete
  req.params.sampling.temperature = temp;
  req.params.sampling.seed = seed;
  req.params.grammar = std::move(g);
  auto timings = run_until_idle(eng, std::move(req), [&](const engine::RequestEvent& ev) {
    out.generated.insert(out.generated.end(), ev.new_token_ids.begin(), ev.new_token_ids.end());
  });
  if (!timings.ok()) {
    out.error = timings.message();
    return out;
  }
  const engine::RequestTimings& t = *timings;
  if (t.n_generated < 2) {
    out.error = "a run generated fewer than 2 tokens: no TPOT (is the grammar that short?)";
    return out;
  }
  out.tpot_ms = (t.finish_ms - t.first_token_ms) / (t.n_generated - 1);
  return out;
}

double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size() - 1) + 0.5));
  return v[i];
}

struct StepTimes {
  std::vector<double> mask_us, accept_us;
};

// Replays the tokens through a fresh matcher; false if one is refused (the engine sampled
// outside its own grammar).
bool replay(const std::shared_ptr<const grammar::CompiledGrammar>& g, const std::vector<int32_t>& tokens,
            int32_t n_vocab, StepTimes* out) {
  using Clock = std::chrono::steady_clock;
  grammar::GrammarMatcher m(g);
  std::vector<uint64_t> mask((static_cast<size_t>(n_vocab) + 63) / 64);
  for (int32_t id : tokens) {
    const auto t0 = Clock::now();
    const bool any = m.fill_mask(mask);
    const auto t1 = Clock::now();
    const bool ok = any && (mask[static_cast<size_t>(id) / 64] >> (id % 64) & 1) && m.accept_token(id);
    const auto t2 = Clock::now();
    if (!ok) return false;
    out->mask_us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    out->accept_us.push_back(std::chrono::duration<double, std::micro>(t2 - t1).count());
    if (m.terminated()) break;
  }
  return true;
}

}  // namespace

int run_grammar_bench(const ArgParser& args, engine::EngineConfig base, int64_t n_gen, int64_t reps, bool json) {
  auto temp_arg = args.get_float("--temp", 1.0, 0.0, 100.0);
  if (!temp_arg.ok()) {
    std::fprintf(stderr, "error: %s\n", temp_arg.message().c_str());
    return 2;
  }
  const float temp = static_cast<float>(*temp_arg);
  std::unique_ptr<engine::Engine> eng = load_engine_or_report(args, base);
  if (!eng) return 1;
  auto g = grammar_from_args(args, *eng);
  if (!g.ok()) {
    std::fprintf(stderr, "error: %s\n", g.message().c_str());
    return 2;
  }
  const std::string what = args.has("--json-schema") ? "--json-schema " + *args.get("--json-schema")
                                                     : "--grammar-file " + *args.get("--grammar-file");
  const int32_t n_vocab = eng->hparams().n_vocab;
  std::vector<double> plain_ms, grammar_ms, ratios;
  StepTimes steps;
  int64_t grammar_tokens = 0;
  const std::vector<int32_t> warm = eng->tokenizer().encode(kPrompts[0], true, false);
  generate(*eng, warm, 4, temp, 0, nullptr);
  generate(*eng, warm, 4, temp, 0, *g);
  for (int64_t r = 0; r < reps; ++r) {
    for (const char* text : kPrompts) {
      const std::vector<int32_t> prompt = eng->tokenizer().encode(text, true, false);
      const uint64_t seed = static_cast<uint64_t>(r) + 1;
      const Run a = generate(*eng, prompt, static_cast<int32_t>(n_gen), temp, seed, nullptr);
      const Run b = generate(*eng, prompt, static_cast<int32_t>(n_gen), temp, seed, *g);
      if (!a.error.empty() || !b.error.empty()) {
        std::fprintf(stderr, "error: %s\n", (a.error.empty() ? b.error : a.error).c_str());
        return 1;
      }
      if (!replay(*g, b.generated, n_vocab, &steps)) {
        std::fprintf(stderr, "error: a constrained run's tokens do not replay through the grammar\n");
        return 1;
      }
      plain_ms.push_back(a.tpot_ms);
      grammar_ms.push_back(b.tpot_ms);
      ratios.push_back(b.tpot_ms / a.tpot_ms);
      grammar_tokens += static_cast<int64_t>(b.generated.size());
    }
  }
  const double pm = quantile(plain_ms, 0.5), gm = quantile(grammar_ms, 0.5);
  auto range = [](const std::vector<double>& v) {
    return nlohmann::json::array({*std::min_element(v.begin(), v.end()), *std::max_element(v.begin(), v.end())});
  };
  const nlohmann::json j = {
      {"test", "grammar"},
      {"grammar", what},
      {"n_gen", n_gen},
      {"temp", temp},
      {"runs", plain_ms.size()},
      {"threads", base.n_threads},
      {"grammar_tokens_per_run", static_cast<double>(grammar_tokens) / static_cast<double>(grammar_ms.size())},
      {"tpot_ms_plain", pm},
      {"tpot_ms_plain_range", range(plain_ms)},
      {"tpot_ms_grammar", gm},
      {"tpot_ms_grammar_range", range(grammar_ms)},
      {"tpot_ratio", pm > 0 ? gm / pm : 0},
      {"tpot_ratio_per_pair_median", quantile(ratios, 0.5)},
      {"tpot_ratio_per_pair_range", range(ratios)},
      {"mask_steps", steps.mask_us.size()},
      {"mask_us_p50", quantile(steps.mask_us, 0.5)},
      {"mask_us_p99", quantile(steps.mask_us, 0.99)},
      {"mask_us_max", quantile(steps.mask_us, 1.0)},
      {"accept_us_p50", quantile(steps.accept_us, 0.5)},
      {"accept_us_p99", quantile(steps.accept_us, 0.99)}};
  if (json) {
    std::puts(nlohmann::json::array({j}).dump().c_str());
    return 0;
  }
  std::printf(
      "lumen bench %s (%zu runs of up to %lld tokens at temp %.2f, alternating with plain, %d threads):\n"
      "  TPOT plain %.2f ms [%.2f, %.2f] | grammar %.2f ms [%.2f, %.2f] (%.0f tokens a run) | x%.3f"
      " (per pair: median x%.3f, [%.3f, %.3f])\n"
      "  mask per step, replayed (%zu steps): fill_mask p50 %.1f us, p99 %.1f us, max %.1f us;"
      " accept_token p50 %.1f us, p99 %.1f us\n",
      what.c_str(), plain_ms.size(), static_cast<long long>(n_gen), temp, base.n_threads, pm,
      j["tpot_ms_plain_range"][0].get<double>(), j["tpot_ms_plain_range"][1].get<double>(), gm,
      j["tpot_ms_grammar_range"][0].get<double>(), j["tpot_ms_grammar_range"][1].get<double>(),
      j["grammar_tokens_per_run"].get<double>(), j["tpot_ratio"].get<double>(),
      j["tpot_ratio_per_pair_median"].get<double>(), j["tpot_ratio_per_pair_range"][0].get<double>(),
      j["tpot_ratio_per_pair_range"][1].get<double>(), steps.mask_us.size(), j["mask_us_p50"].get<double>(),
      j["mask_us_p99"].get<double>(), j["mask_us_max"].get<double>(), j["accept_us_p50"].get<double>(),
      j["accept_us_p99"].get<double>());
  return 0;
}

}  // namespace lumen::cli
