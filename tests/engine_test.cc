// Engine-level tests: one code path for every client, so these drive the Engine API
// directly on the real tiny models.
#include "engine/engine.h"

#include <gtest/gtest.h>

#include "base/shared_dir.h"
#include "grammar/compiled_grammar.h"
#include "grammar/matcher.h"

namespace lumen::engine {
namespace {

std::string model_path() {
  return shared_dir() + "/models/TinyStories-656K/TinyStories-656K-Q8_0.gguf";
}

std::unique_ptr<Engine> make_engine(int32_t batch, int32_t max_seqs = 1) {
  EngineConfig c;
  c.n_threads = 2;
  c.n_ctx = 256;
  c.max_batch_tokens = batch;
  c.max_seqs = max_seqs;
  auto e = Engine::create(model_path(), c);
  EXPECT_TRUE(e.ok()) << e.message();
  return e.ok() ? std::move(e).value() : nullptr;
}

std::vector<int32_t> run_greedy(Engine& e, const std::vector<int32_t>& prompt, int n) {
  Request r;
  r.prompt_ids = prompt;
  r.params.max_tokens = n;
  r.params.ignore_eos = true;
  r.params.sampling.temperature = 0;
  auto id = e.add_request(r);
  EXPECT_TRUE(id.ok()) << id.message();
  std::vector<int32_t> out;
  while (e.has_work())
    for (RequestEvent& ev : e.step()) out.insert(out.end(), ev.new_token_ids.begin(), ev.new_token_ids.end());
  return out;
}

// A prompt prefilled in chunks of 7 tokens continues exactly like one prefilled at once:
// chunked prefill is the same arithmetic as catching up.
TEST(Engine, ChunkedPrefillEqualsWholePrefill) {
  auto whole = make_engine(512);
  auto chunked = make_engine(7);
  ASSERT_TRUE(whole && chunked);
  const std::vector<int32_t> prompt =
      whole->tokenizer().encode("Once upon a time, there was a little girl named Lily. She loved to play.", true, false);
  ASSERT_GT(prompt.size(), 14u);
  EXPECT_EQ(run_greedy(*whole, prompt, 24), run_greedy(*chunked, prompt, 24));
  EXPECT_EQ(whole->kv_blocks_in_use(), 0);
  EXPECT_EQ(chunked->kv_blocks_in_use(), 0);
}

// Several sequences in one batch produce what each produces alone (greedy).
TEST(Engine, BatchedSequencesEqualSolo) {
  auto solo = make_engine(512, 1);
  auto batched = make_engine(64, 4);
  ASSERT_TRUE(solo && batched);
  const char* prompts[] = {"Once upon a time", "Lily and Tom went to the park.", "The little dog was sad because",
                           "One day"};
  std::vector<std::vector<int32_t>> want;
  std::vector<RequestId> ids;
  for (const char* p : prompts) {
    const auto ids_p = solo->tokenizer().encode(p, true, false);
    want.push_back(run_greedy(*solo, ids_p, 20));
    Request r;
    r.prompt_ids = ids_p;
    r.params.max_tokens = 20;
    r.params.ignore_eos = true;
    r.params.sampling.temperature = 0;
    auto id = batched->add_request(r);
    ASSERT_TRUE(id.ok());
    ids.push_back(*id);
  }
  std::map<RequestId, std::vector<int32_t>> got;
  while (batched->has_work())
    for (RequestEvent& ev : batched->step())
      got[ev.request_id].insert(got[ev.request_id].end(), ev.new_token_ids.begin(), ev.new_token_ids.end());
  for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(got[ids[i]], want[i]) << prompts[i];
  EXPECT_EQ(batched->kv_blocks_in_use(), 0);
}

TEST(Engine, RejectsBadRequestsWithNamedField) {
  auto e = make_engine(64);
  ASSERT_TRUE(e);
  Request r;
  auto id = e->add_request(r);
  ASSERT_FALSE(id.ok());
  EXPECT_NE(id.message().find("prompt"), std::string::npos);
  r.prompt_ids = {1, 2, 3};
  r.params.max_tokens = -1;
  id = e->add_request(r);
  ASSERT_FALSE(id.ok());
  EXPECT_NE(id.message().find("max_tokens"), std::string::npos);
  r.params.max_tokens = 4;
  r.prompt_ids = {1, 999999};
  id = e->add_request(r);
  ASSERT_FALSE(id.ok());
  EXPECT_NE(id.message().find("token id"), std::string::npos);
  r.prompt_ids.assign(300, 5);
  id = e->add_request(r);
  ASSERT_FALSE(id.ok());
  EXPECT_NE(id.message().find("context"), std::string::npos);
  EXPECT_FALSE(e->has_work());
}

TEST(Engine, CancelFreesBlocks) {
  auto e = make_engine(64, 2);
  ASSERT_TRUE(e);
  Request r;
  r.prompt_ids = e->tokenizer().encode("Once upon a time", true, false);
  r.params.max_tokens = 100;
  r.params.ignore_eos = true;
  auto id = e->add_request(r);
  ASSERT_TRUE(id.ok());
  e->step();
  e->step();
  EXPECT_GT(e->kv_blocks_in_use(), 0);
  e->cancel(*id);
  EXPECT_EQ(e->kv_blocks_in_use(), 0);
  EXPECT_FALSE(e->has_work());
}

}  // namespace
}  // namespace lumen::engine

namespace lumen::engine {
namespace {

struct Collected {
  std::map<int32_t, std::vector<int32_t>> ids;  // by seq_index
  std::map<int32_t, std::string> text;
  std::vector<RequestEvent> finals;
  Usage usage;
  std::vector<TokenLogprob> logprobs;
};

Collected drain(Engine& e) {
  Collected c;
  while (e.has_work()) {
    for (RequestEvent& ev : e.step()) {
      auto& v = c.ids[ev.seq_index];
      v.insert(v.end(), ev.new_token_ids.begin(), ev.new_token_ids.end());
      c.text[ev.seq_index] += ev.text_delta;
      for (auto& lp : ev.logprobs) c.logprobs.push_back(lp);
      if (ev.request_finished) {
        c.usage = ev.usage;
        c.finals.push_back(ev);
      }
    }
    EXPECT_EQ(e.check_invariants(), "");
  }
  return c;
}

std::unique_ptr<Engine> make_engine_cfg(EngineConfig c, const std::string& path = model_path()) {
  c.n_threads = 2;
  if (c.n_ctx == 0) c.n_ctx = 256;
  auto e = Engine::create(path, c);
  EXPECT_TRUE(e.ok()) << e.message();
  return e.ok() ? std::move(e).value() : nullptr;
}

Request greedy_request(Engine& e, const char* prompt, int n_tokens) {
  Request r;
  r.prompt_ids = e.tokenizer().encode(prompt, true, false);
  r.params.max_tokens = n_tokens;
  r.params.ignore_eos = true;
  r.params.sampling.temperature = 0;
  return r;
}

// n > 1 completions fork from one prefill and share its blocks; greedy ones all equal
// the single completion, and sampled ones are reproducible.
TEST(EngineServing, NCompletionsShareThePrompt) {
  auto e = make_engine_cfg({.max_batch_tokens = 64, .max_seqs = 4});
  ASSERT_TRUE(e);
  Request solo = greedy_request(*e, "Once upon a time, there was a dog", 16);
  ASSERT_TRUE(e->add_request(solo).ok());
  const std::vector<int32_t> want = drain(*e).ids[0];
  Request r = solo;
  r.params.n = 3;
  ASSERT_TRUE(e->add_request(r).ok());
  Collected got = drain(*e);
  ASSERT_EQ(got.ids.size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(got.ids[i], want) << "completion " << i;
  EXPECT_EQ(got.usage.completion_tokens, 48);
  EXPECT_EQ(got.finals.size(), 1u);
  EXPECT_EQ(e->kv_blocks_in_use(), 0);
  // Sampled: the three completions differ from each other but repeat with the seed.
  Request s = r;
  s.params.sampling.temperature = 1.0f;
  s.params.sampling.top_k = 0;
  s.params.sampling.top_p = 1.0f;
  s.params.sampling.min_p = 0.0f;
  s.params.sampling.seed = 11;
  ASSERT_TRUE(e->add_request(s).ok());
  Collected a = drain(*e);
  ASSERT_TRUE(e->add_request(s).ok());
  Collected b = drain(*e);
  EXPECT_EQ(a.ids, b.ids);
  EXPECT_NE(a.ids[0], a.ids[1]);
}

// A prompt whose prefix is cached skips those blocks and produces the same tokens.
TEST(EngineServing, PrefixCacheHitGivesSameOutput) {
  auto e = make_engine_cfg({.max_batch_tokens = 512, .max_seqs = 2});
  ASSERT_TRUE(e);
  const char* prompt =
      "Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her "
      "friends. One day, she saw a big red ball. She ran to the ball and kicked it very hard. The ball flew "
      "over the fence and into the garden of an old man. Lily was scared, but she went to the door";
  ASSERT_TRUE(e->add_request(greedy_request(*e, prompt, 20)).ok());
  Collected first = drain(*e);
  EXPECT_EQ(first.usage.cached_tokens, 0);
  ASSERT_TRUE(e->add_request(greedy_request(*e, prompt, 20)).ok());
  Collected second = drain(*e);
  ASSERT_GT(second.usage.prompt_tokens, 48);
  EXPECT_EQ(second.usage.cached_tokens, (second.usage.prompt_tokens - 1) / 16 * 16);
  EXPECT_LT(second.usage.cached_tokens, second.usage.prompt_tokens);
  EXPECT_EQ(first.ids, second.ids);
  // A different salt may not see the cached prefix.
  Request salted = greedy_request(*e, prompt, 20);
  salted.params.cache_salt = "tenant-b";
  ASSERT_TRUE(e->add_request(salted).ok());
  Collected third = drain(*e);
  EXPECT_EQ(third.usage.cached_tokens, 0);
  EXPECT_EQ(third.ids, first.ids);
}

// The same with quantized KV caches (flash attention): prefix hits, copy-on-write and the
// block copies move whole blocks of any type, so a hit gives the very logits of a miss.
// (A model of head size 32: the quantized types store 32-element blocks.)
TEST(EngineServing, PrefixCacheHitGivesSameLogitsWithQuantizedCache) {
  const std::string path = std::string(LUMEN_TEST_DATA_DIR) + "/fa/fa-llama-hd32-f16/model.gguf";
  for (KvDTypes t : {KvDTypes{DType::kQ8_0, DType::kQ8_0}, KvDTypes{DType::kQ4_0, DType::kQ4_0},
                     KvDTypes{DType::kQ8_0, DType::kF16}}) {
    SCOPED_TRACE(std::string(dtype_name(t.k)) + "/" + std::string(dtype_name(t.v)));
    auto e = make_engine_cfg({.max_batch_tokens = 512, .max_seqs = 2, .kv_dtypes = t}, path);
    ASSERT_TRUE(e);
    EXPECT_EQ(e->config().flash_attn, FlashAttn::kOn);  // auto: the types need it
    const char* prompt =
        "Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her "
        "friends. One day, she saw a big red ball. She ran to the ball and kicked it very hard.";
    Request r = greedy_request(*e, prompt, 12);
    r.params.logprobs = 8;
    ASSERT_TRUE(e->add_request(r).ok());
    Collected first = drain(*e);
    EXPECT_EQ(first.usage.cached_tokens, 0);
    ASSERT_TRUE(e->add_request(r).ok());
    Collected second = drain(*e);
    EXPECT_GT(second.usage.cached_tokens, 16);
    EXPECT_EQ(first.ids, second.ids);
    ASSERT_EQ(first.logprobs.size(), second.logprobs.size());
    for (size_t i = 0; i < first.logprobs.size(); ++i) {
      EXPECT_EQ(first.logprobs[i].logprob, second.logprobs[i].logprob) << i;
      EXPECT_EQ(first.logprobs[i].top, second.logprobs[i].top) << i;
    }
  }
}

// Multi-head latent attention in each of its forms alone (absorbed: mla_expand_tokens -1;
// expanded, decode too: 1) and mixed (64-token prefill chunks expanded, the rest absorbed:
// 32), through the engine: a prompt of five 64-token chunks over two 256-key chunks, then
// the same prompt again from the prefix cache (its last tokens at pos0 > 0), with an f16
// and a bf16 cache (read by flash attention in the absorbed form, widened by the type table
// in the expanded one; the tiny rows of 48 take no 32-element blocks). The
// greedy tokens are the same and the logprobs the same up to rounding: 1e-3 with f16, 1e-2
// with bf16, whose 8-bit mantissa the absorbed form's flash attention also rounds each
// query to (llama.cpp's -fa numerics: Q in the K type), while the expanded form multiplies
// the widened rows in f32 (measured: 3.3e-3 at most).
TEST(EngineServing, LatentAttentionExpandedAndAbsorbedFormsAgree) {
  const std::string path = std::string(LUMEN_TEST_DATA_DIR) + "/arch/deepseek2-mla/model.gguf";
  std::string prompt;
  for (int i = 0; i < 10; ++i)
    prompt += "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. ";
  for (const DType kv : {DType::kF16, DType::kBF16}) {
    SCOPED_TRACE(dtype_name(kv));
    std::vector<Collected> runs;  // per form: the first run, then the prefix-cache hit
    for (const int32_t mla_expand : {-1, 1, 32}) {
      auto e = make_engine_cfg({.n_ctx = 512, .max_batch_tokens = 64, .max_seqs = 1, .kv_dtypes = {kv, kv},
                                .mla_expand_tokens = mla_expand},
                               path);
      ASSERT_TRUE(e);
      Request r = greedy_request(*e, prompt.c_str(), 16);
      r.params.logprobs = 1;
      ASSERT_GT(r.prompt_ids.size(), 300u);
      for (int pass = 0; pass < 2; ++pass) {
        ASSERT_TRUE(e->add_request(r).ok());
        runs.push_back(drain(*e));
        EXPECT_EQ(runs.back().usage.cached_tokens, pass == 0 ? 0 : (r.prompt_ids.size() - 1) / 16 * 16);
      }
    }
    for (size_t i = 1; i < runs.size(); ++i) {
      SCOPED_TRACE("run " + std::to_string(i));
      EXPECT_EQ(runs[i].ids, runs[0].ids);
      ASSERT_EQ(runs[i].logprobs.size(), runs[0].logprobs.size());
      for (size_t t = 0; t < runs[0].logprobs.size(); ++t)
        EXPECT_NEAR(runs[i].logprobs[t].logprob, runs[0].logprobs[t].logprob, kv == DType::kF16 ? 1e-3 : 1e-2)
            << "token " << t;
    }
  }
  EngineConfig c;  // a model without latent attention: the setting would do nothing
  c.mla_expand_tokens = 64;
  auto refused = Engine::create(model_path(), c);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.message().find("--mla-expand"), std::string::npos) << refused.message();
}

// --rotate-k: q and k rotated alike, so the model computes the same attention: with a q8_0
// K cache the greedy ids stay those of the f16 cache and the logprobs move no more than the
// unrotated q8_0 cache moves them (a rotation of q or k alone, or with other signs,
// scrambles every score). It is refused for a K type it cannot help.
TEST(EngineServing, RotatedKeysKeepTheLogits) {
  const std::string path = std::string(LUMEN_TEST_DATA_DIR) + "/fa/fa-llama-hd32-f16/model.gguf";
  const char* prompt =
      "Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her "
      "friends. One day, she saw a big red ball.";
  auto run = [&](KvDTypes t, bool rotate) {
    auto e = make_engine_cfg({.max_batch_tokens = 512, .max_seqs = 1, .kv_dtypes = t, .rotate_k = rotate}, path);
    EXPECT_TRUE(e);
    Request r = greedy_request(*e, prompt, 24);
    r.params.logprobs = 1;
    EXPECT_TRUE(e->add_request(r).ok());
    return drain(*e);
  };
  auto max_diff = [](const Collected& a, const Collected& b) {
    double d = 0;
    for (size_t i = 0; i < a.logprobs.size(); ++i)
      d = std::max(d, std::abs(double{a.logprobs[i].logprob} - b.logprobs[i].logprob));
    return d;
  };
  const Collected base = run({DType::kF16, DType::kF16}, false);
  const Collected plain = run({DType::kQ8_0, DType::kF16}, false);
  const Collected rotated = run({DType::kQ8_0, DType::kF16}, true);
  ASSERT_EQ(base.logprobs.size(), 24u);
  ASSERT_EQ(plain.logprobs.size(), 24u);
  ASSERT_EQ(rotated.logprobs.size(), 24u);
  EXPECT_EQ(rotated.ids, base.ids);
  EXPECT_GT(max_diff(plain, base), 0.0) << "a q8_0 cache moves the logprobs a little";
  EXPECT_LT(max_diff(rotated, base), 2 * max_diff(plain, base) + 1e-3);
  EngineConfig c;
  c.rotate_k = true;
  c.kv_dtypes = {DType::kF16, DType::kQ8_0};
  auto refused = Engine::create(path, c);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.message().find("--rotate-k"), std::string::npos) << refused.message();
}

// With a KV cache too small for every request at once, the engine preempts and
// recomputes instead of failing; every request still gets exactly its solo output.
void expect_preemption_keeps_outputs_exact(const std::string& path) {
  auto solo = make_engine_cfg({.max_batch_tokens = 64, .max_seqs = 1}, path);
  ASSERT_TRUE(solo);
  const char* prompts[] = {"Once upon a time", "Tom had a red car.", "The sun was hot and",
                           "Lily and her mom went", "A big fish swam"};
  std::vector<std::vector<int32_t>> want;
  for (const char* p : prompts) {
    ASSERT_TRUE(solo->add_request(greedy_request(*solo, p, 40)).ok());
    want.push_back(drain(*solo).ids[0]);
  }
  const model::KvLayout& layout = solo->model().kv_layout();  // f16 K/V of every layer (MLA: one row)
  size_t bytes_per_token = 0;
  for (int32_t g = 0; g < layout.n_groups(); ++g) bytes_per_token += layout.group_bytes_per_token(g, 2);
  // 10 blocks of 16 tokens: room for 3 sequences of ~45 tokens, not 5.
  auto e = make_engine_cfg({.n_ctx = 64, .max_batch_tokens = 64, .max_seqs = 5,
                            .kv_memory_bytes = static_cast<int64_t>(bytes_per_token * 16 * 10)},
                           path);
  ASSERT_TRUE(e);
  std::vector<RequestId> ids;
  for (const char* p : prompts) ids.push_back(*e->add_request(greedy_request(*e, p, 40)));
  std::map<RequestId, std::vector<int32_t>> got;
  while (e->has_work()) {
    for (RequestEvent& ev : e->step()) {
      EXPECT_NE(ev.finish_reason, FinishReason::kError) << ev.error;
      got[ev.request_id].insert(got[ev.request_id].end(), ev.new_token_ids.begin(), ev.new_token_ids.end());
    }
    ASSERT_EQ(e->check_invariants(), "");
  }
  EXPECT_GT(e->metrics().preemptions, 0u);
  for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(got[ids[i]], want[i]) << prompts[i];
  EXPECT_EQ(e->kv_blocks_in_use(), 0);
}

TEST(EngineServing, PreemptionKeepsOutputsExact) { expect_preemption_keeps_outputs_exact(model_path()); }

// The same with a mixture of experts (tests/data/arch: Qwen2-MoE with a shared expert):
// five sequences batched, grouped by expert per step, preempted and recomputed.
TEST(EngineServing, MixtureOfExpertsPreemptionKeepsOutputsExact) {
  expect_preemption_keeps_outputs_exact(std::string(LUMEN_TEST_DATA_DIR) + "/arch/qwen2moe-shared-expert/model.gguf");
}

// The same with multi-head latent attention (tests/data/arch: DeepSeek-2 with a q bottleneck):
// the cache holds latent rows, which preemption drops and recomputes like any K/V.
TEST(EngineServing, LatentAttentionPreemptionKeepsOutputsExact) {
  expect_preemption_keeps_outputs_exact(std::string(LUMEN_TEST_DATA_DIR) + "/arch/deepseek2-mla/model.gguf");
}

// A prefix-cache hit on latent rows gives the tokens a miss gives (DeepSeek-2, MLA).
TEST(EngineServing, LatentAttentionPrefixCacheHitGivesSameOutput) {
  auto e = make_engine_cfg({.max_batch_tokens = 64, .max_seqs = 2},
                           std::string(LUMEN_TEST_DATA_DIR) + "/arch/deepseek2-mla/model.gguf");
  ASSERT_TRUE(e);
  const char* prompt = "Once upon a time, there was a little girl named Lily. She loved to play outside in the park "
                       "with her friends. One day, she saw a big red ball.";
  ASSERT_TRUE(e->add_request(greedy_request(*e, prompt, 20)).ok());
  Collected first = drain(*e);
  EXPECT_EQ(first.usage.cached_tokens, 0);
  ASSERT_TRUE(e->add_request(greedy_request(*e, prompt, 20)).ok());
  Collected second = drain(*e);
  ASSERT_GT(second.usage.prompt_tokens, 32);
  EXPECT_EQ(second.usage.cached_tokens, (second.usage.prompt_tokens - 1) / 16 * 16);
  EXPECT_EQ(first.ids, second.ids);
}

TEST(EngineServing, LogprobsAreConsistent) {
  auto e = make_engine_cfg({.max_batch_tokens = 64, .max_seqs = 1});
  ASSERT_TRUE(e);
  Request r = greedy_request(*e, "Once upon a time", 8);
  r.params.logprobs = 5;
  ASSERT_TRUE(e->add_request(r).ok());
  Collected c = drain(*e);
  ASSERT_EQ(c.logprobs.size(), 8u);
  for (const TokenLogprob& lp : c.logprobs) {
    EXPECT_LE(lp.logprob, 0.0f);
    ASSERT_EQ(lp.top.size(), 5u);
    EXPECT_EQ(lp.top[0].first, lp.id);  // greedy picks the most likely token
    EXPECT_FLOAT_EQ(lp.top[0].second, lp.logprob);
    for (size_t i = 1; i < lp.top.size(); ++i) EXPECT_LE(lp.top[i].second, lp.top[i - 1].second);
  }
}

}  // namespace
}  // namespace lumen::engine

// Constrained decoding through the engine: every completion's text stays in the grammar.
namespace lumen::engine {
namespace {

std::shared_ptr<const grammar::CompiledGrammar> compile_for(Engine& e, const std::string& gbnf) {
  auto vocab = grammar::TokenTable::build(e.tokenizer(), e.hparams().n_vocab);
  auto g = grammar::CompiledGrammar::from_gbnf(gbnf, vocab);
  EXPECT_TRUE(g.ok()) << g.message();
  return g.ok() ? *g : nullptr;
}

bool in_language(const std::shared_ptr<const grammar::CompiledGrammar>& g, const std::string& text) {
  grammar::GrammarMatcher m(g);
  return m.accept_bytes(text) && m.can_end();
}

TEST(EngineGrammar, EveryCompletionMatchesTheGrammar) {
  auto e = make_engine_cfg({.max_batch_tokens = 64, .max_seqs = 4});
  ASSERT_TRUE(e);
  // TinyStories-656K has no byte tokens and cannot spell '{': a record without braces.
  const std::string gbnf =
      "root ::= \"name: \" [a-z]{1,12} \", age: \" [0-9]{1,2} \", pet: \" ( \"dog\" | \"cat\" ) \".\"\n";
  auto g = compile_for(*e, gbnf);
  ASSERT_NE(g, nullptr);
  for (float temp : {0.0f, 1.0f}) {
    Request r = greedy_request(*e, "Once upon a time, there was a", 64);
    r.params.grammar = g;
    r.params.n = temp > 0 ? 4 : 1;
    r.params.sampling.temperature = temp;
    r.params.sampling.top_k = 0;
    r.params.sampling.top_p = 1.0f;
    r.params.sampling.min_p = 0.0f;
    r.params.sampling.seed = 5;
    ASSERT_TRUE(e->add_request(r).ok());
    Collected c = drain(*e);
    ASSERT_EQ(c.text.size(), static_cast<size_t>(r.params.n));
    for (const auto& [i, text] : c.text) {
      EXPECT_TRUE(in_language(g, text)) << "completion " << i << " at temperature " << temp << ": " << text;
    }
    ASSERT_EQ(c.finals.size(), 1u);
    EXPECT_EQ(e->kv_blocks_in_use(), 0);
  }
}

TEST(EngineGrammar, LogprobsAreTheModelsAndEndsAreStops) {
  auto e = make_engine_cfg({.max_batch_tokens = 64, .max_seqs = 1});
  ASSERT_TRUE(e);
  Request free_run = greedy_request(*e, "Once upon a time", 1);
  free_run.params.logprobs = 5;
  ASSERT_TRUE(e->add_request(free_run).ok());
  const Collected want = drain(*e);
  Request r = free_run;
  r.params.max_tokens = 32;
  r.params.grammar = compile_for(*e, "root ::= \" yes\" | \" no\"\n");
  ASSERT_NE(r.params.grammar, nullptr);
  ASSERT_TRUE(e->add_request(r).ok());
  const Collected got = drain(*e);
  ASSERT_FALSE(got.logprobs.empty());
  ASSERT_FALSE(want.logprobs.empty());
  EXPECT_EQ(got.logprobs[0].top, want.logprobs[0].top);  // the distribution before the mask
  EXPECT_TRUE(got.text.at(0) == " yes" || got.text.at(0) == " no") << got.text.at(0);
  ASSERT_EQ(got.finals.size(), 1u);
  EXPECT_EQ(got.finals[0].finish_reason, FinishReason::kStop);  // complete: no need to wait for EOS
}

TEST(EngineGrammar, ImpossibleGrammarsAndOtherVocabulariesAreErrors) {
  auto e = make_engine_cfg({.max_batch_tokens = 64, .max_seqs = 1});
  ASSERT_TRUE(e);
  Request r = greedy_request(*e, "Once upon a time", 8);
  r.params.grammar = compile_for(*e, "root ::= \"\\x01\\x02\"\n");  // no token spells it
  ASSERT_NE(r.params.grammar, nullptr);
  ASSERT_TRUE(e->add_request(r).ok());
  const Collected c = drain(*e);
  ASSERT_EQ(c.finals.size(), 1u);
  EXPECT_EQ(c.finals[0].finish_reason, FinishReason::kError);
  EXPECT_NE(c.finals[0].error.find("grammar"), std::string::npos) << c.finals[0].error;
  auto other = grammar::TokenTable::from_pieces({"a", "b"}, {});
  auto g = grammar::CompiledGrammar::from_gbnf("root ::= \"a\"\n", other);
  ASSERT_TRUE(g.ok());
  r.params.grammar = *g;
  auto id = e->add_request(r);
  ASSERT_FALSE(id.ok());
  EXPECT_NE(id.message().find("grammar: compiled for a vocabulary of 2 tokens"), std::string::npos) << id.message();
}

}  // namespace
}  // namespace lumen::engine
