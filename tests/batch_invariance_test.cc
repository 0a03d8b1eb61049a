// Batch invariance, always on: a request's logits are the same bits whatever else the
// engine runs beside it. The kernels promise it (kernels/kernel_table.h: a matmul row equals
// the vec_dot of that row, whatever the batch; kernels/attention.cc: a token's attention
// depends only on its own context), so the engine needs no "deterministic" mode. Checked
// here end to end, through the engine with the best kernels of this host: one request's
// full logits at every generated token, compared bit for bit between
//   - the request alone (1 thread, prefix cache on),
//   - beside three other requests (sampled, different prompts and lengths),
//   - after the same prompt filled the prefix cache (its first blocks come from there),
//   - with the prefix cache off,
//   - prefilled in chunks of 5 tokens while others decode beside it,
//   - on 2 threads.
#include <cstring>

#include <gtest/gtest.h>

#include "base/shared_dir.h"
#include "engine/engine.h"

namespace lumen::engine {
namespace {

struct RunSetup {
  std::string model;            // empty: TinyStories-656K Q8_0
  int n_threads = 1;
  int32_t max_batch_tokens = 64;
  bool prefix_cache = true;
  bool neighbours = false;      // three other requests beside it
  bool warm_prefix = false;     // the same prompt ran before (prefix-cache hit)
  int prompt_repeats = 1;       // the prompt under test is kPrompt this many times
  size_t min_prompt_tokens = 0; // checked: the prompt under test is at least this long
  int32_t mla_expand_tokens = 0; // EngineConfig::mla_expand_tokens (MLA models only)
};

const char* kPrompt = "Once upon a time, there was a little girl named Lily. She loved to play outside in the sun.";

// The logits of every generated token of the request under test, flattened.
std::vector<float> run(const RunSetup& s) {
  EngineConfig c;
  c.n_threads = s.n_threads;
  c.n_ctx = 320;
  c.max_batch_tokens = s.max_batch_tokens;
  c.max_seqs = 4;
  c.enable_prefix_cache = s.prefix_cache;
  c.mla_expand_tokens = s.mla_expand_tokens;
  auto e = Engine::create(
      s.model.empty() ? shared_dir() + "/models/TinyStories-656K/TinyStories-656K-Q8_0.gguf" : s.model, c);
  EXPECT_TRUE(e.ok()) << e.message();
  if (!e.ok()) return {};
  Engine& eng = **e;
  const int32_t n_vocab = eng.hparams().n_vocab;
  auto add = [&](const std::string& prompt, float temperature, int32_t n_tokens, int32_t top) {
    Request r;
    r.prompt_ids = eng.tokenizer().encode(prompt, true, false);
    if (top > 0) {
      EXPECT_GE(r.prompt_ids.size(), s.min_prompt_tokens);
    }
    r.params.max_tokens = n_tokens;
    r.params.ignore_eos = true;
    r.params.sampling.temperature = temperature;
    r.params.sampling.seed = 11;
    r.params.top_logits = top;
    auto id = eng.add_request(std::move(r));
    EXPECT_TRUE(id.ok()) << id.message();
    return id.ok() ? *id : RequestId{0};
  };
  auto drain = [&](RequestId watch, std::vector<float>* out) {
    while (eng.has_work())
      for (RequestEvent& ev : eng.step()) {
        if (ev.request_id != watch || !out) continue;
        for (const auto& top : ev.top) {
          // top_logits = n_vocab: every logit, ordered by value then id; put back by id.
          std::vector<float> row(n_vocab);
          for (const auto& [id, logit] : top) row[id] = logit;
          out->insert(out->end(), row.begin(), row.end());
        }
      }
  };
  if (s.warm_prefix) {
    add(kPrompt, 0.8f, 4, 0);
    drain(0, nullptr);
  }
  if (s.neighbours) {
    add("The little dog was sad because", 0.9f, 30, 0);
    add("Tom had a red ball. One day", 0.7f, 25, 0);
    add(std::string(kPrompt) + " Her mom said", 1.0f, 20, 0);
  }
  std::string prompt = kPrompt;
  for (int i = 1; i < s.prompt_repeats; ++i) prompt += std::string(" ") + kPrompt;
  const RequestId me = add(prompt, 0.0f, 12, n_vocab);
  std::vector<float> logits;
  drain(me, &logits);
  EXPECT_EQ(logits.size(), static_cast<size_t>(12) * n_vocab);
  return logits;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

void expect_invariant(const std::string& model) {
  const std::vector<float> alone = run({.model = model});
  ASSERT_FALSE(alone.empty());
  struct Variant {
    const char* name;
    RunSetup setup;
  };
  const Variant variants[] = {
      {"beside three other requests", {.model = model, .neighbours = true}},
      {"after a prefix-cache hit", {.model = model, .warm_prefix = true}},
      {"prefix cache off, beside others", {.model = model, .prefix_cache = false, .neighbours = true}},
      {"chunked prefill (5 tokens) beside others", {.model = model, .max_batch_tokens = 5, .neighbours = true}},
      {"2 threads, beside others", {.model = model, .n_threads = 2, .neighbours = true}},
  };
  for (const Variant& v : variants) {
    const std::vector<float> got = run(v.setup);
    EXPECT_TRUE(same_bits(alone, got)) << v.name;
  }
}

TEST(BatchInvariance, LogitsAreTheSameBitsWhateverRunsBeside) { expect_invariant(""); }

// A mixture of experts groups a step's tokens by expert (model/moe_block.cc): whatever else
// is in the step, each token's experts and the order their outputs are summed in are its own.
TEST(BatchInvariance, MixtureOfExpertsLogitsAreTheSameBitsWhateverRunsBeside) {
  expect_invariant(std::string(LUMEN_TEST_DATA_DIR) + "/arch/qwen2moe-shared-expert/model.gguf");
}

// A small step runs its MoE experts' matrices as two parallel jobs and its MLA heads one per
// thread; a big one runs the experts and heads one by one, each split over the threads
// (model/blocks.h: kMoeBatchedPairs, kMlaHeadJobTokens). A prompt of 130+ tokens prefilled
// in one step (the big paths: 130 tokens x 2 experts > 128 pairs, > 32 tokens) and in
// steps of 5 tokens (the small ones, like decode) gives the same bits, on 2 threads.
// MLA is checked in each of its forms alone (absorbed; expanded, decode too: keys expanded
// and attended in chunks at absolute positions); the default mixes them by step size
// (mla_expand_tokens), and a token's bits then depend on which form its step ran.
TEST(BatchInvariance, SmallAndLargeStepsOfMoeAndMlaGiveTheSameBits) {
  struct Case {
    const char* name;
    int32_t mla_expand_tokens;
  };
  for (const Case& c : {Case{"qwen2moe-shared-expert", 0}, Case{"deepseek2-mla", -1}, Case{"deepseek2-mla", 1}}) {
    SCOPED_TRACE(std::string(c.name) + " mla_expand_tokens " + std::to_string(c.mla_expand_tokens));
    const std::string model = std::string(LUMEN_TEST_DATA_DIR) + "/arch/" + c.name + "/model.gguf";
    const RunSetup big{.model = model, .n_threads = 2, .max_batch_tokens = 256, .prompt_repeats = 6,
                       .min_prompt_tokens = 130, .mla_expand_tokens = c.mla_expand_tokens};
    RunSetup small = big;
    small.max_batch_tokens = 5;
    const std::vector<float> a = run(big), b = run(small);
    ASSERT_FALSE(a.empty());
    EXPECT_TRUE(same_bits(a, b));
  }
}

}  // namespace
}  // namespace lumen::engine
