// The server under concurrency: outputs identical to the same requests run alone
// (greedy; batch invariance always holds), and a soak of 200 mixed requests (valid, cancelled
// mid-stream, invalid, over the context) at concurrency 16, on a dense model and on an MLA +
// mixture-of-experts one.
#include <gtest/gtest.h>

#include <atomic>
#include <ostream>
#include <mutex>
#include <random>
#include <thread>

#include "server/server_test_util.h"

namespace lumen::server::testing {
namespace {

void run_parallel(int n_threads, int n_items, const std::function<void(int)>& fn) {
  std::atomic<int> next{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < n_threads; ++t)
    threads.emplace_back([&] {
      for (int i; (i = next.fetch_add(1)) < n_items;) fn(i);
    });
  for (auto& t : threads) t.join();
}

// Greedy requests give the same tokens whether they run alone or batched with others,
// and whether their prefix came from the cache (batch invariance always holds).
TEST(ServerConcurrency, OutputsEqualSoloRuns) {
  TestServerOptions o;
  o.max_seqs = 4;
  o.max_batch_tokens = 32;  // prompts are prefilled in chunks next to other requests' decodes
  auto s = TestServer::start(o);
  ASSERT_TRUE(s);
  const std::vector<std::string> prompts = {
      "Once upon a time",
      "Lily and Tom went to the park. They saw a big dog and",
      "The little bird was sad because",
      "One day, a boy named Tim found a shiny red ball in the garden. He",
      "Once upon a time, there was a little girl named Lily. She loved to play outside in the sun.",
      "The cat sat on the mat and",
      "Once upon a time, there was a big bear",  // shares a prefix with the first and fifth
      "Sam had a toy car. He",
  };
  auto body = [&](size_t i, bool stream) {
    Json j = {{"prompt", prompts[i]}, {"max_tokens", 32}, {"temperature", 0}, {"ignore_eos", true}};
    if (stream) j["stream"] = true;
    return j.dump();
  };
  std::vector<std::string> solo(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    HttpReply r = post(*s, "/v1/completions", body(i, false));
    ASSERT_EQ(r.status, 200) << r.body;
    solo[i] = r.json()["choices"][0]["text"].get<std::string>();
  }
  for (int round = 0; round < 2; ++round) {
    std::vector<std::string> together(prompts.size());
    run_parallel(static_cast<int>(prompts.size()), static_cast<int>(prompts.size()), [&](int i) {
      if ((i + round) % 2) {
        SseReply r = post_stream(*s, "/v1/completions", body(i, true));
        if (r.status == 200 && r.done) together[i] = r.text();
      } else {
        HttpReply r = post(*s, "/v1/completions", body(i, false));
        if (r.status == 200) together[i] = r.json()["choices"][0]["text"].get<std::string>();
      }
    });
    for (size_t i = 0; i < prompts.size(); ++i)
      EXPECT_EQ(together[i], solo[i]) << "round " << round << ", prompt " << i << ": " << prompts[i];
  }
}

// The soak's models: the dense TinyStories, and DeepSeek-2 (tests/data/arch/deepseek2-mla:
// multi-head latent attention, whose cache holds one latent row per token and no V, and
// routed + shared experts after a dense first layer) in a KV pool of 24 blocks, where 8
// running sequences of up to 200 tokens outgrow it and preempt each other (how often
// depends on the machine's speed, so the test does not count on it).
struct SoakModel {
  const char* name;
  std::string path;
  int32_t kv_blocks = 0;  // TestServerOptions::kv_blocks
};

std::vector<SoakModel> soak_models() {
  return {{"tinystories656k", tiny_model_path()}, {"deepseek2_mla_moe", arch_model_path("deepseek2-mla"), 24}};
}

void PrintTo(const SoakModel& m, std::ostream* os) { *os << m.name; }

class ServerSoak : public ::testing::TestWithParam<SoakModel> {};

// 200 mixed requests at concurrency 16: the server stays up, every valid request completes,
// the KV blocks all come back when it is idle, and the prefix cache still hits after it.
TEST_P(ServerSoak, MixedRequestsAtConcurrency16) {
  TestServerOptions o;
  o.model_path = GetParam().path;
  o.kv_blocks = GetParam().kv_blocks;
  o.max_seqs = 8;
  o.max_queue = 256;  // no request is turned away: each valid one must complete
  o.server.n_http_threads = 40;
  auto s = TestServer::start(o);
  ASSERT_TRUE(s);
  constexpr int kRequests = 200;
  std::string over_context;
  for (int i = 0; i < 300; ++i) over_context += "word ";
  // Half the prompts start with the same few blocks: prefix-cache hits, and shared blocks
  // released by cancellation and preemption while others still hold them.
  const std::string shared_prefix =
      "Once upon a time, in a small house near the woods, there lived a little girl named Lily who loved to "
      "play with her dog Max every day.";
  const std::vector<std::string> invalid = {
      "{", R"({"prompt": 5})", R"({"prompt": "x", "max_tokens": -3})", R"({"prompt": "x", "n": 100})",
      R"({"messages": [{"role": "wizard", "content": "x"}]})", "\xff\xfe", R"({"prompt": "x", "stop": [[]]})"};
  std::mutex mu;  // guards the counters below
  int n_valid = 0, n_valid_ok = 0, n_rejected_ok = 0, n_cancel_sent = 0;
  std::vector<std::string> failures;
  auto fail = [&](int i, const std::string& what) {
    std::lock_guard<std::mutex> lock(mu);
    failures.push_back("request " + std::to_string(i) + ": " + what.substr(0, 300));
  };
  run_parallel(16, kRequests, [&](int i) {
    std::mt19937 rng(static_cast<uint32_t>(i) * 7919u + 1);
    const int max_tokens = 4 + static_cast<int>(rng() % 60);
    Json req = {{"max_tokens", max_tokens}, {"temperature", (rng() % 2) ? 0.0 : 0.8}, {"seed", i}};
    const int kind = i % 10;
    if (kind == 4 || kind == 5) req["messages"] = {{{"role", "user"}, {"content", "Tell me a story number " + std::to_string(i)}}};
    else req["prompt"] = (i % 2 ? shared_prefix : "") + " Once upon a time, story " + std::to_string(i) + ",";
    const std::string path = req.contains("messages") ? "/v1/chat/completions" : "/v1/completions";
    switch (kind) {
      case 0: case 1: case 4: {  // streamed
        req["stream"] = true;
        req["stream_options"] = {{"include_usage", true}};
        SseReply r = post_stream(*s, path, req.dump());
        {
          std::lock_guard<std::mutex> lock(mu);
          ++n_valid;
        }
        if (r.status != 200 || !r.done) return fail(i, "stream status " + std::to_string(r.status) + " " + r.raw);
        const Json& usage = r.events.back()["usage"];
        if (!usage.is_object() || usage["completion_tokens"].get<int>() < 1)
          return fail(i, "no usage chunk: " + r.raw);
        std::lock_guard<std::mutex> lock(mu);
        ++n_valid_ok;
        return;
      }
      case 2: case 3: case 5: case 9: {  // whole responses; some with n = 2, logprobs, stop strings
        if (kind == 5) req["n"] = 2;
        if (kind == 9) {
          req["logprobs"] = 2;
          req["stop"] = Json::array({"the", "."});
        }
        HttpReply r = post(*s, path, req.dump());
        {
          std::lock_guard<std::mutex> lock(mu);
          ++n_valid;
        }
        if (r.status != 200) return fail(i, "status " + std::to_string(r.status) + " " + r.body);
        const Json j = r.json();
        for (const Json& c : j["choices"]) {
          const std::string fr = c["finish_reason"].is_string() ? c["finish_reason"].get<std::string>() : "";
          if (fr != "stop" && fr != "length") return fail(i, "finish_reason " + fr);
        }
        std::lock_guard<std::mutex> lock(mu);
        ++n_valid_ok;
        return;
      }
      case 6: {  // the client hangs up mid-stream
        req["stream"] = true;
        req["max_tokens"] = 200;
        req["ignore_eos"] = true;
        post_stream(*s, path, req.dump(), 1 + static_cast<int>(rng() % 4));
        std::lock_guard<std::mutex> lock(mu);
        ++n_cancel_sent;
        return;
      }
      case 7: {  // invalid
        HttpReply r = post(*s, "/v1/completions", invalid[(i / 10) % invalid.size()]);
        if (r.status != 400) return fail(i, "invalid request got " + std::to_string(r.status));
        std::lock_guard<std::mutex> lock(mu);
        ++n_rejected_ok;
        return;
      }
      default: {  // over the context
        req["prompt"] = over_context;
        HttpReply r = post(*s, "/v1/completions", req.dump());
        if (r.status != 400 || r.json()["error"]["param"] != "prompt")
          return fail(i, "over-context request got " + std::to_string(r.status) + " " + r.body);
        std::lock_guard<std::mutex> lock(mu);
        ++n_rejected_ok;
        return;
      }
    }
  });
  for (const std::string& f : failures) ADD_FAILURE() << f;
  EXPECT_EQ(n_valid_ok, n_valid);
  EXPECT_EQ(n_valid + n_rejected_ok + n_cancel_sent, kRequests);
  EXPECT_EQ(get(*s, "/health").status, 200);
  EXPECT_TRUE(wait_until([&] {
    return metric(*s, "lumen_kv_blocks_used") == 0 && metric(*s, "lumen_num_requests_running") == 0 &&
           metric(*s, "lumen_num_requests_waiting") == 0;
  })) << "blocks in use when idle: " << metric(*s, "lumen_kv_blocks_used");
  // Finished, cancelled and rejected requests all add up.
  const double n_done = metric(*s, "lumen_requests_total{outcome=\"stop\"}") +
                        metric(*s, "lumen_requests_total{outcome=\"length\"}");
  EXPECT_EQ(n_done + metric(*s, "lumen_requests_total{outcome=\"cancelled\"}"), n_valid + n_cancel_sent);
  EXPECT_EQ(metric(*s, "lumen_requests_total{outcome=\"error\"}"), 0);
  // The server still serves, and its prefix cache still hits.
  const std::string again = R"({"prompt": ")" + shared_prefix + R"( The end.", "max_tokens": 3})";
  EXPECT_EQ(post(*s, "/v1/completions", again).status, 200);
  const HttpReply hit = post(*s, "/v1/completions", again);
  ASSERT_EQ(hit.status, 200) << hit.body;
  EXPECT_GE(hit.json()["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), 16) << hit.body;
  EXPECT_EQ(post(*s, "/v1/completions", R"({"prompt": "x", "max_tokens": 3})").status, 200);
}

INSTANTIATE_TEST_SUITE_P(Models, ServerSoak, ::testing::ValuesIn(soak_models()),
                         [](const ::testing::TestParamInfo<SoakModel>& i) { return std::string(i.param.name); });

}  // namespace
}  // namespace lumen::server::testing
