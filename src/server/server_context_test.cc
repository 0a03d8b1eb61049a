// The serve context policy (README "Context limits"): a 400 naming the limit by default,
// truncation of the oldest chat turns with "truncation": "auto", vLLM's
// truncate_prompt_tokens, and finish_reason "length" at the end of the context.
#include <string>
#include <vector>

#include "server/server_test_util.h"

namespace lumen::server::testing {
namespace {

constexpr int32_t kCtx = 256;

std::unique_ptr<TestServer> start_small() {
  TestServerOptions o;
  o.n_ctx = kCtx;
  o.max_seqs = 2;
  return TestServer::start(o);
}

Json message(const std::string& role, const std::string& content) { return {{"role", role}, {"content", content}}; }

// A system message and 6 turns of ~33 tokens a message (ChatML is plain text to the tiny
// vocabulary): ~430 tokens, beyond the context.
Json long_conversation() {
  Json m = Json::array({message("system", "You tell short stories about animals.")});
  for (int i = 0; i < 6; ++i) {
    m.push_back(message("user", "Tell me story number " + std::to_string(i) + " about a cat and a dog in the park."));
    m.push_back(message("assistant", "The cat and the dog played with a red ball in the park all day long."));
  }
  m.push_back(message("user", "Now one about a little bird."));
  return m;
}

int64_t count_tokens(const TestServer& s, const Json& messages) {
  const HttpReply r = post(s, "/tokenize", Json{{"messages", messages}}.dump());
  EXPECT_EQ(r.status, 200) << r.body;
  return r.json()["count"].get<int64_t>();
}

Json chat(const Json& messages, int max_tokens) {
  return {{"messages", messages}, {"max_tokens", max_tokens}, {"temperature", 0}};
}

TEST(ServerContext, TooLongIsA400NamingTheLimit) {
  auto s = start_small();
  ASSERT_TRUE(s);
  const Json m = long_conversation();
  ASSERT_GT(count_tokens(*s, m), kCtx);
  HttpReply r = post(*s, "/v1/chat/completions", chat(m, 16).dump());
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(r.json()["error"]["param"], "messages") << r.body;
  EXPECT_NE(r.body.find("context of " + std::to_string(kCtx) + " tokens"), std::string::npos) << r.body;
  // The prompt fits but not with max_tokens: the 400 names max_tokens and both numbers.
  const Json shorter = Json::array({m[0], m[1], m[2], m.back()});
  const int64_t n = count_tokens(*s, shorter);
  ASSERT_LT(n, kCtx);
  r = post(*s, "/v1/chat/completions", chat(shorter, static_cast<int>(kCtx - n + 1)).dump());
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(r.json()["error"]["param"], "max_tokens") << r.body;
  EXPECT_NE(r.body.find(std::to_string(kCtx)), std::string::npos) << r.body;
  // "disabled" is the default, said explicitly.
  Json body = chat(m, 16);
  body["truncation"] = "disabled";
  EXPECT_EQ(post(*s, "/v1/chat/completions", body.dump()).status, 400);
}

// "truncation": "auto" drops the oldest turns, keeps the system message and the latest user
// turn: the reply is the one the server gives for exactly that shorter conversation.
TEST(ServerContext, AutoTruncationDropsTheOldestTurns) {
  auto s = start_small();
  ASSERT_TRUE(s);
  const Json m = long_conversation();
  const int max_tokens = 16;
  // What should remain: the system message and the most recent whole turns that fit.
  Json expected;
  for (size_t first = 1; first < m.size(); first += 2) {
    Json kept = Json::array({m[0]});
    for (size_t i = first; i < m.size(); ++i) kept.push_back(m[i]);
    if (count_tokens(*s, kept) <= kCtx - max_tokens) {
      expected = kept;
      break;
    }
  }
  ASSERT_TRUE(expected.is_array());
  ASSERT_LT(expected.size(), m.size());
  ASSERT_GT(expected.size(), 2u);  // some turns stay
  Json body = chat(m, max_tokens);
  body["truncation"] = "auto";
  const HttpReply cut = post(*s, "/v1/chat/completions", body.dump());
  ASSERT_EQ(cut.status, 200) << cut.body;
  const HttpReply same = post(*s, "/v1/chat/completions", chat(expected, max_tokens).dump());
  ASSERT_EQ(same.status, 200) << same.body;
  EXPECT_EQ(cut.json()["usage"]["prompt_tokens"], count_tokens(*s, expected));
  EXPECT_EQ(cut.json()["choices"][0]["message"]["content"], same.json()["choices"][0]["message"]["content"]);
  // Without max_tokens the prompt only needs room for one token.
  body.erase("max_tokens");
  const HttpReply open = post(*s, "/v1/chat/completions", body.dump());
  ASSERT_EQ(open.status, 200) << open.body;
  EXPECT_LT(open.json()["usage"]["prompt_tokens"].get<int64_t>(), kCtx);
  // A latest user turn that alone does not fit is still the 400.
  const Json huge = Json::array({m[0], message("user", std::string(2000, 'a'))});
  body = chat(huge, max_tokens);
  body["truncation"] = "auto";
  const HttpReply r = post(*s, "/v1/chat/completions", body.dump());
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(r.json()["error"]["param"], "messages") << r.body;
}

// vLLM's truncate_prompt_tokens: the prompt's last k tokens, as if sent as those ids.
TEST(ServerContext, TruncatePromptTokensKeepsTheLastK) {
  auto s = start_small();
  ASSERT_TRUE(s);
  std::string text;
  for (int i = 0; i < 60; ++i) text += "The cat sat on the mat. ";
  const HttpReply tok = post(*s, "/tokenize", Json{{"content", text}}.dump());
  const std::vector<int32_t> ids = tok.json()["tokens"].get<std::vector<int32_t>>();
  ASSERT_GT(ids.size(), static_cast<size_t>(kCtx));
  Json body = {{"prompt", text}, {"max_tokens", 8}, {"temperature", 0}, {"truncate_prompt_tokens", 20}};
  const HttpReply cut = post(*s, "/v1/completions", body.dump());
  ASSERT_EQ(cut.status, 200) << cut.body;
  EXPECT_EQ(cut.json()["usage"]["prompt_tokens"], 20);
  const std::vector<int32_t> last(ids.end() - 20, ids.end());
  const HttpReply same =
      post(*s, "/v1/completions", Json{{"prompt", last}, {"max_tokens", 8}, {"temperature", 0}}.dump());
  ASSERT_EQ(same.status, 200) << same.body;
  EXPECT_EQ(cut.json()["choices"][0]["text"], same.json()["choices"][0]["text"]);
  body["truncate_prompt_tokens"] = -1;  // as many as leave room for max_tokens
  const HttpReply room = post(*s, "/v1/completions", body.dump());
  ASSERT_EQ(room.status, 200) << room.body;
  EXPECT_EQ(room.json()["usage"]["prompt_tokens"], kCtx - 8);
}

TEST(ServerContext, BadTruncationFieldsAre400) {
  auto s = start_small();
  ASSERT_TRUE(s);
  const Json m = Json::array({message("user", "hi")});
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"/v1/chat/completions", Json{{"messages", m}, {"truncation", "sometimes"}}.dump()},
      {"/v1/chat/completions", Json{{"messages", m}, {"truncation", 1}}.dump()},
      {"/v1/completions", Json{{"prompt", "hi"}, {"truncation", "auto"}}.dump()},
      {"/v1/completions", Json{{"prompt", "hi"}, {"truncate_prompt_tokens", 0}}.dump()},
      {"/v1/completions", Json{{"prompt", "hi"}, {"truncate_prompt_tokens", kCtx + 1}}.dump()},
      {"/v1/completions", Json{{"prompt", "hi"}, {"truncate_prompt_tokens", "5"}}.dump()},
  };
  for (const auto& [path, body] : cases) {
    const HttpReply r = post(*s, path, body);
    EXPECT_EQ(r.status, 400) << body << " -> " << r.body;
    const std::string param = r.json()["error"]["param"].is_string() ? r.json()["error"]["param"].get<std::string>() : "";
    EXPECT_EQ(param.rfind("trunc", 0), 0u) << body << " -> " << r.body;
  }
}

// A completion without max_tokens runs to the end of the context: finish_reason "length".
TEST(ServerContext, EndOfContextIsLength) {
  auto s = start_small();
  ASSERT_TRUE(s);
  const Json body = {{"prompt", "Once upon a time"}, {"temperature", 0}, {"ignore_eos", true}};
  const HttpReply r = post(*s, "/v1/completions", body.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  const Json j = r.json();
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["usage"]["prompt_tokens"].get<int64_t>() + j["usage"]["completion_tokens"].get<int64_t>(), kCtx);
}

}  // namespace
}  // namespace lumen::server::testing
