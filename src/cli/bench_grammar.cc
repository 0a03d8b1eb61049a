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
//
// --mask-walks N: the mask alone over one or many grammars (repeat --json-schema), no
// decoding: random walks drawn uniformly from each mask, replayed -r times (see
// run_mask_walks), with each grammar's compile time.
#include "cli/bench_grammar.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>

#include <nlohmann/json.hpp>

#include "base/check.h"
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

double us_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
}

// One random walk: each token drawn uniformly from the mask (seeded; an end of generation
// only when nothing else is allowed or one time in four), until the grammar terminates or
// n_steps tokens. Returns the tokens.
std::vector<int32_t> random_walk(const std::shared_ptr<const grammar::CompiledGrammar>& g, int32_t n_vocab,
                                 int64_t n_steps, std::mt19937_64* rng) {
  grammar::GrammarMatcher m(g);
  std::vector<uint64_t> mask((static_cast<size_t>(n_vocab) + 63) / 64);
  std::vector<int32_t> allowed, tokens;
  const grammar::TokenTable& vocab = g->vocab();
  for (int64_t step = 0; step < n_steps && !m.terminated(); ++step) {
    if (!m.fill_mask(mask)) break;
    allowed.clear();
    bool only_eog = true;
    for (size_t w = 0; w < mask.size(); ++w)
      for (uint64_t bits = mask[w]; bits != 0; bits &= bits - 1) {
        const auto id = static_cast<int32_t>(w * 64 + static_cast<size_t>(__builtin_ctzll(bits)));
        allowed.push_back(id);
        only_eog = only_eog && vocab.is_eog(id);
      }
    if (allowed.empty()) break;
    int32_t pick = allowed[(*rng)() % allowed.size()];
    if (vocab.is_eog(pick) && !only_eog && (*rng)() % 4 != 0)
      while (vocab.is_eog(pick)) pick = allowed[(*rng)() % allowed.size()];
    LUMEN_CHECK(m.accept_token(pick));  // the mask allowed it
    tokens.push_back(pick);
  }
  return tokens;
}

struct MaskWalkResult {
  std::string path;
  double compile_ms = 0;
  std::vector<double> mask_us;  // per step: the fastest of the replays
  int64_t n_walks = 0;
};

nlohmann::json mask_summary(const std::vector<double>& us) {
  return {{"steps", us.size()},
          {"mask_us_p50", quantile(us, 0.5)},
          {"mask_us_p90", quantile(us, 0.9)},
          {"mask_us_p99", quantile(us, 0.99)},
          {"mask_us_max", quantile(us, 1.0)}};
}

}  // namespace

// --mask-walks N: the mask alone over many grammars, without decoding. Each walk's tokens are
// replayed `reps` times through fresh matchers; a step's time is its fastest replay (so a
// step the OS preempted in one replay does not count: on a loaded machine this is the
// figure to read, and it says so).
int run_mask_walks(const ArgParser& args, const engine::Engine& eng, int64_t n_steps, int64_t reps, bool json) {
  auto n_walks = args.get_int("--mask-walks", 20, 1, 100000);
  if (!n_walks.ok()) {
    std::fprintf(stderr, "error: %s\n", n_walks.message().c_str());
    return 2;
  }
  const int32_t n_vocab = eng.hparams().n_vocab;
  auto vocab = grammar::TokenTable::build(eng.tokenizer(), n_vocab);
  std::vector<std::pair<std::string, bool>> files;
  for (const std::string& p : args.get_all("--json-schema")) files.push_back({p, true});
  for (const std::string& p : args.get_all("--grammar-file")) files.push_back({p, false});
  std::vector<MaskWalkResult> results;
  std::vector<double> all_us;
  for (const auto& [path, is_schema] : files) {
    MaskWalkResult r;
    r.path = path;
    const auto t0 = std::chrono::steady_clock::now();
    auto g = grammar_from_file(path, is_schema, vocab);
    r.compile_ms = us_since(t0) / 1000.0;
    if (!g.ok()) {
      std::fprintf(stderr, "error: %s\n", g.message().c_str());
      return 2;
    }
    std::mt19937_64 rng(1);
    std::vector<uint64_t> mask((static_cast<size_t>(n_vocab) + 63) / 64);
    for (int64_t w = 0; w < *n_walks; ++w) {
      const std::vector<int32_t> tokens = random_walk(*g, n_vocab, n_steps, &rng);
      std::vector<double> best(tokens.size() + 1, 1e300);
      for (int64_t rep = 0; rep < reps; ++rep) {
        grammar::GrammarMatcher m(*g);
        for (size_t k = 0; k <= tokens.size() && !m.terminated(); ++k) {
          const auto t1 = std::chrono::steady_clock::now();
          const bool any = m.fill_mask(mask);
          best[k] = std::min(best[k], us_since(t1));
          if (!any || k == tokens.size() || !m.accept_token(tokens[k])) break;
        }
      }
      for (double us : best)
        if (us < 1e300) r.mask_us.push_back(us);
      ++r.n_walks;
    }
    all_us.insert(all_us.end(), r.mask_us.begin(), r.mask_us.end());
    results.push_back(std::move(r));
  }
  std::vector<double> p99s, compile_ms;
  nlohmann::json rows = nlohmann::json::array();
  for (const MaskWalkResult& r : results) {
    nlohmann::json j = mask_summary(r.mask_us);
    j["test"] = "grammar_mask";
    j["grammar"] = r.path;
    j["compile_ms"] = r.compile_ms;
    j["walks"] = r.n_walks;
    j["replays"] = reps;
    p99s.push_back(j["mask_us_p99"].get<double>());
    compile_ms.push_back(r.compile_ms);
    rows.push_back(j);
  }
  nlohmann::json all = mask_summary(all_us);
  all["test"] = "grammar_mask_all";
  all["grammars"] = results.size();
  all["p99_over_grammars_min"] = *std::min_element(p99s.begin(), p99s.end());
  all["p99_over_grammars_median"] = quantile(p99s, 0.5);
  all["p99_over_grammars_max"] = *std::max_element(p99s.begin(), p99s.end());
  all["compile_ms_median"] = quantile(compile_ms, 0.5);
  all["compile_ms_max"] = *std::max_element(compile_ms.begin(), compile_ms.end());
  rows.push_back(all);
  if (json) {
    std::puts(rows.dump().c_str());
    return 0;
  }
  std::printf("lumen bench --mask-walks %lld (walks of up to %lld tokens, each replayed %lld times; a step's time is "
              "its fastest replay)\n",
              static_cast<long long>(*n_walks), static_cast<long long>(n_steps), static_cast<long long>(reps));
  std::printf("| grammar | compile ms | steps | p50 us | p90 us | p99 us | max us |\n|---|---|---|---|---|---|---|\n");
  for (const nlohmann::json& j : rows)
    std::printf("| %s | %.0f | %zu | %.1f | %.1f | %.1f | %.1f |\n",
                j["test"] == "grammar_mask_all" ? "all" : j["grammar"].get<std::string>().c_str(),
                j.value("compile_ms", j.value("compile_ms_max", 0.0)), j["steps"].get<size_t>(),
                j["mask_us_p50"].get<double>(), j["mask_us_p90"].get<double>(), j["mask_us_p99"].get<double>(),
                j["mask_us_max"].get<double>());
  std::printf("p99 over the %zu grammars: min %.1f, median %.1f, max %.1f us; compile median %.0f ms, max %.0f ms\n",
              results.size(), all["p99_over_grammars_min"].get<double>(), all["p99_over_grammars_median"].get<double>(),
              all["p99_over_grammars_max"].get<double>(), all["compile_ms_median"].get<double>(),
              all["compile_ms_max"].get<double>());
  return 0;
}

int run_grammar_bench(const ArgParser& args, engine::EngineConfig base, int64_t n_gen, int64_t reps, bool json) {
  auto temp_arg = args.get_float("--temp", 1.0, 0.0, 100.0);
  if (!temp_arg.ok()) {
    std::fprintf(stderr, "error: %s\n", temp_arg.message().c_str());
    return 2;
  }
  const float temp = static_cast<float>(*temp_arg);
  std::unique_ptr<engine::Engine> eng = load_engine_or_report(args, base);
  if (!eng) return 1;
  if (args.has("--mask-walks")) return run_mask_walks(args, *eng, n_gen, reps, json);
  if (args.get_all("--json-schema").size() + args.get_all("--grammar-file").size() > 1) {
    std::fprintf(stderr, "error: lumen bench: several --json-schema / --grammar-file only with --mask-walks\n");
    return 2;
  }
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
