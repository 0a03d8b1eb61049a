// Property test of n > 1 through the real HTTP server on loopback (issue 12, acceptance 8):
// n in 1..8 x max_tokens in 1..4 x stop strings x streaming on and off, sent by four clients
// at once so that requests share steps. For every request, every choice ends with exactly
// one finish_reason, and usage.completion_tokens equals the tokens the choices returned
// (counted from their logprobs, one entry per generated token, stop-string tokens included).
//
// The case it guards: a choice that ends on its first token (max_tokens 1, a stop string,
// EOS) while its siblings are forked from it — choice 0's own event used to come after the
// request's final event, and was lost.
#include <atomic>
#include <mutex>
#include <thread>

#include "server/server_test_util.h"

namespace lumen::server::testing {
namespace {

struct Case {
  int n = 1;
  int max_tokens = 1;
  Json stop;  // null: none
  bool stream = false;
  double temperature = 0;
  std::string describe() const {
    return "n=" + std::to_string(n) + " max_tokens=" + std::to_string(max_tokens) + " stop=" + stop.dump() +
           " stream=" + std::to_string(stream) + " temperature=" + std::to_string(temperature);
  }
};

// Tokens a completions logprobs object lists.
size_t n_logprob_tokens(const Json& logprobs) {
  if (!logprobs.is_object() || !logprobs.contains("tokens")) return 0;
  return logprobs["tokens"].size();
}

// Checks one request; returns "" or what is wrong.
std::string check_case(const TestServer& s, const Case& c, int seed) {
  Json body = {{"prompt", "Once upon a time"}, {"n", c.n},        {"max_tokens", c.max_tokens},
               {"logprobs", 0},                {"seed", seed},    {"temperature", c.temperature}};
  if (!c.stop.is_null()) body["stop"] = c.stop;
  std::vector<int> n_finish(c.n, 0), n_tokens(c.n, 0);
  std::vector<std::string> reasons(c.n);
  int64_t usage_tokens = -1;
  if (c.stream) {
    body["stream"] = true;
    body["stream_options"] = {{"include_usage", true}};
    SseReply r = post_stream(s, "/v1/completions", body.dump());
    if (r.status != 200) return "status " + std::to_string(r.status) + ": " + r.raw;
    if (!r.done) return "no [DONE]";
    for (const Json& e : r.events) {
      if (e.contains("usage") && e["usage"].is_object()) usage_tokens = e["usage"].value("completion_tokens", -1);
      if (!e.contains("choices")) continue;
      for (const Json& ch : e["choices"]) {
        const int i = ch.value("index", -1);
        if (i < 0 || i >= c.n) return "choice index " + std::to_string(i) + " out of range";
        n_tokens[i] += static_cast<int>(n_logprob_tokens(ch["logprobs"]));
        if (ch.contains("finish_reason") && !ch["finish_reason"].is_null()) {
          ++n_finish[i];
          reasons[i] = ch["finish_reason"].get<std::string>();
        }
      }
    }
  } else {
    HttpReply r = post(s, "/v1/completions", body.dump());
    if (r.status != 200) return "status " + std::to_string(r.status) + ": " + r.body;
    const Json j = r.json();
    if (!j.contains("choices") || j["choices"].size() != static_cast<size_t>(c.n))
      return "expected " + std::to_string(c.n) + " choices: " + r.body;
    usage_tokens = j["usage"].value("completion_tokens", -1);
    for (const Json& ch : j["choices"]) {
      const int i = ch.value("index", -1);
      if (i < 0 || i >= c.n) return "choice index " + std::to_string(i) + " out of range";
      n_tokens[i] += static_cast<int>(n_logprob_tokens(ch["logprobs"]));
      if (!ch["finish_reason"].is_null()) {
        ++n_finish[i];
        reasons[i] = ch["finish_reason"].get<std::string>();
      }
    }
  }
  int64_t total = 0;
  for (int i = 0; i < c.n; ++i) {
    if (n_finish[i] != 1)
      return "choice " + std::to_string(i) + " has " + std::to_string(n_finish[i]) + " finish_reasons";
    if (reasons[i] != "stop" && reasons[i] != "length")
      return "choice " + std::to_string(i) + " finish_reason " + reasons[i];
    if (n_tokens[i] < 1 || n_tokens[i] > c.max_tokens)
      return "choice " + std::to_string(i) + " returned " + std::to_string(n_tokens[i]) + " tokens";
    if (reasons[i] == "length" && n_tokens[i] != c.max_tokens)
      return "choice " + std::to_string(i) + " ended for length after " + std::to_string(n_tokens[i]) + " tokens";
    total += n_tokens[i];
  }
  if (usage_tokens != total)
    return "usage.completion_tokens " + std::to_string(usage_tokens) + " != " + std::to_string(total) +
           " tokens returned";
  return "";
}

TEST(ServerChoices, EveryChoiceEndsOnceAndUsageCountsTheTokensReturned) {
  TestServerOptions o;
  o.max_seqs = 8;
  o.n_threads = 1;
  auto s = TestServer::start(o);
  ASSERT_TRUE(s);
  // Stops the tiny model hits on the first token often (" ", ",") and one it rarely hits.
  const std::vector<Json> stops = {nullptr, Json::array({","}), Json::array({" ", "."}), Json::array({"zzz"})};
  std::vector<Case> cases;
  for (int n = 1; n <= 8; ++n)
    for (int mt = 1; mt <= 4; ++mt)
      for (size_t si = 0; si < stops.size(); ++si)
        for (bool stream : {false, true})
          cases.push_back({n, mt, stops[si], stream, (n + mt + static_cast<int>(si)) % 2 == 0 ? 0.0 : 0.9});
  std::atomic<size_t> next{0};
  std::mutex mu;
  std::vector<std::string> failures;
  auto client = [&] {
    for (size_t i; (i = next++) < cases.size();) {
      const std::string err = check_case(*s, cases[i], static_cast<int>(i));
      if (!err.empty()) {
        std::lock_guard<std::mutex> lock(mu);
        failures.push_back(cases[i].describe() + ": " + err);
      }
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) threads.emplace_back(client);
  for (std::thread& t : threads) t.join();
  for (const std::string& f : failures) ADD_FAILURE() << f;
  EXPECT_EQ(failures.size(), 0u) << "of " << cases.size() << " requests";
  // The engine is idle and holds no blocks afterwards.
  EXPECT_TRUE(wait_until([&] { return metric(*s, "lumen_kv_blocks_used") == 0; }));
}

}  // namespace
}  // namespace lumen::server::testing
