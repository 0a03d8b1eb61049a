// End-to-end HTTP tests: a real server on an ephemeral port, the tiny shared models, and
// httplib clients. Greedy (temperature 0) wherever outputs are compared.
#include <gtest/gtest.h>

#include <atomic>
#include <set>

#include "server/server_test_util.h"

namespace lumen::server::testing {
namespace {

class ServerHttp : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { server_ = TestServer::start().release(); }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  void SetUp() override { ASSERT_NE(server_, nullptr); }
  const TestServer& s() const { return *server_; }
  static TestServer* server_;
};
TestServer* ServerHttp::server_ = nullptr;

std::string greedy_completion(int max_tokens, const std::string& prompt = "Once upon a time", bool stream = false) {
  Json j = {{"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0}, {"ignore_eos", true}};
  if (stream) j["stream"] = true;
  return j.dump();
}

TEST_F(ServerHttp, HealthModelsMetrics) {
  HttpReply h = get(s(), "/health");
  EXPECT_EQ(h.status, 200);
  EXPECT_EQ(h.json()["status"], "ok");
  HttpReply m = get(s(), "/v1/models");
  ASSERT_EQ(m.status, 200);
  const Json models = m.json();
  ASSERT_EQ(models["data"].size(), 1u);
  EXPECT_FALSE(models["data"][0]["id"].get<std::string>().empty());
  EXPECT_EQ(models["data"][0]["max_model_len"], 256);
  HttpReply metrics = get(s(), "/metrics");
  ASSERT_EQ(metrics.status, 200);
  for (const char* name : {"lumen_kv_blocks_used", "lumen_kv_blocks_total", "lumen_num_requests_running",
                           "lumen_num_requests_waiting", "lumen_time_to_first_token_seconds_bucket",
                           "lumen_inter_token_latency_seconds_count", "lumen_e2e_request_latency_seconds_sum",
                           "lumen_request_queue_time_seconds_count", "lumen_prompt_tokens_total",
                           "lumen_generation_tokens_total", "lumen_prefix_cache_hits_total",
                           "lumen_num_preemptions_total", "lumen_kv_cache_usage_perc",
                           "lumen_prefix_cache_queries_total", "lumen_kv_sequence_bytes{stat=\"max\"}",
                           "lumen_kv_group_bytes_per_token{group=\"0\",window=\"0\"}",
                           "lumen_kv_group_blocks_used{group=\"0\",window=\"0\"}"})
    EXPECT_NE(metrics.body.find(name), std::string::npos) << name;
  EXPECT_GT(metric(s(), "lumen_kv_blocks_total"), 0);
  EXPECT_EQ(get(s(), "/no/such/route").status, 404);
}

TEST_F(ServerHttp, CompletionWhole) {
  HttpReply r = post(s(), "/v1/completions", greedy_completion(16));
  ASSERT_EQ(r.status, 200) << r.body;
  const Json j = r.json();
  EXPECT_EQ(j["object"], "text_completion");
  ASSERT_EQ(j["choices"].size(), 1u);
  EXPECT_FALSE(j["choices"][0]["text"].get<std::string>().empty());
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_GT(j["usage"]["prompt_tokens"].get<int>(), 0);
  EXPECT_EQ(j["usage"]["completion_tokens"], 16);
  EXPECT_EQ(j["usage"]["total_tokens"], j["usage"]["prompt_tokens"].get<int>() + 16);
  EXPECT_TRUE(j["usage"]["prompt_tokens_details"].contains("cached_tokens"));
}

TEST_F(ServerHttp, StreamingEqualsWhole) {
  HttpReply whole = post(s(), "/v1/completions", greedy_completion(24));
  ASSERT_EQ(whole.status, 200);
  Json req = Json::parse(greedy_completion(24, "Once upon a time", true));
  req["stream_options"] = {{"include_usage", true}};
  SseReply st = post_stream(s(), "/v1/completions", req.dump());
  ASSERT_EQ(st.status, 200) << st.raw;
  EXPECT_TRUE(st.done);
  EXPECT_EQ(st.text(), whole.json()["choices"][0]["text"].get<std::string>());
  ASSERT_GE(st.events.size(), 2u);
  const Json& last = st.events.back();  // the usage chunk
  EXPECT_TRUE(last["choices"].empty());
  EXPECT_EQ(last["usage"]["completion_tokens"], 24);
  const Json& fin = st.events[st.events.size() - 2];
  EXPECT_EQ(fin["choices"][0]["finish_reason"], "length");
}

TEST_F(ServerHttp, ChatWholeAndStreaming) {
  Json req = {{"messages", {{{"role", "system"}, {"content", "You tell stories."}},
                            {{"role", "user"}, {"content", "Tell me about a cat."}}}},
              {"max_tokens", 12},
              {"temperature", 0},
              {"ignore_eos", true}};
  HttpReply whole = post(s(), "/v1/chat/completions", req.dump());
  ASSERT_EQ(whole.status, 200) << whole.body;
  const Json j = whole.json();
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
  const std::string text = j["choices"][0]["message"]["content"].get<std::string>();
  req["stream"] = true;
  SseReply st = post_stream(s(), "/v1/chat/completions", req.dump());
  ASSERT_EQ(st.status, 200);
  ASSERT_FALSE(st.events.empty());
  EXPECT_EQ(st.events[0]["object"], "chat.completion.chunk");
  EXPECT_EQ(st.events[0]["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(st.text(), text);
  EXPECT_TRUE(st.done);
}

TEST_F(ServerHttp, TokenIdPromptEqualsTextPrompt) {
  HttpReply t = post(s(), "/tokenize", R"({"content": "Once upon a time"})");
  ASSERT_EQ(t.status, 200) << t.body;
  const Json ids = t.json()["tokens"];
  ASSERT_FALSE(ids.empty());
  HttpReply by_text = post(s(), "/v1/completions", greedy_completion(10));
  Json req = Json::parse(greedy_completion(10));
  req["prompt"] = ids;
  HttpReply by_ids = post(s(), "/v1/completions", req.dump());
  ASSERT_EQ(by_ids.status, 200) << by_ids.body;
  EXPECT_EQ(by_ids.json()["choices"][0]["text"], by_text.json()["choices"][0]["text"]);
  HttpReply d = post(s(), "/detokenize", Json{{"tokens", ids}}.dump());
  ASSERT_EQ(d.status, 200);
  EXPECT_NE(d.json()["content"].get<std::string>().find("Once upon a time"), std::string::npos);
}

TEST_F(ServerHttp, StopString) {
  HttpReply base = post(s(), "/v1/completions", greedy_completion(40));
  ASSERT_EQ(base.status, 200);
  const std::string text = base.json()["choices"][0]["text"].get<std::string>();
  ASSERT_GT(text.size(), 20u);
  // A stop string from the middle of the greedy text: the output ends right before it.
  const std::string stop = text.substr(10, 4);
  const size_t cut = text.find(stop);
  for (bool stream : {false, true}) {
    Json req = Json::parse(greedy_completion(40, "Once upon a time", stream));
    req["stop"] = Json::array({stop, "zzzzzz"});
    if (!stream) {
      HttpReply r = post(s(), "/v1/completions", req.dump());
      ASSERT_EQ(r.status, 200);
      EXPECT_EQ(r.json()["choices"][0]["text"], text.substr(0, cut));
      EXPECT_EQ(r.json()["choices"][0]["finish_reason"], "stop");
    } else {
      SseReply r = post_stream(s(), "/v1/completions", req.dump());
      ASSERT_EQ(r.status, 200);
      EXPECT_EQ(r.text(), text.substr(0, cut));
      EXPECT_EQ(r.events.back()["choices"][0]["finish_reason"], "stop");
    }
  }
}

TEST_F(ServerHttp, ModelNameMustMatch) {
  Json req = Json::parse(greedy_completion(2));
  req["model"] = "no-such-model";
  HttpReply r = post(s(), "/v1/completions", req.dump());
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(r.json()["error"]["code"], "model_not_found");
  req["model"] = get(s(), "/v1/models").json()["data"][0]["id"];
  EXPECT_EQ(post(s(), "/v1/completions", req.dump()).status, 200);
}

// A repeated prompt reuses the cached KV blocks of its prefix (reported as cached tokens);
// a different cache_salt does not see them.
TEST_F(ServerHttp, PrefixCacheAndSalt) {
  const std::string prompt =
      "Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her "
      "friends. One day, she saw a big red ball under a tree. She ran to the ball and picked it up. It was "
      "shiny and new, and Lily was very happy.";
  Json req = {{"prompt", prompt}, {"max_tokens", 2}, {"temperature", 0}, {"cache_salt", "tenant-a"}};
  HttpReply first = post(s(), "/v1/completions", req.dump());
  ASSERT_EQ(first.status, 200) << first.body;
  ASSERT_GT(first.json()["usage"]["prompt_tokens"].get<int>(), 32);
  HttpReply again = post(s(), "/v1/completions", req.dump());
  ASSERT_EQ(again.status, 200);
  EXPECT_GE(again.json()["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), 16) << again.body;
  EXPECT_EQ(again.json()["choices"][0]["text"], first.json()["choices"][0]["text"]);
  req["cache_salt"] = "tenant-b";
  HttpReply other = post(s(), "/v1/completions", req.dump());
  ASSERT_EQ(other.status, 200);
  EXPECT_EQ(other.json()["usage"]["prompt_tokens_details"]["cached_tokens"], 0) << other.body;
  EXPECT_GT(metric(s(), "lumen_prefix_cache_hits_total"), 0);
}

TEST_F(ServerHttp, SeveralCompletions) {
  Json req = {{"prompt", "Once upon a time"}, {"max_tokens", 12}, {"temperature", 1.0}, {"seed", 7},
              {"n", 3},          {"ignore_eos", true}};
  HttpReply r = post(s(), "/v1/completions", req.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  const Json j = r.json();
  ASSERT_EQ(j["choices"].size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(j["choices"][i]["index"], i);
    EXPECT_FALSE(j["choices"][i]["text"].get<std::string>().empty());
    EXPECT_EQ(j["choices"][i]["finish_reason"], "length");
  }
  EXPECT_EQ(j["usage"]["completion_tokens"], 36);
  // The same seed gives the same three completions, streamed or not.
  req["stream"] = true;
  SseReply st = post_stream(s(), "/v1/completions", req.dump());
  ASSERT_EQ(st.status, 200);
  EXPECT_TRUE(st.done);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(st.text(i), j["choices"][i]["text"].get<std::string>()) << i;
  // Chat streams open every choice with its role.
  Json chat = {{"messages", {{{"role", "user"}, {"content", "Hi"}}}}, {"max_tokens", 6}, {"n", 2}, {"stream", true},
               {"ignore_eos", true}};
  SseReply cs = post_stream(s(), "/v1/chat/completions", chat.dump());
  ASSERT_EQ(cs.status, 200);
  std::set<int> roles;
  for (const Json& e : cs.events)
    for (const Json& c : e["choices"])
      if (c["delta"].contains("role")) roles.insert(c["index"].get<int>());
  EXPECT_EQ(roles, (std::set<int>{0, 1}));
}

TEST_F(ServerHttp, CompletionLogprobs) {
  Json req = Json::parse(greedy_completion(8));
  req["logprobs"] = 3;
  HttpReply r = post(s(), "/v1/completions", req.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  const Json c = r.json()["choices"][0];
  const Json& lp = c["logprobs"];
  ASSERT_TRUE(lp.is_object()) << r.body;
  ASSERT_EQ(lp["tokens"].size(), 8u);
  ASSERT_EQ(lp["token_logprobs"].size(), 8u);
  ASSERT_EQ(lp["top_logprobs"].size(), 8u);
  ASSERT_EQ(lp["text_offset"].size(), 8u);
  std::string joined;
  for (size_t i = 0; i < 8; ++i) {
    joined += lp["tokens"][i].get<std::string>();
    const double chosen = lp["token_logprobs"][i].get<double>();
    EXPECT_LE(chosen, 0.0);
    const Json& top = lp["top_logprobs"][i];
    EXPECT_GE(top.size(), 1u);
    EXPECT_LE(top.size(), 3u);
    double best = -1e30;
    for (const auto& [tok, v] : top.items()) best = std::max(best, v.get<double>());
    EXPECT_NEAR(chosen, best, 1e-4) << "greedy picks the most likely token";
  }
  EXPECT_EQ(joined, c["text"].get<std::string>());
  // Streamed: the same number of token entries, spread over the chunks.
  req["stream"] = true;
  SseReply st = post_stream(s(), "/v1/completions", req.dump());
  size_t n = 0;
  for (const Json& e : st.events)
    for (const Json& ch : e["choices"])
      if (ch["logprobs"].is_object()) n += ch["logprobs"]["tokens"].size();
  EXPECT_EQ(n, 8u);
}

TEST_F(ServerHttp, ChatLogprobs) {
  Json req = {{"messages", {{{"role", "user"}, {"content", "Hi"}}}}, {"max_tokens", 5}, {"temperature", 0},
              {"ignore_eos", true},  {"logprobs", true},  {"top_logprobs", 2}};
  HttpReply r = post(s(), "/v1/chat/completions", req.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  const Json content = r.json()["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 5u) << r.body;
  for (const Json& t : content) {
    EXPECT_TRUE(t["token"].is_string());
    EXPECT_LE(t["logprob"].get<double>(), 0.0);
    EXPECT_TRUE(t["bytes"].is_array());
    EXPECT_EQ(t["top_logprobs"].size(), 2u);
  }
  req.erase("top_logprobs");
  req["logprobs"] = false;
  EXPECT_TRUE(post(s(), "/v1/chat/completions", req.dump()).json()["choices"][0]["logprobs"].is_null());
}

}  // namespace
}  // namespace lumen::server::testing
