// Speculative decoding through the engine (issue 14), on the real tiny model.
//
// Greedy: speculation must not change a single token id — alone, beside other requests,
// with prefix-cache hits, across preemption, with penalties — while it does speculate
// (proposals verified and accepted, fewer target steps than tokens).
// Grammar-constrained: the same, with the mask applied at every verified position.
// Sampled: the first generated tokens over many seeds have the same distribution with and
// without speculation (two-sample chi-square), with n-gram proposals and with proposers
// that are deliberately bad (random tokens, deterministic or drawn from a wrong q).
#include <algorithm>
#include <cmath>
#include <map>
#include <random>

#include <gtest/gtest.h>

#include "base/shared_dir.h"
#include "engine/engine.h"
#include "grammar/compiled_grammar.h"
#include "grammar/matcher.h"
#include "spec/proposer.h"

namespace lumen::engine {
namespace {

std::string model_path() { return shared_dir() + "/models/TinyStories-656K/TinyStories-656K-Q8_0.gguf"; }

// Stories repeat names and phrases: n-gram lookup finds matches in the prompt and output.
const char* kPrompts[] = {
    "Once upon a time, there was a little girl named Lily. Lily had a red ball. Lily loved her red ball. "
    "One day, Lily",
    "Tom and Sam went to the park. Tom said, \"Sam, let's play!\" Sam said, \"Yes, Tom, let's play!\" Then Tom",
    "The cat sat on the mat. The dog sat on the mat. The bird",
    "Once upon a time",
};

struct Cfg {
  spec::ProposerKind kind = spec::ProposerKind::kNone;
  int32_t max_seqs = 1;
  int32_t max_batch_tokens = 64;
  int32_t n_ctx = 256;
  int64_t kv_memory_bytes = 0;
  int32_t draft_max = 8;
  std::string draft = "";  // kDraft: the draft model
  // Exactness tests pin k to acceptance alone (deterministic); the cost policy has its own.
  bool measure_cost = false;
  std::vector<std::pair<int32_t, double>> given_costs = {};
};

std::unique_ptr<Engine> make(const Cfg& cfg, std::unique_ptr<spec::Proposer> proposer = nullptr) {
  EngineConfig c;
  c.n_threads = 1;
  c.n_ctx = cfg.n_ctx;
  c.max_batch_tokens = cfg.max_batch_tokens;
  c.max_seqs = cfg.max_seqs;
  c.kv_memory_bytes = cfg.kv_memory_bytes;
  c.spec.kind = cfg.kind;
  c.spec.draft_max = cfg.draft_max;
  c.spec.ngram_min = 1;
  c.spec.ngram_max = 3;
  c.spec.draft_model = cfg.draft;
  c.spec.measure_cost = cfg.measure_cost;
  c.spec.given_costs = cfg.given_costs;
  auto e = Engine::create(model_path(), c, std::move(proposer));
  EXPECT_TRUE(e.ok()) << e.message();
  return e.ok() ? std::move(e).value() : nullptr;
}

Request request(const Engine& e, const std::string& prompt, int32_t n, float temperature, uint64_t seed = 1) {
  Request r;
  r.prompt_ids = e.tokenizer().encode(prompt, true, false);
  r.params.max_tokens = n;
  r.params.ignore_eos = true;
  r.params.sampling.temperature = temperature;
  r.params.sampling.seed = seed;
  return r;
}

struct Outcome {
  std::map<RequestId, std::vector<int32_t>> ids;
  std::map<RequestId, Usage> usage;
};

Outcome drain(Engine& e) {
  Outcome o;
  while (e.has_work()) {
    for (RequestEvent& ev : e.step()) {
      EXPECT_NE(ev.finish_reason, FinishReason::kError) << ev.error;
      auto& v = o.ids[ev.request_id];
      v.insert(v.end(), ev.new_token_ids.begin(), ev.new_token_ids.end());
      if (ev.request_finished) o.usage[ev.request_id] = ev.usage;
    }
    EXPECT_EQ(e.check_invariants(), "");
  }
  EXPECT_EQ(e.kv_blocks_in_use(), 0);
  return o;
}

std::vector<int32_t> solo(const Cfg& cfg, const char* prompt, int32_t n, Usage* usage = nullptr,
                          float repeat_penalty = 1.0f) {
  auto e = make(cfg);
  if (!e) return {};
  Request r = request(*e, prompt, n, 0.0f);
  r.params.sampling.repeat_penalty = repeat_penalty;
  const RequestId id = *e->add_request(r);
  Outcome o = drain(*e);
  if (usage) *usage = o.usage[id];
  return o.ids[id];
}

TEST(SpecGreedy, NgramAloneIsIdenticalAndSpeculates) {
  int64_t proposed = 0, accepted = 0, steps = 0, tokens = 0;
  for (const char* p : kPrompts) {
    Usage u;
    const std::vector<int32_t> plain = solo({}, p, 80);
    const std::vector<int32_t> spec = solo({.kind = spec::ProposerKind::kNgram}, p, 80, &u);
    EXPECT_EQ(spec, plain) << p;
    proposed += u.spec.proposed;
    accepted += u.spec.accepted;
    steps += u.spec.target_steps;
    tokens += u.completion_tokens;
    EXPECT_LE(u.spec.accepted, u.spec.proposed);
    EXPECT_EQ(u.spec.target_steps + u.spec.accepted, u.completion_tokens) << p;  // each step: accepted + 1
  }
  // It did speculate, and it paid: fewer target steps than tokens.
  EXPECT_GT(proposed, 20);
  EXPECT_GT(accepted, 10);
  EXPECT_LT(steps, tokens);
}

// The target's F32 Hugging Face copy as its draft (same vocabulary, nearly the same
// logits): greedy output identical, and nearly every proposal accepted.
std::string hf_draft() { return shared_dir() + "/models/TinyStories-656K"; }

TEST(SpecDraft, F32CopyAsDraftIsIdenticalAndAccepted) {
  int64_t proposed = 0, accepted = 0;
  const Cfg draft{.kind = spec::ProposerKind::kDraft, .draft = hf_draft()};
  for (const char* p : kPrompts) {
    Usage u;
    EXPECT_EQ(solo(draft, p, 60, &u), solo({}, p, 60)) << p;
    proposed += u.spec.proposed;
    accepted += u.spec.accepted;
  }
  EXPECT_GT(proposed, 100);
  EXPECT_GT(accepted, proposed * 8 / 10);
}

TEST(SpecDraft, BesideOthersAndAcrossPreemption) {
  std::vector<std::vector<int32_t>> want;
  for (const char* p : kPrompts) want.push_back(solo({.n_ctx = 96}, p, 50));
  auto probe = make({});
  ASSERT_TRUE(probe);
  const size_t bytes_per_token = 2ull * probe->hparams().n_layer * probe->hparams().n_kv_dim() * 2;
  auto e = make({.kind = spec::ProposerKind::kDraft, .max_seqs = 4, .n_ctx = 96,
                 .kv_memory_bytes = static_cast<int64_t>(bytes_per_token * 16 * 12), .draft = hf_draft()});
  ASSERT_TRUE(e);
  std::vector<RequestId> ids;
  for (const char* p : kPrompts) ids.push_back(*e->add_request(request(*e, p, 50, 0.0f)));
  ASSERT_TRUE(e->add_request(request(*e, kPrompts[1], 30, 0.8f, 3)).ok());
  Outcome o = drain(*e);
  EXPECT_GT(e->metrics().preemptions, 0u);
  EXPECT_GT(e->metrics().spec_num_accepted_tokens, 50u);
  for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(o.ids[ids[i]], want[i]) << kPrompts[i];
}

TEST(SpecDraft, OtherVocabularyIsAClearError) {
  EngineConfig c;
  c.n_threads = 1;
  c.n_ctx = 128;
  c.spec.kind = spec::ProposerKind::kDraft;
  c.spec.draft_model = shared_dir() + "/models/stories260K/stories260K.gguf";
  auto e = Engine::create(model_path(), c);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.message().find("--draft-model"), std::string::npos) << e.message();
  EXPECT_NE(e.message().find("vocabulary"), std::string::npos) << e.message();
}

TEST(SpecGreedy, PenaltiesSeeAcceptedTokens) {
  for (const char* p : kPrompts)
    EXPECT_EQ(solo({.kind = spec::ProposerKind::kNgram}, p, 60, nullptr, 1.3f), solo({}, p, 60, nullptr, 1.3f)) << p;
}

TEST(SpecGreedy, BesideOtherRequestsWithPrefixHits) {
  std::vector<std::vector<int32_t>> want;
  for (const char* p : kPrompts) want.push_back(solo({}, p, 60));
  auto e = make({.kind = spec::ProposerKind::kNgram, .max_seqs = 6, .max_batch_tokens = 48});
  ASSERT_TRUE(e);
  for (int round = 0; round < 2; ++round) {  // round 1: every prompt hits the prefix cache
    std::vector<RequestId> ids;
    for (const char* p : kPrompts) ids.push_back(*e->add_request(request(*e, p, 60, 0.0f)));
    // Sampled neighbours, one of them opted out of speculation.
    Request a = request(*e, kPrompts[0], 40, 0.9f, 5);
    Request b = request(*e, kPrompts[1], 30, 0.7f, 6);
    b.params.speculative = false;
    ASSERT_TRUE(e->add_request(a).ok());
    const RequestId opted_out = *e->add_request(b);
    Outcome o = drain(*e);
    for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(o.ids[ids[i]], want[i]) << "round " << round << ": " << kPrompts[i];
    EXPECT_EQ(o.usage[opted_out].spec.proposed, 0);
    if (round == 1) {  // the prompts longer than a block (16 tokens) hit
      EXPECT_GT(o.usage[ids[0]].cached_tokens, 0);
      EXPECT_GT(o.usage[ids[1]].cached_tokens, 0);
    }
  }
  EXPECT_GT(e->metrics().spec_num_accepted_tokens, 0u);
}

TEST(SpecGreedy, AcrossPreemption) {
  std::vector<std::vector<int32_t>> want;
  for (const char* p : kPrompts) want.push_back(solo({.n_ctx = 96}, p, 50));
  auto probe = make({});
  ASSERT_TRUE(probe);
  const size_t bytes_per_token = 2ull * probe->hparams().n_layer * probe->hparams().n_kv_dim() * 2;
  // 12 blocks of 16 tokens: not enough for four sequences of ~80 tokens at once.
  auto e = make({.kind = spec::ProposerKind::kNgram, .max_seqs = 4, .n_ctx = 96,
                 .kv_memory_bytes = static_cast<int64_t>(bytes_per_token * 16 * 12)});
  ASSERT_TRUE(e);
  std::vector<RequestId> ids;
  for (const char* p : kPrompts) ids.push_back(*e->add_request(request(*e, p, 50, 0.0f)));
  Outcome o = drain(*e);
  EXPECT_GT(e->metrics().preemptions, 0u);
  EXPECT_GT(e->metrics().spec_num_accepted_tokens, 0u);
  for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(o.ids[ids[i]], want[i]) << kPrompts[i];
}

// Deliberately bad proposers: random tokens, either as a deterministic proposer (q =
// one-hot) or drawn from a q of their own that has nothing to do with the model.
class RandomProposer final : public spec::Proposer {
 public:
  RandomProposer(int32_t n_vocab, bool with_q) : n_vocab_(n_vocab), with_q_(with_q), rng_(99) {}
  void propose(std::span<spec::ProposeSeq> seqs) override {
    for (spec::ProposeSeq& s : seqs) {
      s.n_out = s.max_n;
      s.probs_valid = with_q_;
      for (int32_t j = 0; j < s.max_n; ++j) {
        if (!with_q_) {
          s.out_tokens[j] = static_cast<int32_t>(rng_() % static_cast<uint64_t>(n_vocab_));
          continue;
        }
        // q: weight 1 + (id % 7) on the ids below 64, zero elsewhere; d ~ q.
        std::span<float> q = s.out_probs.subspan(static_cast<size_t>(j) * n_vocab_, n_vocab_);
        std::fill(q.begin(), q.end(), 0.0f);
        double total = 0;
        for (int32_t i = 0; i < 64; ++i) total += q[i] = 1.0f + static_cast<float>(i % 7);
        for (int32_t i = 0; i < 64; ++i) q[i] = static_cast<float>(q[i] / total);
        const double u = std::uniform_real_distribution<double>(0, 1)(rng_);
        double c = 0;
        int32_t d = 63;
        for (int32_t i = 0; i < 64; ++i)
          if ((c += q[i]) > u) {
            d = i;
            break;
          }
        s.out_tokens[j] = d;
      }
    }
  }
  void release(uint64_t) override {}
  const char* name() const override { return "random"; }
  bool samples() const override { return with_q_; }

 private:
  int32_t n_vocab_;
  bool with_q_;
  std::mt19937_64 rng_;
};

// Grammar-constrained requests speculate too: each verified position is masked by the
// matcher after the tokens before it, so a proposal the grammar refuses is rejected and
// greedy output is the spec-off constrained output, token for token. The grammar (no
// capitals, quotes or '!') refuses much of what the n-gram proposer copies from the
// prompts (" Lily", "Tom", quotes), and the random proposer's tokens mostly.
const char* kLowercaseGbnf = "root ::= [a-z ,.]+\n";

std::shared_ptr<const grammar::CompiledGrammar> compile_for(const Engine& e, const std::string& gbnf) {
  auto g = grammar::CompiledGrammar::from_gbnf(gbnf, grammar::TokenTable::build(e.tokenizer(), e.hparams().n_vocab));
  EXPECT_TRUE(g.ok()) << g.message();
  return g.ok() ? *g : nullptr;
}

std::string text_of(const Engine& e, const std::vector<int32_t>& ids) {
  tok::StreamingDetokenizer d(e.tokenizer());
  std::string s;
  for (int32_t id : ids) s += d.push(id);
  return s + d.flush();
}

// Every prompt once, greedy (temperature 0) or sampled, under the grammar: the token ids
// per prompt.
std::vector<std::vector<int32_t>> constrained(const Cfg& cfg, float temperature, spec::SpecCounts* counts,
                                              std::unique_ptr<spec::Proposer> proposer = nullptr) {
  auto e = make(cfg, std::move(proposer));
  if (!e) return {};
  auto g = compile_for(*e, kLowercaseGbnf);
  std::vector<std::vector<int32_t>> out;
  for (const char* p : kPrompts) {
    Request r = request(*e, p, 60, temperature, 7);
    r.params.grammar = g;
    const RequestId id = *e->add_request(r);
    Outcome o = drain(*e);
    out.push_back(o.ids[id]);
    counts->proposed += o.usage[id].spec.proposed;
    counts->accepted += o.usage[id].spec.accepted;
    const std::string text = text_of(*e, o.ids[id]);
    grammar::GrammarMatcher m(g);
    EXPECT_TRUE(m.accept_bytes(text)) << "outside the grammar: " << text;
  }
  return out;
}

TEST(SpecGrammar, GreedyConstrainedIsIdenticalAndSpeculates) {
  spec::SpecCounts none, ngram, random;
  const auto plain = constrained({}, 0.0f, &none);
  const auto with_ngram = constrained({.kind = spec::ProposerKind::kNgram}, 0.0f, &ngram);
  EXPECT_EQ(with_ngram, plain);
  EXPECT_GT(ngram.proposed, 20);
  EXPECT_GT(ngram.accepted, 10);
  EXPECT_LT(ngram.accepted, ngram.proposed);
  const auto with_random = constrained({.kind = spec::ProposerKind::kCustom}, 0.0f, &random,
                                       std::make_unique<RandomProposer>(2048, false));
  EXPECT_EQ(with_random, plain);
  EXPECT_GT(random.proposed, 20);
}

TEST(SpecGrammar, SampledConstrainedStaysInTheGrammar) {
  spec::SpecCounts ngram, random_q;
  constrained({.kind = spec::ProposerKind::kNgram}, 1.0f, &ngram);
  EXPECT_GT(ngram.proposed, 20);
  // Draft tokens drawn from a q of ids below 64, most outside the grammar: the residual
  // draw must still land inside it.
  constrained({.kind = spec::ProposerKind::kCustom}, 1.0f, &random_q, std::make_unique<RandomProposer>(2048, true));
  EXPECT_GT(random_q.proposed, 20);
}

TEST(SpecGreedy, BadProposerChangesNothing) {
  auto e = make({.kind = spec::ProposerKind::kCustom, .draft_max = 4}, std::make_unique<RandomProposer>(2048, false));
  ASSERT_TRUE(e);
  const RequestId id = *e->add_request(request(*e, kPrompts[0], 40, 0.0f));
  Outcome o = drain(*e);
  EXPECT_EQ(o.ids[id], solo({}, kPrompts[0], 40));
  EXPECT_GT(o.usage[id].spec.proposed, 0);
}

// The verify cost measured at start (draft_max 0: k chosen from it) leaves greedy output
// identical.
TEST(SpecCost, MeasuredAtStartAndStillExact) {
  auto e = make({.kind = spec::ProposerKind::kNgram, .draft_max = 0, .measure_cost = true});
  ASSERT_TRUE(e);
  const spec::StepCosts& c = e->step_costs();
  ASSERT_FALSE(c.empty());
  EXPECT_EQ(c.points().front().n_tokens, 1);
  EXPECT_EQ(c.points().back().n_tokens, 1 + spec::kAutoDraftMax);
  EXPECT_GE(e->config().spec.draft_max, 1);
  EXPECT_LE(e->config().spec.draft_max, spec::kAutoDraftMax);
  const RequestId id = *e->add_request(request(*e, kPrompts[1], 60, 0.0f));
  Outcome o = drain(*e);
  EXPECT_EQ(o.ids[id], solo({}, kPrompts[1], 60));
}

// A step that is already compute-bound gets no proposals: with a verify cost that turns
// compute-bound past 4 tokens, 16 decoding sequences never speculate, one alone does.
TEST(SpecCost, LargeBatchBacksOff) {
  const std::vector<std::pair<int32_t, double>> knee = {{1, 30}, {4, 31}, {8, 59}, {16, 115}};
  for (int32_t n_req : {16, 1}) {
    auto e = make({.kind = spec::ProposerKind::kCustom, .max_seqs = 16, .max_batch_tokens = 512, .n_ctx = 128,
                   .draft_max = 4, .measure_cost = true, .given_costs = knee},
                  std::make_unique<RandomProposer>(2048, false));
    ASSERT_TRUE(e);
    std::vector<RequestId> ids;
    for (int32_t i = 0; i < n_req; ++i) ids.push_back(*e->add_request(request(*e, kPrompts[0], 20, 0.0f)));
    Outcome o = drain(*e);
    const std::vector<int32_t> want = solo({}, kPrompts[0], 20);
    for (RequestId id : ids) EXPECT_EQ(o.ids[id], want);
    if (n_req == 16) {
      EXPECT_EQ(e->metrics().spec_num_drafts, 0u);
    } else {
      EXPECT_GT(e->metrics().spec_num_drafts, 0u);
    }
  }
}

// Sampled: the joint distribution of the first kTokens generated tokens, over kSeeds
// seeds, with and without speculation. Two-sample chi-square over the sequences seen at
// least 10 times in the pooled sample (the rest pooled into one cell); the threshold is
// the 0.999 quantile of chi-square with that many degrees of freedom (Wilson-Hilferty).
// Power: a verifier that accepted every proposal (no rejection sampling) scored 471 (n-gram,
// 25 dof, threshold 52.6) and 147 (random proposers, 10 dof, threshold 29.6) when
// verify_position was broken that way. About 13 s in all (6000 requests of 6 tokens).
constexpr int kTokens = 6;
constexpr int kSeeds = 1500;

std::map<std::vector<int32_t>, int> sample_sequences(spec::ProposerKind kind, std::unique_ptr<spec::Proposer> prop,
                                                     uint64_t seed0, spec::SpecCounts* counts,
                                                     const std::string& draft = "") {
  auto e = make({.kind = kind, .max_seqs = 16, .max_batch_tokens = 256, .n_ctx = 128, .draft_max = 3, .draft = draft},
                std::move(prop));
  std::map<std::vector<int32_t>, int> hist;
  if (!e) return hist;
  for (int s = 0; s < kSeeds; ++s) {
    Request r = request(*e, kPrompts[0], kTokens, 0.7f, seed0 + static_cast<uint64_t>(s));
    r.params.sampling.top_k = 0;
    r.params.sampling.top_p = 0.9f;
    r.params.sampling.min_p = 0.0f;
    EXPECT_TRUE(e->add_request(r).ok());
  }
  Outcome o = drain(*e);
  for (auto& [id, ids] : o.ids) {
    EXPECT_EQ(ids.size(), static_cast<size_t>(kTokens));
    hist[ids]++;
    counts->proposed += o.usage[id].spec.proposed;
    counts->accepted += o.usage[id].spec.accepted;
  }
  return hist;
}

double chi2_quantile_999(int dof) {  // Wilson-Hilferty
  const double z = 3.0902, k = dof;
  const double t = 1 - 2 / (9 * k) + z * std::sqrt(2 / (9 * k));
  return k * t * t * t;
}

void expect_same_distribution(const std::map<std::vector<int32_t>, int>& a,
                              const std::map<std::vector<int32_t>, int>& b, const char* what) {
  std::map<std::vector<int32_t>, std::pair<int, int>> cells;
  for (auto& [k, v] : a) cells[k].first += v;
  for (auto& [k, v] : b) cells[k].second += v;
  std::vector<std::pair<int, int>> kept;
  std::pair<int, int> rest{0, 0};
  for (auto& [k, v] : cells) {
    if (v.first + v.second >= 10) {
      kept.push_back(v);
    } else {
      rest.first += v.first;
      rest.second += v.second;
    }
  }
  if (rest.first + rest.second > 0) kept.push_back(rest);
  ASSERT_GE(kept.size(), 5u) << "too few distinct sequences to compare";
  double n_a = 0, n_b = 0;
  for (auto& [x, y] : kept) {
    n_a += x;
    n_b += y;
  }
  double chi = 0;
  for (auto& [x, y] : kept) {
    const double tot = x + y;
    const double ea = tot * n_a / (n_a + n_b), eb = tot * n_b / (n_a + n_b);
    chi += (x - ea) * (x - ea) / ea + (y - eb) * (y - eb) / eb;
  }
  const int dof = static_cast<int>(kept.size()) - 1;
  EXPECT_LT(chi, chi2_quantile_999(dof)) << what << ": chi-square " << chi << " with " << dof << " dof";
}

TEST(SpecSampled, DistributionMatchesPlainSampling) {
  spec::SpecCounts none, ngram, rand_det, rand_q;
  const auto plain = sample_sequences(spec::ProposerKind::kNone, nullptr, 1, &none);
  // Different seeds for the other runs: two independent samples of the same distribution.
  const auto with_ngram = sample_sequences(spec::ProposerKind::kNgram, nullptr, 100000, &ngram);
  EXPECT_GT(ngram.proposed, 300);
  EXPECT_GT(ngram.accepted, 0);
  EXPECT_LT(ngram.accepted, ngram.proposed);  // rejections happened: the residual path ran
  expect_same_distribution(plain, with_ngram, "ngram");
  const auto bad_det = sample_sequences(spec::ProposerKind::kCustom, std::make_unique<RandomProposer>(2048, false),
                                        200000, &rand_det);
  EXPECT_GT(rand_det.proposed, 300);
  expect_same_distribution(plain, bad_det, "random tokens");
  const auto bad_q = sample_sequences(spec::ProposerKind::kCustom, std::make_unique<RandomProposer>(2048, true),
                                      300000, &rand_q);
  EXPECT_GT(rand_q.proposed, 300);
  EXPECT_GT(rand_q.accepted, 0);
  expect_same_distribution(plain, bad_q, "random draft distribution");
  spec::SpecCounts draft;
  const auto with_draft = sample_sequences(spec::ProposerKind::kDraft, nullptr, 400000, &draft, hf_draft());
  EXPECT_GT(draft.proposed, 300);
  EXPECT_GT(draft.accepted, draft.proposed / 2);
  expect_same_distribution(plain, with_draft, "draft model");
}

}  // namespace
}  // namespace lumen::engine
