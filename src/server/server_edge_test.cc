// The HTTP edge over real sockets: bad framing answered at once, chunked bodies, deadlines,
// connection limits, the Host / Origin allow-list, health and readiness, pipelining, a
// slow reader that must not hold anyone else up, output caps, routing keys and drain.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "base/timer.h"
#include "server/server_test_util.h"

namespace lumen::server::testing {
namespace {

std::unique_ptr<TestServer> start_with(const std::function<void(TestServerOptions&)>& tweak) {
  TestServerOptions o;
  tweak(o);
  return TestServer::start(o);
}

std::string head(const std::string& method, const std::string& path, const std::string& extra = "") {
  return method + " " + path + " HTTP/1.1\r\nHost: localhost\r\n" + extra + "\r\n";
}

class ServerEdge : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = start_with([](TestServerOptions& o) { o.server.replica_id = "replica-7"; }).release();
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  void SetUp() override { ASSERT_NE(server_, nullptr); }
  static TestServer* server_;
};
TestServer* ServerEdge::server_ = nullptr;

// A bad or oversized Content-Length is answered as soon as the head is in: no read timeout.
TEST_F(ServerEdge, BadContentLengthIsAnsweredAtOnce) {
  const std::vector<std::pair<std::string, int>> cases = {
      {"Content-Length: -1\r\n", 400},
      {"Content-Length: abc\r\n", 400},
      {"Content-Length: 18446744073709551617\r\n", 413},
      {"Content-Length: 5000000\r\n", 413},
      {"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n", 400},
      {"Content-Length: 5\r\nContent-Length: 7\r\n", 400},
      {"Transfer-Encoding: gzip, chunked\r\n", 501},
  };
  for (const auto& [extra, status] : cases) {
    SCOPED_TRACE(extra);
    RawConnection c(server_->port);
    ASSERT_TRUE(c.ok());
    const double t0 = now_ms();
    ASSERT_TRUE(c.send(head("POST", "/v1/completions", extra)));
    const std::string r = c.read_response(5);
    EXPECT_EQ(raw_status(r), status) << r;
    EXPECT_LT(now_ms() - t0, 1000);
    EXPECT_NE(r.find("Connection: close"), std::string::npos);
    EXPECT_NE(r.find("\"error\""), std::string::npos) << "an OpenAI-shaped error body";
  }
}

TEST_F(ServerEdge, ChunkedBodyAndExpectContinue) {
  RawConnection c(server_->port);
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE(c.send(head("POST", "/tokenize", "Transfer-Encoding: chunked\r\n") +
                     "6\r\n{\"cont\r\n" "C\r\nent\": \"Once\"\r\n" "1\r\n}\r\n" "0\r\n\r\n"));
  std::string r = c.read_response();
  ASSERT_EQ(raw_status(r), 200) << r;
  EXPECT_NE(r.find("\"tokens\""), std::string::npos);
  // Expect: 100-continue gets the interim response before the body is sent.
  const std::string body = R"({"content": "Once upon"})";
  ASSERT_TRUE(c.send(head("POST", "/tokenize", "Expect: 100-continue\r\nContent-Length: " + std::to_string(body.size()) + "\r\n")));
  EXPECT_EQ(c.read_for(2, "\r\n\r\n"), "HTTP/1.1 100 Continue\r\n\r\n");
  ASSERT_TRUE(c.send(body));
  r = c.read_response();
  EXPECT_EQ(raw_status(r), 200) << r;
}

TEST_F(ServerEdge, PipelinedRequestsAnswerInOrder) {
  RawConnection c(server_->port);
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE(c.send(head("GET", "/health/live") + head("GET", "/nope") + head("GET", "/readyz")));
  const std::string r = c.read_for(3, "\"status\":\"ok\"");
  const size_t a = r.find("\"alive\""), b = r.find("404 Not Found"), d = r.find("\"ok\"");
  ASSERT_NE(a, std::string::npos) << r;
  ASSERT_NE(b, std::string::npos) << r;
  ASSERT_NE(d, std::string::npos) << r;
  EXPECT_LT(a, b);
  EXPECT_LT(b, d);
}

TEST_F(ServerEdge, HealthLivenessReadinessAndReplicaId) {
  for (const char* path : {"/health", "/health/ready", "/readyz", "/health/live", "/livez"}) {
    HttpReply r = get(*server_, path);
    EXPECT_EQ(r.status, 200) << path;
    EXPECT_EQ(r.headers.find("X-Replica-Id")->second, "replica-7") << path;
  }
  EXPECT_EQ(get(*server_, "/livez").json()["status"], "alive");
  HttpReply bad = post(*server_, "/v1/completions", "{");
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(bad.headers.find("X-Replica-Id")->second, "replica-7") << "errors carry it too";
  HttpReply m = get(*server_, "/v1/completions");
  EXPECT_EQ(m.status, 405);
  EXPECT_EQ(m.headers.find("Allow")->second, "POST");
}

// Without an API key, a browser page on another origin (CSRF) or a rebound DNS name (the
// Host it resolved) is refused; loopback names and configured hosts are served.
TEST_F(ServerEdge, CrossOriginAndForeignHostAreRefusedWithoutKey) {
  auto status = [](const std::string& extra, const std::string& path = "/v1/models") {
    RawConnection c(server_->port);
    c.send("GET " + path + " HTTP/1.1\r\n" + extra + "\r\n");
    return raw_status(c.read_response());
  };
  EXPECT_EQ(status("Host: localhost:8080\r\n"), 200);
  EXPECT_EQ(status("Host: 127.0.0.1\r\n"), 200);
  EXPECT_EQ(status("Host: [::1]:80\r\n"), 200);
  EXPECT_EQ(status("Host: evil.example:8080\r\n"), 403);
  EXPECT_EQ(status("Host: localhost\r\nOrigin: https://evil.example\r\n"), 403);
  EXPECT_EQ(status("Host: localhost\r\nOrigin: null\r\n"), 403);
  EXPECT_EQ(status("Host: localhost\r\nOrigin: http://localhost:3000\r\n"), 200);
  EXPECT_EQ(status("Host: evil.example\r\n", "/health"), 200) << "probes send any Host";
  RawConnection c(server_->port);
  c.send("POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nOrigin: http://attacker.example\r\n"
         "Content-Type: text/plain\r\nContent-Length: 15\r\n\r\n{\"prompt\": \"x\"}");
  const std::string r = c.read_response();
  EXPECT_EQ(raw_status(r), 403);
  EXPECT_NE(r.find("origin_not_allowed"), std::string::npos) << r;
}

TEST(ServerEdgeConfig, AllowedHostsAndApiKey) {
  auto s = start_with([](TestServerOptions& o) { o.server.allowed_hosts = {"lumen.internal"}; });
  ASSERT_TRUE(s);
  auto status = [&](const std::string& extra) {
    RawConnection c(s->port);
    c.send("GET /v1/models HTTP/1.1\r\n" + extra + "\r\n");
    return raw_status(c.read_response());
  };
  EXPECT_EQ(status("Host: lumen.internal:9000\r\n"), 200);
  EXPECT_EQ(status("Host: LUMEN.INTERNAL\r\nOrigin: http://lumen.internal\r\n"), 200);
  EXPECT_EQ(status("Host: other.internal\r\n"), 403);
  auto keyed = start_with([](TestServerOptions& o) { o.server.api_key = "k"; });
  ASSERT_TRUE(keyed);
  RawConnection c(keyed->port);
  c.send("GET /v1/models HTTP/1.1\r\nHost: any.example\r\nOrigin: https://app.example\r\nAuthorization: Bearer k\r\n\r\n");
  EXPECT_EQ(raw_status(c.read_response()), 200) << "with a key, the key decides";
}

TEST(ServerEdgeConfig, RequestDeadlineAndIdleTimeout) {
  auto s = start_with([](TestServerOptions& o) {
    o.server.request_timeout_ms = 400;
    o.server.keep_alive_timeout_ms = 300;
  });
  ASSERT_TRUE(s);
  // A client trickling its head: a byte every 100 ms keeps no per-byte timer alive, the
  // request's deadline still ends it.
  RawConnection slow(s->port);
  ASSERT_TRUE(slow.ok());
  const double t0 = now_ms();
  const std::string text = "GET /health HTTP/1.1\r\nHost: localhost\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaa";
  std::string got;
  for (size_t i = 0; i < text.size() && !slow.closed(); ++i) {
    slow.send(text.substr(i, 1));
    got += slow.read_for(0.1);
  }
  got += slow.read_for(2);
  EXPECT_EQ(raw_status(got), 408) << got;
  EXPECT_TRUE(slow.closed());
  EXPECT_GT(now_ms() - t0, 350);
  EXPECT_LT(now_ms() - t0, 2000);
  // An idle keep-alive connection is closed after its timeout.
  RawConnection idle(s->port);
  idle.send(head("GET", "/health"));
  EXPECT_EQ(raw_status(idle.read_response()), 200);
  const double t1 = now_ms();
  idle.read_for(3);
  EXPECT_TRUE(idle.closed());
  EXPECT_LT(now_ms() - t1, 1500);
  EXPECT_GE(metric(*s, "lumen_http_timeouts_total{phase=\"request\"}"), 1);
}

TEST(ServerEdgeConfig, ConnectionLimits) {
  auto s = start_with([](TestServerOptions& o) {
    o.server.max_connections_per_client = 4;
    o.server.max_connections = 8;
  });
  ASSERT_TRUE(s);
  std::vector<std::unique_ptr<RawConnection>> from2;
  for (int i = 0; i < 4; ++i) {
    from2.push_back(std::make_unique<RawConnection>(s->port, "127.0.0.2"));
    ASSERT_TRUE(from2.back()->ok());
    from2.back()->send(head("GET", "/health"));
    ASSERT_EQ(raw_status(from2.back()->read_response()), 200);
  }
  RawConnection fifth(s->port, "127.0.0.2");
  EXPECT_EQ(raw_status(fifth.read_response()), 429) << "over the per-client limit";
  // Another address is served; at the total limit the longest-idle connection makes room.
  std::vector<std::unique_ptr<RawConnection>> from3;
  for (int i = 0; i < 4; ++i) {
    from3.push_back(std::make_unique<RawConnection>(s->port, "127.0.0.3"));
    from3.back()->send(head("GET", "/health"));
    ASSERT_EQ(raw_status(from3.back()->read_response()), 200);
  }
  RawConnection ninth(s->port, "127.0.0.4");
  ninth.send(head("GET", "/health"));
  EXPECT_EQ(raw_status(ninth.read_response()), 200);
  from2[0]->read_for(1);
  EXPECT_TRUE(from2[0]->closed()) << "the oldest idle connection was closed to make room";
  EXPECT_EQ(metric(*s, "lumen_http_connections_refused_total{reason=\"per_client\"}"), 1);
  EXPECT_GE(metric(*s, "lumen_http_connections_refused_total{reason=\"idle_evicted\"}"), 1);
}

// A client that stops reading its stream holds only its own worker: other streams and the
// health check go on, and the engine keeps stepping.
TEST_F(ServerEdge, SlowReaderHoldsUpNobodyElse) {
  RawConnection stuck(server_->port, "", /*rcvbuf_bytes=*/4096);
  ASSERT_TRUE(stuck.ok());
  const double prompt_tokens0 = metric(*server_, "lumen_prompt_tokens_total");
  const double generated0 = metric(*server_, "lumen_generation_tokens_total");
  stuck.send_post("/v1/completions",
                  R"({"prompt": "Once upon a time", "max_tokens": 200, "temperature": 0, "ignore_eos": true,
                      "stream": true, "logprobs": 20})");
  // Admission, read from a counter: the engine does not wait for the slow reader, so on a
  // fast machine the whole request can be generated between two polls of the running gauge.
  ASSERT_TRUE(wait_until([&] { return metric(*server_, "lumen_prompt_tokens_total") > prompt_tokens0; }, 5));
  const double t0 = now_ms();
  SseReply other = post_stream(*server_, "/v1/completions",
                               R"({"prompt": "Lily", "max_tokens": 32, "temperature": 0, "ignore_eos": true, "stream": true})");
  EXPECT_EQ(other.status, 200);
  EXPECT_TRUE(other.done);
  EXPECT_LT(now_ms() - t0, 5000);
  EXPECT_EQ(get(*server_, "/health").status, 200);
  // The engine went on stepping the stuck stream too: all 200 of its tokens are generated
  // while its reader reads nothing (on a fast machine before `other` even starts, so this is
  // a total, not an interleaving). A stalled engine would stop short until the hang-up.
  EXPECT_TRUE(wait_until([&] { return metric(*server_, "lumen_generation_tokens_total") >= generated0 + 200 + 32; }, 5))
      << metric(*server_, "lumen_generation_tokens_total") - generated0;
  stuck.hang_up();
  EXPECT_TRUE(wait_until([] { return metric(*server_, "lumen_num_requests_running") == 0; }, 5));
}

TEST_F(ServerEdge, TokenizeAndDetokenizeAreCapped) {
  // n_ctx 256: /tokenize takes max(64 KiB, 32 B per context token) of text.
  const std::string big = R"({"content": ")" + std::string(70 << 10, 'a') + R"("})";
  HttpReply t = post(*server_, "/tokenize", big);
  EXPECT_EQ(t.status, 400);
  EXPECT_EQ(t.json()["error"]["param"], "content") << t.body;
  std::string ids = "[";
  for (int i = 0; i < 16385; ++i) ids += i ? ",1" : "1";
  HttpReply d = post(*server_, "/detokenize", R"({"tokens": )" + ids + "]}");
  EXPECT_EQ(d.status, 400);
  EXPECT_EQ(d.json()["error"]["param"], "tokens") << d.body.substr(0, 200);
  EXPECT_EQ(post(*server_, "/tokenize", R"({"content": "fine"})").status, 200);
}

TEST_F(ServerEdge, RoutingKeys) {
  auto key_of = [](const std::string& body, const std::string& session = "") {
    auto c = server_->client();
    httplib::Headers h;
    if (!session.empty()) h.emplace("X-Session-Id", session);
    auto r = c->Post("/v1/routing_key", h, body, "application/json");
    return r && r->status == 200 ? Json::parse(r->body)["routing_key"].get<std::string>() : std::string("error");
  };
  const std::string shared = "Once upon a time, there was a little girl named Lily who loved to play in the park";
  const std::string a = key_of(Json{{"prompt", shared + " with her dog."}}.dump());
  const std::string b = key_of(Json{{"prompt", shared + " every single day of the week."}}.dump());
  EXPECT_EQ(a.rfind("prefix-", 0), 0u) << a;
  EXPECT_EQ(a, b) << "prompts sharing their first block share a key";
  EXPECT_NE(a, key_of(Json{{"prompt", "A completely different start of a story about a big brown bear"}}.dump()));
  EXPECT_EQ(key_of(Json{{"prompt", "x"}}.dump(), "alice"), key_of(Json{{"prompt", "y"}}.dump(), "alice"));
  EXPECT_EQ(key_of(Json{{"prompt", "x"}}.dump(), "alice").rfind("session-", 0), 0u);
  EXPECT_EQ(key_of(Json{{"prompt", "x"}, {"user", "u1"}}.dump()).rfind("user-", 0), 0u);
  EXPECT_EQ(key_of(Json{{"prompt", "x"}, {"cache_salt", "t"}}.dump()).rfind("salt-", 0), 0u);
  EXPECT_EQ(key_of(Json{{"messages", {{{"role", "user"}, {"content", "hi"}}}}}.dump()).rfind("prefix-", 0), 0u);
  // Every generation response echoes the key it was routed by.
  HttpReply r = post(*server_, "/v1/completions", Json{{"prompt", shared + " with her dog."}, {"max_tokens", 1}}.dump());
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.headers.find("X-Routing-Key")->second, a);
}

// Drain: readiness goes false at once, new work gets 503 + Retry-After, requests already
// running finish, then the listener closes.
TEST(ServerDrain, RunningStreamsFinishAndNewRequestsGet503) {
  TestServerOptions o;
  o.n_ctx = 4096;
  auto s = TestServer::start(o);
  ASSERT_TRUE(s);
  // Long enough that the streams still run while the checks below are made, on a fast
  // machine (the tiny model decodes ~15k tokens/s alone: 400 tokens were ~50 ms of margin) and
  // on a loaded one (seconds, inside the drain deadline).
  const std::string body = R"({"prompt": "Once upon a time", "max_tokens": 3000, "temperature": 0, "ignore_eos": true, "stream": true})";
  std::vector<SseReply> replies(4);
  std::vector<std::thread> clients;
  for (int i = 0; i < 4; ++i) clients.emplace_back([&, i] { replies[i] = post_stream(*s, "/v1/completions", body); });
  // All four must be inside the engine (running or queued) before the drain starts: a
  // client whose request has not reached the server yet would rightly get the drain's 503.
  ASSERT_TRUE(wait_until([&] {
    return metric(*s, "lumen_num_requests_running") >= 1 &&
           metric(*s, "lumen_num_requests_running") + metric(*s, "lumen_num_requests_waiting") >= 4;
  }, 10));
  // A keep-alive connection that is open when the drain starts.
  RawConnection kept(s->port);
  kept.send(head("GET", "/health"));
  ASSERT_EQ(raw_status(kept.read_response()), 200);
  std::atomic<bool> drained{false};
  std::thread drainer([&] { drained = s->server->drain(std::chrono::milliseconds(30000)); });
  ASSERT_TRUE(wait_until([&] { return s->server->draining(); }, 2));
  kept.read_for(1);
  EXPECT_TRUE(kept.closed()) << "idle keep-alive connections close when the drain starts";
  HttpReply ready = get(*s, "/health/ready");
  EXPECT_EQ(ready.status, 503);
  EXPECT_EQ(ready.json()["status"], "draining");
  EXPECT_EQ(get(*s, "/health/live").status, 200);
  HttpReply late = post(*s, "/v1/completions", R"({"prompt": "x", "max_tokens": 2})");
  EXPECT_EQ(late.status, 503);
  EXPECT_FALSE(late.headers.find("Retry-After") == late.headers.end());
  for (auto& t : clients) t.join();
  drainer.join();
  EXPECT_TRUE(drained);
  for (const SseReply& r : replies) {
    EXPECT_EQ(r.status, 200);
    EXPECT_TRUE(r.done);
    for (const Json& e : r.events) EXPECT_FALSE(e.contains("error")) << e.dump();
  }
  RawConnection after(s->port);
  EXPECT_FALSE(after.ok()) << "the listener is closed once the drain is over";
}

TEST(ServerDrain, PastTheDeadlineStreamsEndWithAnErrorAndDone) {
  TestServerOptions o;
  o.n_ctx = 16384;
  auto s = TestServer::start(o);
  ASSERT_TRUE(s);
  // Far more tokens than a drain of 1 s can see through, even on a quiet machine (2000 did
  // finish inside it at load 7).
  const std::string body = R"({"prompt": "Once upon a time", "max_tokens": 16000, "temperature": 0, "ignore_eos": true, "stream": true})";
  std::vector<SseReply> replies(2);
  std::vector<std::thread> clients;
  for (int i = 0; i < 2; ++i) clients.emplace_back([&, i] { replies[i] = post_stream(*s, "/v1/completions", body); });
  ASSERT_TRUE(wait_until([&] { return metric(*s, "lumen_num_requests_running") >= 2; }, 5));
  const double t0 = now_ms();
  EXPECT_FALSE(s->server->drain(std::chrono::milliseconds(1000)));
  const double took = now_ms() - t0;
  for (auto& t : clients) t.join();
  EXPECT_LT(took, 1500);
  for (const SseReply& r : replies) {
    EXPECT_TRUE(r.done) << r.raw.substr(r.raw.size() > 300 ? r.raw.size() - 300 : 0);
    ASSERT_FALSE(r.events.empty());
    EXPECT_TRUE(r.events.back().contains("error")) << r.events.back().dump();
  }
}

}  // namespace
}  // namespace lumen::server::testing
