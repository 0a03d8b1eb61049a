// Mixture-of-experts and multi-head latent attention models through the server: prefix-cache
// hits and preemption by recompute give the greedy tokens of an uncached run alone.
//
// The models are the committed random-weight architecture cases (tests/data/arch, FORMAT.md
// there): MLA keeps one latent row per token and layer and no V (a K-only cache), and every
// MoE model routes each token to its own experts, so a cache or recompute path that assumed
// per-head K and V, or a dense FFN, would change the tokens here.
#include <gtest/gtest.h>

#include <mutex>
#include <thread>

#include "server/server_test_util.h"

namespace lumen::server::testing {
namespace {

// Each MoE / MLA case the engine runs (tests/data/arch/FORMAT.md says what each exercises).
const char* const kCases[] = {"deepseek2-mla", "deepseek2-lite-mla", "deepseek3-sigmoid-router", "qwen3moe",
                              "olmoe",         "mixtral",            "qwen2moe-shared-expert"};

std::string case_name(const ::testing::TestParamInfo<const char*>& i) {
  std::string s = i.param;
  for (char& c : s)
    if (c == '-') c = '_';
  return s;
}

// A greedy completion of `max_tokens` tokens whatever the model says (ignore_eos).
Json greedy_body(const std::string& prompt, int max_tokens, int n = 1) {
  return {{"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0}, {"ignore_eos", true}, {"n", n}};
}

struct Completion {
  int status = 0;
  std::vector<std::string> texts;  // one per choice, in index order
  int cached_tokens = -1;
  int prompt_tokens = -1;
  std::string body;  // for failure messages
  // status -1: a 200 whose choices did not all end by length with some text
};

Completion complete(const TestServer& s, const Json& body) {
  HttpReply r = post(s, "/v1/completions", body.dump());
  Completion c;
  c.status = r.status;
  c.body = r.body.substr(0, 400);
  if (r.status != 200) return c;
  const Json j = r.json();
  c.texts.resize(j["choices"].size());
  for (const Json& ch : j["choices"]) {
    const size_t index = ch["index"].get<size_t>();
    if (index >= c.texts.size() || ch["finish_reason"] != "length" || ch["text"].get<std::string>().empty()) {
      c.status = -1;  // every choice must run to max_tokens (ignore_eos) and say something
      return c;
    }
    c.texts[index] = ch["text"].get<std::string>();
  }
  c.cached_tokens = j["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>();
  c.prompt_tokens = j["usage"]["prompt_tokens"].get<int>();
  return c;
}

class ServerMoe : public ::testing::TestWithParam<const char*> {};

// A second request whose long prefix another request left in the cache reports the cached
// tokens (usage and lumen_prefix_cache_hits_total) and gives the tokens a server without a
// prefix cache gives.
TEST_P(ServerMoe, PrefixCacheHitGivesTheUncachedTokens) {
  const std::string prefix =
      "Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her "
      "friends. One day, she saw a big red ball under a tree and ran to get it.";
  const std::vector<std::string> prompts = {prefix + " Then", prefix + " Her mom said", prefix + " Then"};
  TestServerOptions o;
  o.model_path = arch_model_path(GetParam());
  o.enable_prefix_cache = false;
  auto uncached = TestServer::start(o);
  ASSERT_TRUE(uncached);
  o.enable_prefix_cache = true;
  auto cached = TestServer::start(o);
  ASSERT_TRUE(cached);
  for (size_t i = 0; i < prompts.size(); ++i) {
    const Completion want = complete(*uncached, greedy_body(prompts[i], 16));
    ASSERT_EQ(want.status, 200) << want.body;
    EXPECT_EQ(want.cached_tokens, 0) << "no prefix cache: " << want.body;
    const Completion got = complete(*cached, greedy_body(prompts[i], 16));
    ASSERT_EQ(got.status, 200) << got.body;
    ASSERT_GT(got.prompt_tokens, 48);
    if (i == 0) {
      EXPECT_EQ(got.cached_tokens, 0) << "the first request finds nothing";
    } else {
      // Whole 16-token blocks of the shared prefix (the last prompt token is always computed).
      EXPECT_GE(got.cached_tokens, 48) << "request " << i << ": " << got.body;
      EXPECT_LT(got.cached_tokens, got.prompt_tokens);
    }
    EXPECT_EQ(got.texts, want.texts) << "request " << i << " (cached_tokens " << got.cached_tokens << ")";
  }
  EXPECT_GE(metric(*cached, "lumen_prefix_cache_hits_total"), 96);
  EXPECT_EQ(metric(*uncached, "lumen_prefix_cache_hits_total"), 0);
}

// A KV pool of 10 blocks of 16 tokens, with up to 5 sequences of ~45 tokens running: the
// engine must preempt (drop a sequence's latent or K/V rows and recompute them later), and
// every request still ends with the tokens it gets alone. One request with n = 5 makes the
// preemption certain whatever the timing (its five greedy choices fork after the prompt and
// outgrow the pool together); four other prompts run beside it.
TEST_P(ServerMoe, PreemptedRequestsKeepTheirSoloTokens) {
  const std::vector<std::string> prompts = {"Once upon a time", "Tom had a red car.", "The sun was hot and",
                                            "Lily and her mom went", "A big fish swam"};
  constexpr int kTokens = 40;
  TestServerOptions o;
  o.model_path = arch_model_path(GetParam());
  o.n_ctx = 64;
  o.max_seqs = 1;
  auto solo = TestServer::start(o);
  ASSERT_TRUE(solo);
  std::vector<std::string> want;
  for (const std::string& p : prompts) {
    const Completion c = complete(*solo, greedy_body(p, kTokens));
    ASSERT_EQ(c.status, 200) << c.body;
    ASSERT_EQ(c.texts.size(), 1u);
    want.push_back(c.texts[0]);
  }
  o.max_seqs = 5;
  o.kv_blocks = 10;
  auto small = TestServer::start(o);
  ASSERT_TRUE(small);
  ASSERT_EQ(metric(*small, "lumen_kv_blocks_total"), 10);
  std::mutex mu;  // guards `got`
  std::vector<Completion> got(prompts.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < prompts.size(); ++i)
    threads.emplace_back([&, i] {
      Completion c = complete(*small, greedy_body(prompts[i], kTokens, i == 0 ? 5 : 1));
      std::lock_guard<std::mutex> lock(mu);
      got[i] = std::move(c);
    });
  for (std::thread& t : threads) t.join();
  for (size_t i = 0; i < prompts.size(); ++i) {
    ASSERT_EQ(got[i].status, 200) << prompts[i] << ": " << got[i].body;
    ASSERT_EQ(got[i].texts.size(), i == 0 ? 5u : 1u);
    for (size_t c = 0; c < got[i].texts.size(); ++c)
      EXPECT_EQ(got[i].texts[c], want[i]) << prompts[i] << ", choice " << c;
  }
  EXPECT_GT(metric(*small, "lumen_num_preemptions_total"), 0);
  EXPECT_EQ(metric(*small, "lumen_requests_total{outcome=\"error\"}"), 0);
  EXPECT_TRUE(wait_until([&] { return metric(*small, "lumen_kv_blocks_used") == 0; }))
      << "blocks in use when idle: " << metric(*small, "lumen_kv_blocks_used");
}

INSTANTIATE_TEST_SUITE_P(Arch, ServerMoe, ::testing::ValuesIn(kCases), case_name);

}  // namespace
}  // namespace lumen::server::testing
