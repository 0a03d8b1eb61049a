// lumen bench --spec KIND: speculative decoding against plain decoding, alternating.
//
// Two engines on the same model and threads, one plain and one speculating, run the same
// greedy requests in turn (plain, spec, plain, spec, ...: both see the same machine load).
// For each run: generated tokens per second after the first token, and for the speculating
// engine the proposals, acceptances and target steps. The outputs must be identical token
// for token (greedy speculation is exact); the bench fails otherwise.
//
//   --spec ngram   n-gram / prompt lookup (what `lumen run --spec ngram` does)
//   --draft-model F  a draft model (what `lumen run --draft-model F` does)
//   --spec replay  bench only: proposes the continuation the plain engine produced in its
//                  run just before (acceptance 1 at no proposal cost): the mechanism's upper
//                  bound; with --draft-max K --draft-fixed every target step verifies K
//                  proposals (1 + K positions; no verify-cost cap), the speedup at that k
//   --spec random  bench only: random tokens, almost always rejected (what speculation
//                  costs when it fails: the adaptive k must keep it near plain speed)
//
// The speculating engine measures the verify cost at start (spec/step_costs.h: forward
// time of n = 1 .. 17 tokens, each with a logits row, relative to n = 1); it is printed
// first: the physics that decides what speculation can gain on this model and machine.
//
// Prompts: story beginnings built in (or -f FILE, one prompt per line). Reported per
// engine: median tokens/s with the range over runs; ms per target step and its ratio to a
// plain step (the verify cost); acceptance rate; tokens per target step.
#include "cli/bench_spec.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <random>

#include <nlohmann/json.hpp>

#include "base/timer.h"

namespace lumen::cli {
namespace {

const char* kStoryPrompts[] = {
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the sun. One day,",
    "Tom had a big red ball. He liked to throw the ball to his dog, Max. Max liked the ball too. One day, Tom",
    "The little bird wanted to fly. The bird tried and tried, but the bird could not fly. Then the bird",
    "Sam and Mia went to the park. At the park, Sam and Mia saw a big tree.",
};

// Proposes the recorded continuation of the current tokens (bench only).
class ReplayProposer final : public spec::Proposer {
 public:
  void set_recording(std::vector<int32_t> tokens) { recorded_ = std::move(tokens); }
  void propose(std::span<spec::ProposeSeq> seqs) override {
    for (spec::ProposeSeq& s : seqs) {
      s.n_out = 0;
      s.probs_valid = false;
      const size_t len = s.tokens.size();
      if (len >= recorded_.size() || !std::equal(s.tokens.begin(), s.tokens.end(), recorded_.begin())) continue;
      s.n_out = static_cast<int32_t>(std::min<size_t>(recorded_.size() - len, static_cast<size_t>(s.max_n)));
      std::copy_n(recorded_.begin() + static_cast<ptrdiff_t>(len), s.n_out, s.out_tokens.begin());
    }
  }
  void release(uint64_t) override {}
  const char* name() const override { return "replay"; }

 private:
  std::vector<int32_t> recorded_;
};

// Random tokens: a proposer that is almost always wrong (bench only).
class RandomProposer final : public spec::Proposer {
 public:
  explicit RandomProposer(int32_t n_vocab) : n_vocab_(n_vocab), rng_(12345) {}
  void propose(std::span<spec::ProposeSeq> seqs) override {
    for (spec::ProposeSeq& s : seqs) {
      s.n_out = s.max_n;
      s.probs_valid = false;
      for (int32_t j = 0; j < s.max_n; ++j) s.out_tokens[j] = static_cast<int32_t>(rng_() % n_vocab_);
    }
  }
  void release(uint64_t) override {}
  const char* name() const override { return "random"; }

 private:
  uint64_t n_vocab_;
  std::mt19937_64 rng_;
};

struct GenRun {
  std::vector<int32_t> tokens;  // prompt + generated
  double tok_s = 0;             // generated tokens after the first, per second
  double ms_per_step = 0;       // per target step after the first
  engine::Usage usage;
  std::string error;
};

GenRun generate(engine::Engine& eng, const std::vector<int32_t>& prompt, int32_t n_gen) {
  GenRun out;
  engine::Request req;
  req.prompt_ids = prompt;
  req.params.max_tokens = n_gen;
  req.params.ignore_eos = true;
  req.params.sampling.temperature = 0;
  auto id = eng.add_request(std::move(req));
  if (!id.ok()) {
    out.error = id.message();
    return out;
  }
  out.tokens = prompt;
  while (eng.has_work()) {
    for (engine::RequestEvent& ev : eng.step()) {
      out.tokens.insert(out.tokens.end(), ev.new_token_ids.begin(), ev.new_token_ids.end());
      if (ev.request_finished) out.usage = ev.usage;
      if (ev.finish_reason == engine::FinishReason::kError) out.error = ev.error;
    }
  }
  const engine::RequestTimings t = eng.timings(*id).value_or(engine::RequestTimings{});
  const double ms = t.finish_ms - t.first_token_ms;
  out.tok_s = ms > 0 ? (t.n_generated - 1) / (ms / 1000.0) : 0;
  const int64_t steps = out.usage.spec.target_steps - 1;
  out.ms_per_step = steps > 0 ? ms / static_cast<double>(steps) : 0;
  return out;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

}  // namespace

int run_spec_bench(const ArgParser& args, engine::EngineConfig base, int64_t n_gen, int64_t reps, bool json) {
  const std::string kind = args.has("--draft-model") && !args.has("--spec") ? "draft" : args.get_or("--spec", "");
  engine::EngineConfig plain_cfg = base;
  plain_cfg.spec = spec::SpecConfig{};
  engine::EngineConfig spec_cfg = base;
  if (args.has("--draft-fixed") && kind != "replay") {
    std::fprintf(stderr, "error: --draft-fixed: needs --spec replay (other proposers' k follows acceptance)\n");
    return 2;
  }
  if (kind == "ngram" || kind == "draft") {
    if (Status st = spec_config_from_args(args, &spec_cfg.spec); !st.ok()) {
      std::fprintf(stderr, "error: %s\n", st.message().c_str());
      return 2;
    }
  } else if (kind == "replay" || kind == "random") {
    spec::SpecConfig& sc = spec_cfg.spec;
    auto dmax = args.get_int("--draft-max", 0, 1, 64);
    auto knee = args.get_int("--spec-knee", 64, 1, 1 << 20);
    if (!dmax.ok() || !knee.ok()) {
      std::fprintf(stderr, "error: %s\n", (!dmax.ok() ? dmax : knee).message().c_str());
      return 2;
    }
    sc.kind = spec::ProposerKind::kCustom;
    sc.draft_max = static_cast<int32_t>(*dmax);
    sc.max_step_tokens = static_cast<int32_t>(*knee);
    // Fixed k: no verify-cost cap, so k follows acceptance alone from draft_max, and the
    // replay's acceptance of 1 keeps it there (AdaptiveK: all accepted -> min(max, k + 2)).
    if (args.has("--draft-fixed")) {
      sc.measure_cost = false;
      if (sc.draft_max == 0) sc.draft_max = 8;
    }
  } else {
    std::fprintf(stderr, "error: --spec: '%s' is not a proposer (ngram, replay, random)\n", kind.c_str());
    return 2;
  }
  std::vector<std::string> prompts(std::begin(kStoryPrompts), std::end(kStoryPrompts));
  if (auto path = args.get("--file")) {
    std::ifstream in(*path);
    if (!in) {
      std::fprintf(stderr, "error: --file: cannot read %s\n", path->c_str());
      return 2;
    }
    prompts.clear();
    for (std::string line; std::getline(in, line);)
      if (!line.empty()) prompts.push_back(line);
    if (prompts.empty()) {
      std::fprintf(stderr, "error: --file: %s has no prompts\n", path->c_str());
      return 2;
    }
  }
  std::unique_ptr<engine::Engine> plain = load_engine_or_report(args, plain_cfg);
  if (!plain) return 1;
  std::unique_ptr<spec::Proposer> custom;
  ReplayProposer* replay = nullptr;
  if (kind == "replay") {
    auto r = std::make_unique<ReplayProposer>();
    replay = r.get();
    custom = std::move(r);
  } else if (kind == "random") {
    custom = std::make_unique<RandomProposer>(plain->hparams().n_vocab);
  }
  auto spec_eng = engine::Engine::create(*args.get("--model"), spec_cfg, std::move(custom));
  if (!spec_eng.ok()) {
    std::fprintf(stderr, "error: %s\n", spec_eng.message().c_str());
    return 1;
  }
  engine::Engine& sp = **spec_eng;
  std::vector<double> plain_tok_s, spec_tok_s, plain_step_ms, spec_step_ms;
  int64_t proposed = 0, accepted = 0, steps = 0, generated = 0;
  // Warm-up: one short run on each.
  const std::vector<int32_t> warm = plain->tokenizer().encode(prompts[0], true, false);
  generate(*plain, warm, 4);
  generate(sp, warm, 4);
  for (int64_t r = 0; r < reps; ++r) {
    for (const std::string& text : prompts) {
      const std::vector<int32_t> prompt = plain->tokenizer().encode(text, true, false);
      const GenRun a = generate(*plain, prompt, static_cast<int32_t>(n_gen));
      if (replay) replay->set_recording(a.tokens);
      const GenRun b = generate(sp, prompt, static_cast<int32_t>(n_gen));
      if (!a.error.empty() || !b.error.empty()) {
        std::fprintf(stderr, "error: %s\n", (a.error.empty() ? b.error : a.error).c_str());
        return 1;
      }
      if (a.tokens != b.tokens) {
        std::fprintf(stderr, "error: speculative output differs from plain greedy output (prompt '%s')\n",
                     text.c_str());
        return 1;
      }
      plain_tok_s.push_back(a.tok_s);
      spec_tok_s.push_back(b.tok_s);
      plain_step_ms.push_back(a.ms_per_step);
      spec_step_ms.push_back(b.ms_per_step);
      proposed += b.usage.spec.proposed;
      accepted += b.usage.spec.accepted;
      steps += b.usage.spec.target_steps;
      generated += b.usage.completion_tokens;
    }
  }
  const double pm = median(plain_tok_s), sm = median(spec_tok_s);
  const double acc = proposed > 0 ? static_cast<double>(accepted) / proposed : 0;
  const double per_step = steps > 0 ? static_cast<double>(generated) / steps : 0;
  const double step_ratio = median(plain_step_ms) > 0 ? median(spec_step_ms) / median(plain_step_ms) : 0;
  auto mn = [](const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); };
  auto mx = [](const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); };
  nlohmann::json costs = nlohmann::json::array();
  for (const spec::StepCosts::Point& p : sp.step_costs().points())
    costs.push_back({{"n_tokens", p.n_tokens}, {"ms", p.ms}, {"ratio", p.ms / sp.step_costs().points()[0].ms}});
  if (json) {
    nlohmann::json j = {{"test", "spec"},
                        {"verify_cost", costs},
                        {"proposer", kind},
                        {"draft_max", sp.config().spec.draft_max},
                        {"draft_fixed", !sp.config().spec.measure_cost},
                        {"n_gen", n_gen},
                        {"runs", plain_tok_s.size()},
                        {"threads", base.n_threads},
                        {"plain_tok_s", pm},
                        {"plain_tok_s_range", {mn(plain_tok_s), mx(plain_tok_s)}},
                        {"spec_tok_s", sm},
                        {"spec_tok_s_range", {mn(spec_tok_s), mx(spec_tok_s)}},
                        {"speedup", pm > 0 ? sm / pm : 0},
                        {"acceptance", acc},
                        {"proposed", proposed},
                        {"accepted", accepted},
                        {"target_steps", steps},
                        {"generated", generated},
                        {"tokens_per_target_step", per_step},
                        {"ms_per_step_plain", median(plain_step_ms)},
                        {"ms_per_step_spec", median(spec_step_ms)},
                        {"step_cost_ratio", step_ratio}};
    std::puts(nlohmann::json::array({j}).dump().c_str());
  } else {
    if (!costs.empty()) {
      std::printf("verify cost (forward of n tokens with n logits rows, measured at start): n=1 %.2f ms;",
                  costs[0]["ms"].get<double>());
      for (const nlohmann::json& c : costs)
        if (c["n_tokens"].get<int>() > 1) std::printf(" %d:x%.2f", c["n_tokens"].get<int>(), c["ratio"].get<double>());
      std::printf("\n");
    }
    std::printf(
        "lumen bench --spec %s (draft-max %d%s, %zu runs of %lld tokens, alternating with plain):\n"
        "  plain %.1f tok/s [%.1f, %.1f] | spec %.1f tok/s [%.1f, %.1f] | x%.2f\n"
        "  acceptance %.2f | %.2f tokens per target step | step %.2f ms vs plain %.2f ms (x%.2f)\n"
        "  greedy outputs identical\n",
        kind.c_str(), sp.config().spec.draft_max, sp.config().spec.measure_cost ? "" : " fixed", plain_tok_s.size(),
        static_cast<long long>(n_gen), pm, mn(plain_tok_s), mx(plain_tok_s), sm, mn(spec_tok_s), mx(spec_tok_s), pm > 0 ? sm / pm : 0, acc, per_step,
        median(spec_step_ms), median(plain_step_ms), step_ratio);
  }
  return 0;
}

}  // namespace lumen::cli
