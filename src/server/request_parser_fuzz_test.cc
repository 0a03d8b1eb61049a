// The request parser against hostile bodies: hundreds of mutations of valid requests
// (bytes flipped, inserted, deleted, truncated; values swapped for other JSON types and
// extremes; deep nesting; invalid UTF-8). Each must give a clean result: a request within
// the limits, or an invalid-argument error whose JSON rendering is valid. Runs under ASan
// (suite names contain "Fuzz"); ServerHttpFuzz replays a sample against a live server.
#include <gtest/gtest.h>

#include <random>

#include "server/api_error.h"
#include "server/request_parser.h"
#include "server/server_test_util.h"

namespace lumen::server {
namespace {

using Json = nlohmann::json;

ParserLimits test_limits() {
  ParserLimits l;
  l.n_vocab = 512;
  l.n_ctx = 256;
  l.max_n = 4;
  return l;
}

std::vector<std::pair<Endpoint, std::string>> seeds() {
  return {
      {Endpoint::kCompletions, R"({"prompt": "Once upon a time", "max_tokens": 16, "temperature": 0.7, "top_p": 0.9,
          "top_k": 40, "min_p": 0.05, "seed": 3, "stop": ["\n", "The end"], "n": 2, "logprobs": 3,
          "presence_penalty": 0.5, "frequency_penalty": 0.1, "repetition_penalty": 1.1, "priority": 2,
          "cache_salt": "tenant-a", "stream": true, "stream_options": {"include_usage": true}, "ignore_eos": false})"},
      {Endpoint::kCompletions, R"({"prompt": [1, 2, 3, 4, 5], "max_tokens": 4, "stop": "x", "user": "u"})"},
      {Endpoint::kCompletions, R"({"prompt": ["one prompt"], "max_completion_tokens": 8, "echo": false})"},
      {Endpoint::kChatCompletions, R"({"model": "m", "messages": [{"role": "system", "content": "Be brief."},
          {"role": "user", "content": [{"type": "text", "text": "Hi"}, {"type": "text", "text": " there"}]},
          {"role": "assistant", "content": "Hello"}, {"role": "developer", "content": "x", "name": "n"}],
          "max_tokens": 10, "logprobs": true, "top_logprobs": 5, "stream": false, "tool_choice": "none",
          "response_format": {"type": "text"}})"},
  };
}

Json random_value(std::mt19937_64& rng, int depth = 0) {
  switch (rng() % (depth > 2 ? 8 : 10)) {
    case 0: return nullptr;
    case 1: return static_cast<bool>(rng() % 2);
    case 2: return static_cast<int64_t>(rng()) >> (rng() % 64);
    case 3: return rng();  // unsigned, may exceed int64
    case 4: return std::uniform_real_distribution<double>(-1e6, 1e6)(rng);
    case 5: {
      const double extremes[] = {0.0, -0.0, 1e308, -1e308, 5e-324, 0.5, 1.0, 2.0, -1.0, 1e-9};
      return extremes[rng() % std::size(extremes)];
    }
    case 6: return std::string(rng() % 3 ? rng() % 8 : 300 + rng() % 300, static_cast<char>('a' + rng() % 26));
    case 7: return "\u00e9\u4e2d\U0001F600";
    case 8: {
      Json a = Json::array();
      for (uint64_t i = 0, n = rng() % 5; i < n; ++i) a.push_back(random_value(rng, depth + 1));
      return a;
    }
    default: {
      Json o = Json::object();
      for (uint64_t i = 0, n = rng() % 4; i < n; ++i) o["k" + std::to_string(rng() % 5)] = random_value(rng, depth + 1);
      o["type"] = random_value(rng, depth + 1);
      return o;
    }
  }
}

const char* kKeys[] = {"prompt", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "top_k",
                       "min_p", "seed", "stop", "n", "logprobs", "top_logprobs", "presence_penalty",
                       "frequency_penalty", "repetition_penalty", "priority", "cache_salt", "stream",
                       "stream_options", "ignore_eos", "model", "echo", "best_of", "logit_bias", "suffix", "tools",
                       "response_format", "user"};

// A structural mutation: one field replaced, removed or added; or a message / part changed.
std::string mutate_json(const std::string& seed, std::mt19937_64& rng) {
  Json j = Json::parse(seed);
  const int n_ops = 1 + static_cast<int>(rng() % 3);
  for (int op = 0; op < n_ops; ++op) {
    const char* key = kKeys[rng() % std::size(kKeys)];
    switch (rng() % 4) {
      case 0: j[key] = random_value(rng); break;
      case 1: j.erase(key); break;
      case 2:
        if (j.contains("messages") && j["messages"].is_array() && !j["messages"].empty()) {
          Json& m = j["messages"][rng() % j["messages"].size()];
          const char* mk[] = {"role", "content", "name", "tool_calls"};
          m[mk[rng() % 4]] = random_value(rng);
        } else if (j.contains("prompt") && j["prompt"].is_array() && !j["prompt"].empty()) {
          j["prompt"][rng() % j["prompt"].size()] = random_value(rng);
        }
        break;
      default: j["unknown_" + std::to_string(rng() % 3)] = random_value(rng); break;
    }
  }
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

// A byte-level mutation: flips, inserts, deletes, truncation.
std::string mutate_bytes(std::string s, std::mt19937_64& rng) {
  const int n_ops = 1 + static_cast<int>(rng() % 4);
  for (int op = 0; op < n_ops && !s.empty(); ++op) {
    const size_t pos = rng() % s.size();
    switch (rng() % 5) {
      case 0: s[pos] = static_cast<char>(rng()); break;
      case 1: s.insert(pos, 1, "{}[]\",:\\0e-.\x80\xff"[rng() % 15]); break;
      case 2: s.erase(pos, 1 + rng() % 8); break;
      case 3: s.resize(pos); break;
      default: s.insert(pos, std::string(1 + rng() % 4, '"')); break;
    }
  }
  return s;
}

std::vector<std::pair<Endpoint, std::string>> corpus(int n_per_seed, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::pair<Endpoint, std::string>> out;
  for (const auto& [endpoint, body] : seeds()) {
    for (int i = 0; i < n_per_seed; ++i) {
      switch (i % 3) {
        case 0: out.emplace_back(endpoint, mutate_json(body, rng)); break;
        case 1: out.emplace_back(endpoint, mutate_bytes(body, rng)); break;
        default: out.emplace_back(endpoint, mutate_bytes(mutate_json(body, rng), rng)); break;
      }
    }
  }
  // Hand-made extremes.
  out.emplace_back(Endpoint::kCompletions, std::string(100000, '[') + std::string(100000, ']'));
  out.emplace_back(Endpoint::kChatCompletions, R"({"messages": )" + std::string(5000, '[') + "}");
  out.emplace_back(Endpoint::kCompletions, std::string("{\"prompt\": \"\xc3\x28\"}"));
  out.emplace_back(Endpoint::kCompletions, R"({"prompt": "\ud800"})");
  out.emplace_back(Endpoint::kCompletions, R"({"prompt": "x", "max_tokens": 1e400})");
  out.emplace_back(Endpoint::kCompletions, R"({"prompt": "x", "n": 18446744073709551616})");
  out.emplace_back(Endpoint::kCompletions, R"({"prompt": "x", "prompt": 5})");
  out.emplace_back(Endpoint::kCompletions, "");
  out.emplace_back(Endpoint::kCompletions, std::string("\0\0\0", 3));
  out.emplace_back(Endpoint::kCompletions, "null");
  return out;
}

void check_clean(Endpoint endpoint, const std::string& body, const ParserLimits& limits) {
  auto r = parse_generation_request(body, endpoint, limits);
  if (!r.ok()) {
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_FALSE(r.message().empty());
    const ApiError e = api_error_from_status(r.status());
    EXPECT_EQ(e.http_status, 400);
    const Json j = Json::parse(api_error_json(e), nullptr, false);
    ASSERT_TRUE(j.is_object());
    EXPECT_TRUE(j["error"]["param"].is_null() || j["error"]["param"].is_string());
    return;
  }
  const ParsedRequest& p = *r;
  const engine::GenerationParams& g = p.params;
  EXPECT_GE(g.n, 1);
  EXPECT_LE(g.n, limits.max_n);
  if (p.max_tokens_given) {
    EXPECT_GE(g.max_tokens, 1);
    EXPECT_LE(g.max_tokens, limits.n_ctx);
  }
  EXPECT_LE(static_cast<int>(g.stop.size()), limits.max_stop);
  for (const std::string& s : g.stop) EXPECT_TRUE(!s.empty() && static_cast<int>(s.size()) <= limits.max_stop_bytes);
  EXPECT_GE(g.logprobs, -1);
  EXPECT_LE(g.logprobs, limits.max_logprobs);
  EXPECT_TRUE(g.sampling.temperature >= 0 && g.sampling.temperature <= 2);
  EXPECT_TRUE(g.sampling.top_p > 0 && g.sampling.top_p <= 1);
  EXPECT_TRUE(g.sampling.top_k >= 0 && g.sampling.top_k <= limits.n_vocab);
  EXPECT_TRUE(g.sampling.repeat_penalty > 0);
  EXPECT_LE(static_cast<int>(g.cache_salt.size()), limits.max_cache_salt_bytes);
  if (endpoint == Endpoint::kChatCompletions) {
    EXPECT_FALSE(p.messages.empty());
    EXPECT_LE(static_cast<int>(p.messages.size()), limits.max_messages);
    for (const auto& m : p.messages) EXPECT_TRUE(m.role == "system" || m.role == "user" || m.role == "assistant");
  } else if (p.prompt_is_ids) {
    EXPECT_FALSE(p.prompt_ids.empty());
    EXPECT_LE(static_cast<int>(p.prompt_ids.size()), limits.n_ctx);
    for (int32_t id : p.prompt_ids) EXPECT_TRUE(id >= 0 && id < limits.n_vocab);
  }
  if (p.include_usage) {
    EXPECT_TRUE(p.stream);
  }
}

TEST(ServerRequestParserFuzz, MutatedBodiesGiveCleanResults) {
  const ParserLimits limits = test_limits();
  int n_ok = 0, n_rejected = 0;
  for (const auto& [endpoint, body] : corpus(250, 42)) {
    SCOPED_TRACE(body.substr(0, 200));
    check_clean(endpoint, body, limits);
    // Both endpoints see every body: a chat body at the completions route is also hostile.
    check_clean(endpoint == Endpoint::kCompletions ? Endpoint::kChatCompletions : Endpoint::kCompletions, body, limits);
    (parse_generation_request(body, endpoint, limits).ok() ? n_ok : n_rejected)++;
    (void)parse_tokenize_request(body, limits);
    (void)parse_detokenize_request(body, limits);
    if (HasFatalFailure()) return;
  }
  // The corpus exercises both sides.
  EXPECT_GT(n_ok, 50);
  EXPECT_GT(n_rejected, 300);
}

TEST(ServerRequestParserFuzz, RandomBytes) {
  const ParserLimits limits = test_limits();
  std::mt19937_64 rng(7);
  for (int i = 0; i < 500; ++i) {
    std::string body(rng() % 200, '\0');
    for (char& c : body) c = static_cast<char>(rng());
    if (i % 2) body = "{\"prompt\": " + body;
    check_clean(Endpoint::kCompletions, body, limits);
    check_clean(Endpoint::kChatCompletions, body, limits);
  }
}

TEST(ServerRequestParser, DepthCheckSkipsStrings) {
  EXPECT_TRUE(json_depth_within(R"({"a": "[[[[[[[[[[[[[[[[[[[["})", 2));
  EXPECT_TRUE(json_depth_within(R"({"a": "\"[[[[[[[["})", 2));
  EXPECT_FALSE(json_depth_within(R"({"a": [[[1]]]})", 3));
  EXPECT_TRUE(json_depth_within(R"({"a": [[[1]]]})", 4));
}

TEST(ServerRequestParser, DefaultsAndFields) {
  const ParserLimits limits = test_limits();
  auto r = parse_generation_request(R"({"prompt": "hi"})", Endpoint::kCompletions, limits);
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_FLOAT_EQ(r->params.sampling.temperature, 1.0f);  // OpenAI's defaults
  EXPECT_FLOAT_EQ(r->params.sampling.top_p, 1.0f);
  EXPECT_EQ(r->params.sampling.top_k, 0);
  EXPECT_FALSE(r->max_tokens_given);
  EXPECT_FALSE(r->seed_given);
  EXPECT_EQ(r->params.logprobs, -1);
  auto c = parse_generation_request(seeds()[0].second, Endpoint::kCompletions, limits);
  ASSERT_TRUE(c.ok()) << c.message();
  EXPECT_EQ(c->params.max_tokens, 16);
  EXPECT_EQ(c->params.stop, (std::vector<std::string>{"\n", "The end"}));
  EXPECT_EQ(c->params.n, 2);
  EXPECT_EQ(c->params.logprobs, 3);
  EXPECT_EQ(c->params.priority, 2);
  EXPECT_EQ(c->params.cache_salt, "tenant-a");
  EXPECT_TRUE(c->include_usage);
  EXPECT_EQ(c->params.sampling.seed, 3u);
  auto chat = parse_generation_request(seeds()[3].second, Endpoint::kChatCompletions, limits);
  ASSERT_TRUE(chat.ok()) << chat.message();
  ASSERT_EQ(chat->messages.size(), 4u);
  EXPECT_EQ(chat->messages[1].content, "Hi there");
  EXPECT_EQ(chat->messages[3].role, "system");  // developer
  EXPECT_EQ(chat->params.logprobs, 5);
  auto ids = parse_generation_request(R"({"prompt": [[7, 8]], "max_tokens": 3.0})", Endpoint::kCompletions, limits);
  ASSERT_TRUE(ids.ok()) << ids.message();
  EXPECT_EQ(ids->prompt_ids, (std::vector<int32_t>{7, 8}));
  EXPECT_EQ(ids->params.max_tokens, 3);
}

TEST(ServerRequestParser, StatusFieldConvention) {
  EXPECT_EQ(status_field("messages[2].role: must be one of"), "messages[2].role");
  EXPECT_EQ(status_field("prompt: 300 tokens do not fit"), "prompt");
  EXPECT_EQ(status_field("the request body is not valid JSON: x"), "");
  EXPECT_EQ(status_field("no colon here"), "");
  const ApiError busy = api_error_from_status(error("queue full", StatusCode::kUnavailable));
  EXPECT_EQ(busy.http_status, 503);
}

}  // namespace

namespace testing {
namespace {

// A sample of the corpus against a live server: every answer is a 200 or a clean 4xx
// error body, never a 5xx, and the server serves on.
TEST(ServerHttpFuzz, MutatedBodiesOverHttp) {
  auto s = TestServer::start();
  ASSERT_TRUE(s);
  int i = 0;
  for (const auto& [endpoint, body] : corpus(40, 99)) {
    const std::string path = endpoint == Endpoint::kChatCompletions ? "/v1/chat/completions" : "/v1/completions";
    HttpReply r = post(*s, path, body);
    SCOPED_TRACE(body.substr(0, 200));
    ASSERT_NE(r.status, 0) << "no response to body " << i;
    EXPECT_TRUE(r.status == 200 || r.status == 400 || r.status == 404 || r.status == 413) << r.status << " " << r.body;
    if (r.status >= 400) {
      EXPECT_TRUE(r.json().contains("error")) << r.body;
    }
    ++i;
  }
  EXPECT_EQ(get(*s, "/health").status, 200);
  EXPECT_TRUE(wait_until([&] { return metric(*s, "lumen_kv_blocks_used") == 0; }));
}

}  // namespace
}  // namespace testing
}  // namespace lumen::server
