// lumen bench serve's load generator: URL policy, statistics, and a run against a live
// server; plus the Prometheus histogram format.
#include "server/load_generator.h"

#include <gtest/gtest.h>

#include <set>

#include "server/metrics.h"
#include "server/server_test_util.h"

namespace lumen::server {
namespace {

TEST(ServerBench, LoopbackUrlsOnly) {
  std::string host;
  int port = 0;
  EXPECT_TRUE(parse_loopback_url("http://127.0.0.1:8080", &host, &port).ok());
  EXPECT_EQ(host, "127.0.0.1");
  EXPECT_EQ(port, 8080);
  EXPECT_TRUE(parse_loopback_url("http://localhost:9/", &host, &port).ok());
  EXPECT_EQ(port, 9);
  EXPECT_TRUE(parse_loopback_url("http://[::1]:8081", &host, &port).ok());
  EXPECT_EQ(host, "::1");
  EXPECT_TRUE(parse_loopback_url("http://127.3.2.1", &host, &port).ok());
  EXPECT_EQ(port, 80);
  for (const char* bad : {"https://127.0.0.1:8080", "http://10.0.0.1:8080", "http://example.com", "127.0.0.1:8080",
                          "http://127.0.0.1:0", "http://127.0.0.1:99999", "http://127.0.0.1:80/v1/completions",
                          "http://127.0.0.1.evil.com:80", "http://[::1:80"})
    EXPECT_FALSE(parse_loopback_url(bad, &host, &port).ok()) << bad;
}

TEST(ServerBench, Percentiles) {
  std::vector<double> v;
  for (int i = 100; i >= 1; --i) v.push_back(i);
  const Percentiles p = percentiles(v);
  EXPECT_DOUBLE_EQ(p.p50, 50.5);
  EXPECT_NEAR(p.p90, 90.1, 1e-9);
  EXPECT_NEAR(p.p99, 99.01, 1e-9);
  EXPECT_DOUBLE_EQ(p.mean, 50.5);
  const Percentiles empty = percentiles({});
  EXPECT_EQ(empty.p50, 0);
}

// The cached-token ratio sums over the requests that completed, and is unknown (-1) if any
// of them did not report its usage.
TEST(ServerBench, CachedTokenRatio) {
  LoadResult r;
  r.wall_s = 1.0;
  auto sample = [](int n_prompt, int n_cached) {
    RequestSample s;
    s.ok = true;
    s.n_output = 1;
    s.n_prompt = n_prompt;
    s.n_cached = n_cached;
    return s;
  };
  r.samples = {sample(64, 0), sample(64, 48), sample(64, 48), sample(64, 48)};
  r.samples.push_back(RequestSample{});  // failed: not counted
  EXPECT_DOUBLE_EQ(summarize(r, Sla{}).cached_token_ratio, 144.0 / 256.0);
  r.samples.push_back(sample(-1, -1));
  EXPECT_EQ(summarize(r, Sla{}).cached_token_ratio, -1);
}

TEST(ServerBench, SummaryAndGoodput) {
  LoadResult r;
  r.wall_s = 2.0;
  auto sample = [](double ttft, double tpot, int n) {
    RequestSample s;
    s.ok = true;
    s.ttft_ms = ttft;
    s.tpot_ms = tpot;
    s.n_output = n;
    s.e2e_ms = ttft + tpot * (n - 1);
    s.itl_ms.assign(n - 1, tpot);
    return s;
  };
  r.samples = {sample(100, 10, 11), sample(3000, 10, 11), sample(100, 80, 11), sample(500, 20, 11)};
  r.samples.push_back(RequestSample{});  // failed
  const LoadSummary s = summarize(r, Sla{});
  EXPECT_EQ(s.n_ok, 4);
  EXPECT_EQ(s.n_failed, 1);
  EXPECT_DOUBLE_EQ(s.output_tok_s, 44 / 2.0);
  EXPECT_DOUBLE_EQ(s.req_s, 2.0);
  EXPECT_DOUBLE_EQ(s.goodput_req_s, 1.0);  // two of four meet TTFT <= 2 s and TPOT <= 50 ms
  const nlohmann::json j = nlohmann::json::parse(summary_json(s));
  std::set<std::string> keys;
  for (const auto& [k, v] : j.items()) keys.insert(k);
  EXPECT_EQ(keys, (std::set<std::string>{"output_tok_s", "req_s", "goodput_req_s", "n_ok", "n_failed",
                                         "cached_token_ratio", "ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"}));
  EXPECT_EQ(s.cached_token_ratio, -1) << "no sample reported usage";
  for (const char* k : {"ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"}) {
    std::set<std::string> pk;
    for (const auto& [name, v] : j[k].items()) pk.insert(name);
    EXPECT_EQ(pk, (std::set<std::string>{"p50", "p90", "p99", "mean"})) << k;
  }
}

TEST(ServerBench, RunsAgainstALiveServer) {
  testing::TestServerOptions o;
  o.server.api_key = "k";
  auto s = testing::TestServer::start(o);
  ASSERT_TRUE(s);
  LoadConfig c;
  c.port = s->port;
  c.api_key = "k";
  c.concurrency = 4;
  c.n_requests = 12;
  c.prompt_tokens = 16;
  c.shared_prefix_tokens = 32;
  c.max_tokens = 8;
  auto r = run_load(c);
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_TRUE(r->prompts_as_ids);
  EXPECT_FALSE(r->model.empty());
  ASSERT_EQ(r->samples.size(), 12u);
  for (const RequestSample& x : r->samples) {
    EXPECT_TRUE(x.ok) << x.error;
    EXPECT_EQ(x.n_output, 8);
    EXPECT_GT(x.ttft_ms, 0);
    EXPECT_GE(x.e2e_ms, x.ttft_ms);
  }
  const LoadSummary sum = summarize(*r, Sla{});
  EXPECT_EQ(sum.n_ok, 12);
  EXPECT_GT(sum.output_tok_s, 0);
  // Every prompt was 48 tokens: the engine saw 12 x 48 prompt tokens (some from the cache).
  EXPECT_EQ(s->server->engine()->metrics().prompt_tokens, 12u * 48u);
  // Text prompts work too; a wrong key fails every request, not the run.
  c.format = PromptFormat::kText;
  c.n_requests = 3;
  auto text = run_load(c);
  ASSERT_TRUE(text.ok()) << text.message();
  EXPECT_FALSE(text->prompts_as_ids);
  EXPECT_EQ(summarize(*text, Sla{}).n_ok, 3);
  c.api_key = "wrong";
  auto denied = run_load(c);
  ASSERT_TRUE(denied.ok());
  EXPECT_EQ(summarize(*denied, Sla{}).n_failed, 3);
  // Nobody listening: an error, not a hang.
  c.port = 1;
  EXPECT_FALSE(run_load(c).ok());
}

// Each prompt set has its own distinct parts behind the same shared prefix: a second run
// with another set finds only the prefix in the server's cache, one with the same set finds
// its whole prompts (bench serve gives each concurrency level its own set).
TEST(ServerBench, PromptSetsShareOnlyThePrefix) {
  auto s = testing::TestServer::start();
  ASSERT_TRUE(s);
  LoadConfig c;
  c.port = s->port;
  c.n_requests = 3;
  c.prompt_tokens = 40;
  c.shared_prefix_tokens = 32;  // two 16-token blocks; prompts of 72 tokens
  c.max_tokens = 2;
  auto cached_tokens = [&](uint32_t set) {
    c.prompt_set = set;
    auto r = run_load(c);
    EXPECT_TRUE(r.ok()) << r.message();
    std::vector<int32_t> n;
    for (const RequestSample& x : r.ok() ? r->samples : std::vector<RequestSample>{}) {
      EXPECT_TRUE(x.ok) << x.error;
      EXPECT_EQ(x.n_prompt, 72);
      n.push_back(x.n_cached);
    }
    return n;
  };
  ASSERT_EQ(cached_tokens(0).size(), 3u);  // fills the cache
  EXPECT_EQ(cached_tokens(1), (std::vector<int32_t>{32, 32, 32})) << "another set: the prefix only";
  EXPECT_EQ(cached_tokens(0), (std::vector<int32_t>{64, 64, 64})) << "the same set: whole blocks of each prompt";
}

TEST(ServerMetricsFormat, HistogramIsCumulative) {
  Histogram h({0.1, 1.0});
  h.observe(0.05);
  h.observe(0.5);
  h.observe(5.0);
  std::string out;
  h.render(&out, "x_seconds", "help text");
  EXPECT_NE(out.find("# TYPE x_seconds histogram\n"), std::string::npos);
  EXPECT_NE(out.find("x_seconds_bucket{le=\"0.1\"} 1\n"), std::string::npos) << out;
  EXPECT_NE(out.find("x_seconds_bucket{le=\"1\"} 2\n"), std::string::npos) << out;
  EXPECT_NE(out.find("x_seconds_bucket{le=\"+Inf\"} 3\n"), std::string::npos) << out;
  EXPECT_NE(out.find("x_seconds_sum 5.55\n"), std::string::npos) << out;
  EXPECT_NE(out.find("x_seconds_count 3\n"), std::string::npos) << out;
  ServerMetrics m;
  m.count_http(200);
  m.count_http(418);
  const std::string text = m.render(nullptr);
  EXPECT_NE(text.find("lumen_http_requests_total{code=\"200\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("lumen_http_requests_total{code=\"other\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("lumen_model_loaded 0\n"), std::string::npos);
}

}  // namespace
}  // namespace lumen::server
