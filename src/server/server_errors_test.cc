// Bad requests get OpenAI-style errors naming the field; authentication, body size, the
// queue bound and the loading state get their own status codes.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "server/server_test_util.h"

namespace lumen::server::testing {
namespace {

struct BadCase {
  const char* path;
  std::string body;
  const char* param;  // "" -> null
};

std::vector<BadCase> bad_cases() {
  const std::string c = "/v1/completions", ch = "/v1/chat/completions";
  std::string long_prompt;
  for (int i = 0; i < 400; ++i) long_prompt += "word ";
  std::string long_ids = "[";
  for (int i = 0; i < 300; ++i) long_ids += (i ? ",1" : "1");
  long_ids += "]";
  std::string many_stops = "[";
  for (int i = 0; i < 17; ++i) many_stops += std::string(i ? "," : "") + "\"s" + std::to_string(i) + "\"";
  many_stops += "]";
  const std::string user = R"("messages": [{"role": "user", "content": "hi"}])";
  return {
      {"/v1/completions", "{", ""},
      {"/v1/completions", "[]", ""},
      {"/v1/completions", R"("just a string")", ""},
      {"/v1/completions", "{}", "prompt"},
      {"/v1/completions", R"({"prompt": 5})", "prompt"},
      {"/v1/completions", R"({"prompt": []})", "prompt"},
      {"/v1/completions", R"({"prompt": ["a", "b"]})", "prompt"},
      {"/v1/completions", R"({"prompt": [1, -1]})", "prompt[1]"},
      {"/v1/completions", R"({"prompt": [1, 99999999]})", "prompt[1]"},
      {"/v1/completions", R"({"prompt": [1, "a"]})", "prompt[1]"},
      {"/v1/completions", R"({"prompt": ")" + long_prompt + R"("})", "prompt"},
      {"/v1/completions", R"({"prompt": )" + long_ids + "}", "prompt"},
      {"/v1/completions", R"({"prompt": "x", "max_tokens": "10"})", "max_tokens"},
      {"/v1/completions", R"({"prompt": "x", "max_tokens": 0})", "max_tokens"},
      {"/v1/completions", R"({"prompt": "x", "max_tokens": 10.5})", "max_tokens"},
      {"/v1/completions", R"({"prompt": "x", "max_tokens": 100000})", "max_tokens"},
      {"/v1/completions", R"({"prompt": "x", "max_tokens": 1e300})", "max_tokens"},
      {"/v1/completions", R"({"prompt": ")" + long_prompt.substr(0, 250) + R"(", "max_tokens": 250})", "max_tokens"},
      {"/v1/completions", R"({"prompt": "x", "temperature": -1})", "temperature"},
      {"/v1/completions", R"({"prompt": "x", "temperature": "hot"})", "temperature"},
      {"/v1/completions", R"({"prompt": "x", "top_p": 0})", "top_p"},
      {"/v1/completions", R"({"prompt": "x", "top_p": 1.5})", "top_p"},
      {"/v1/completions", R"({"prompt": "x", "top_k": -2})", "top_k"},
      {"/v1/completions", R"({"prompt": "x", "min_p": 2})", "min_p"},
      {"/v1/completions", R"({"prompt": "x", "presence_penalty": 3})", "presence_penalty"},
      {"/v1/completions", R"({"prompt": "x", "frequency_penalty": [1]})", "frequency_penalty"},
      {"/v1/completions", R"({"prompt": "x", "repetition_penalty": 0})", "repetition_penalty"},
      {"/v1/completions", R"({"prompt": "x", "seed": 1.5})", "seed"},
      {"/v1/completions", R"({"prompt": "x", "seed": "1"})", "seed"},
      {"/v1/completions", R"({"prompt": "x", "n": 0})", "n"},
      {"/v1/completions", R"({"prompt": "x", "n": 99})", "n"},
      {"/v1/completions", R"({"prompt": "x", "stop": 5})", "stop"},
      {"/v1/completions", R"({"prompt": "x", "stop": [""]})", "stop[0]"},
      {"/v1/completions", R"({"prompt": "x", "stop": ["ok", 3]})", "stop[1]"},
      {"/v1/completions", R"({"prompt": "x", "stop": ")" + std::string(300, 'a') + R"("})", "stop"},
      {"/v1/completions", R"({"prompt": "x", "stop": )" + many_stops + "}", "stop"},
      {"/v1/completions", R"({"prompt": "x", "logprobs": 21})", "logprobs"},
      {"/v1/completions", R"({"prompt": "x", "logprobs": true})", "logprobs"},
      {"/v1/completions", R"({"prompt": "x", "stream": "yes"})", "stream"},
      {"/v1/completions", R"({"prompt": "x", "stream_options": {"include_usage": true}})", "stream_options"},
      {"/v1/completions", R"({"prompt": "x", "stream": true, "stream_options": {"include_usage": 1}})",
       "stream_options.include_usage"},
      {"/v1/completions", R"({"prompt": "x", "echo": true})", "echo"},
      {"/v1/completions", R"({"prompt": "x", "best_of": 2})", "best_of"},
      {"/v1/completions", R"({"prompt": "x", "logit_bias": {"1": 5}})", "logit_bias"},
      {"/v1/completions", R"({"prompt": "x", "suffix": "end"})", "suffix"},
      {"/v1/completions", R"({"prompt": "x", "priority": "high"})", "priority"},
      {"/v1/completions", R"({"prompt": "x", "cache_salt": 5})", "cache_salt"},
      {"/v1/completions", R"({"prompt": "x", "cache_salt": ""})", "cache_salt"},
      {"/v1/completions", R"({"prompt": "x", "model": 3})", "model"},
      {"/v1/completions", R"({"prompt": "x", "ignore_eos": "no"})", "ignore_eos"},
      {"/v1/chat/completions", "{}", "messages"},
      {"/v1/chat/completions", R"({"messages": "hi"})", "messages"},
      {"/v1/chat/completions", R"({"messages": []})", "messages"},
      {"/v1/chat/completions", R"({"messages": [5]})", "messages[0]"},
      {"/v1/chat/completions", R"({"messages": [{"role": "bot", "content": "x"}]})", "messages[0].role"},
      {"/v1/chat/completions", R"({"messages": [{"content": "x"}]})", "messages[0].role"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user"}]})", "messages[0].content"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": 5}]})", "messages[0].content"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})",
       "messages[0].content[0].type"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": ")" + long_prompt + R"("}]})",
       "messages"},
      {"/v1/chat/completions", "{" + user + R"(, "logprobs": 3})", "logprobs"},
      {"/v1/chat/completions", "{" + user + R"(, "top_logprobs": 2})", "top_logprobs"},
      {"/v1/chat/completions", "{" + user + R"(, "logprobs": true, "top_logprobs": 21})", "top_logprobs"},
      {"/v1/chat/completions", "{" + user + R"(, "max_tokens": 5, "max_completion_tokens": 6})",
       "max_completion_tokens"},
      {"/v1/chat/completions", "{" + user + R"(, "tools": [{"type": "function"}]})", "tools[0].function"},
      {"/v1/chat/completions", "{" + user + R"(, "response_format": {"type": "json_object", "schema": 5}})",
       "response_format.schema"},
      {"/tokenize", R"({"content": 5})", "content"},
      {"/tokenize", R"({})", "content"},
      {"/detokenize", R"({"tokens": [1, -5]})", "tokens[1]"},
      {"/detokenize", R"({"tokens": "abc"})", "tokens"},
  };
}

class ServerErrors : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { server_ = TestServer::start().release(); }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  void SetUp() override { ASSERT_NE(server_, nullptr); }
  static TestServer* server_;
};
TestServer* ServerErrors::server_ = nullptr;

TEST_F(ServerErrors, MalformedRequestsGet400NamingTheField) {
  for (const BadCase& c : bad_cases()) {
    HttpReply r = post(*server_, c.path, c.body);
    SCOPED_TRACE(std::string(c.path) + " " + c.body.substr(0, 120));
    EXPECT_EQ(r.status, 400) << r.body;
    const Json j = r.json();
    ASSERT_TRUE(j.is_object() && j.contains("error")) << r.body;
    const Json& e = j["error"];
    EXPECT_EQ(e["type"], "invalid_request_error");
    EXPECT_FALSE(e["message"].get<std::string>().empty());
    EXPECT_TRUE(e.contains("code"));
    if (*c.param) {
      EXPECT_EQ(e["param"], std::string(c.param)) << e["message"];
    } else {
      EXPECT_TRUE(e["param"].is_null()) << e["param"];
    }
  }
  // Every bad request left nothing behind.
  EXPECT_TRUE(wait_until([&] { return metric(*server_, "lumen_kv_blocks_used") == 0; }));
  EXPECT_EQ(get(*server_, "/health").status, 200);
}

TEST_F(ServerErrors, UnknownFieldsAreIgnored) {
  HttpReply r = post(*server_, "/v1/completions",
                     R"({"prompt": "x", "max_tokens": 2, "some_vendor_extension": {"a": [1, 2]}, "user": "u1"})");
  EXPECT_EQ(r.status, 200) << r.body;
}

TEST_F(ServerErrors, BodyOverTheLimitGets413) {
  const std::string body = R"({"prompt": ")" + std::string(5 << 20, 'a') + R"("})";
  HttpReply r = post(*server_, "/v1/completions", body);
  EXPECT_EQ(r.status, 413);
  EXPECT_EQ(get(*server_, "/health").status, 200);
}

TEST(ServerAuth, ApiKeyGuardsEveryRouteButHealth) {
  TestServerOptions o;
  o.server.api_key = "sesame";
  auto s = TestServer::start(o);
  ASSERT_TRUE(s);
  EXPECT_EQ(get(*s, "/health").status, 200);
  for (const char* path : {"/v1/models", "/metrics"}) {
    HttpReply r = get(*s, path);
    EXPECT_EQ(r.status, 401) << path;
    EXPECT_EQ(r.json()["error"]["code"], "invalid_api_key");
    EXPECT_EQ(get(*s, path, "wrong").status, 401);
    EXPECT_EQ(get(*s, path, "sesame").status, 200);
  }
  const std::string body = R"({"prompt": "x", "max_tokens": 2})";
  EXPECT_EQ(post(*s, "/v1/completions", body).status, 401);
  EXPECT_EQ(post(*s, "/v1/completions", body, "sesam").status, 401);
  EXPECT_EQ(post(*s, "/v1/completions", body, "sesame").status, 200);
  EXPECT_EQ(post_stream(*s, "/v1/completions", R"({"prompt": "x", "max_tokens": 2, "stream": true})").status, 401);
  EXPECT_EQ(post(*s, "/tokenize", R"({"content": "x"})").status, 401);
}

TEST(ServerLoading, HealthSays503UntilTheModelIsAttached) {
  TestServerOptions o;
  o.attach = false;
  auto s = TestServer::start(o);
  ASSERT_TRUE(s);
  HttpReply h = get(*s, "/health");
  EXPECT_EQ(h.status, 503);
  EXPECT_EQ(h.json()["status"], "loading");
  EXPECT_FALSE(h.headers.find("Retry-After") == h.headers.end());
  EXPECT_EQ(post(*s, "/v1/completions", R"({"prompt": "x"})").status, 503);
  EXPECT_EQ(get(*s, "/v1/models").status, 503);
  EXPECT_EQ(metric(*s, "lumen_model_loaded"), 0);
  s->server->attach_engine(TestServer::load(o));
  EXPECT_EQ(get(*s, "/health").status, 200);
  EXPECT_EQ(metric(*s, "lumen_model_loaded"), 1);
  EXPECT_EQ(post(*s, "/v1/completions", R"({"prompt": "x", "max_tokens": 2})").status, 200);
}

// One sequence runs, one request may wait; the rest are turned away with 503 + Retry-After
// and every accepted request still completes.
TEST(ServerQueue, FullQueueGets503) {
  TestServerOptions o;
  o.max_seqs = 1;
  o.max_queue = 1;
  auto s = TestServer::start(o);
  ASSERT_TRUE(s);
  const std::string body = R"({"prompt": "Once upon a time", "max_tokens": 200, "temperature": 0, "ignore_eos": true})";
  constexpr int kClients = 10;
  std::vector<HttpReply> replies(kClients);
  std::vector<std::thread> threads;
  for (int i = 0; i < kClients; ++i)
    threads.emplace_back([&, i] { replies[i] = post(*s, "/v1/completions", body); });
  for (auto& t : threads) t.join();
  int n_ok = 0, n_busy = 0;
  for (const HttpReply& r : replies) {
    if (r.status == 200) {
      ++n_ok;
      EXPECT_EQ(r.json()["usage"]["completion_tokens"], 200);
    } else {
      EXPECT_EQ(r.status, 503) << r.body;
      EXPECT_FALSE(r.headers.find("Retry-After") == r.headers.end());
      EXPECT_TRUE(r.json()["error"]["message"].is_string());
      ++n_busy;
    }
  }
  EXPECT_GE(n_ok, 1);
  EXPECT_GE(n_busy, 1);
  EXPECT_TRUE(wait_until([&] { return metric(*s, "lumen_kv_blocks_used") == 0; }));
  EXPECT_EQ(metric(*s, "lumen_requests_total{outcome=\"rejected\"}"), n_busy);
}

}  // namespace
}  // namespace lumen::server::testing
