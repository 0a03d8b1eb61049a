// Reasoning through HTTP on stories260K (byte tokens: a grammar makes it write <think> tags):
// the <think> part becomes message.reasoning_content (delta.reasoning_content when
// streaming) when --reasoning-format says deepseek, or when the chat template is a thinking
// one; a template whose generation prompt opens <think> starts the output inside the
// reasoning; chat_template_kwargs reach the template.
#include <gtest/gtest.h>

#include <regex>

#include "server/server_test_util.h"

namespace lumen::server::testing {
namespace {

using Reasoning = ServerConfig::ReasoningFormat;

std::unique_ptr<TestServer> start_server(Reasoning format, const std::string& chat_template = "") {
  TestServerOptions o;
  o.model_path = stories260k_path();
  o.n_ctx = 512;
  o.server.reasoning_format = format;
  o.server.chat_template = chat_template;
  return TestServer::start(o);
}

Json chat(const std::string& grammar, uint64_t seed) {
  return {{"messages", {{{"role", "user"}, {"content", "What is two plus two?"}}}},
          {"max_tokens", 120},
          {"temperature", 1.0},
          {"seed", seed},
          {"grammar", grammar}};
}

bool matches(const std::string& s, const char* re) { return std::regex_match(s, std::regex(re)); }

struct Streamed {
  std::string reasoning, content, finish;
};

Streamed stream(const TestServer& s, Json body) {
  body["stream"] = true;
  SseReply sr = post_stream(s, "/v1/chat/completions", body.dump());
  EXPECT_EQ(sr.status, 200) << sr.raw;
  EXPECT_TRUE(sr.done);
  Streamed out;
  for (const Json& e : sr.events)
    for (const Json& c : e["choices"]) {
      const Json& d = c["delta"];
      if (d.contains("reasoning_content")) out.reasoning += d["reasoning_content"].get<std::string>();
      if (d.contains("content")) out.content += d["content"].get<std::string>();
      if (c["finish_reason"].is_string()) out.finish = c["finish_reason"];
    }
  return out;
}

const char* kThinkGrammar = "root ::= \"<think>\\n\" [a-z]{3,10} \" \" [a-z]{3,10} \"\\n</think>\\n\\n\" [a-z]{2,10}\n";

TEST(ServerReasoning, DeepseekFormatSplitsTheThinkPart) {
  auto s = start_server(Reasoning::kDeepseek);
  ASSERT_NE(s, nullptr);
  for (uint64_t seed : {1, 2, 3}) {
    HttpReply r = post(*s, "/v1/chat/completions", chat(kThinkGrammar, seed).dump());
    ASSERT_EQ(r.status, 200) << r.body;
    const Json m = r.json()["choices"][0]["message"];
    ASSERT_TRUE(m.contains("reasoning_content")) << m.dump();
    const std::string reasoning = m["reasoning_content"], content = m["content"];
    EXPECT_TRUE(matches(reasoning, "[a-z]{3,10} [a-z]{3,10}")) << m.dump();
    EXPECT_TRUE(matches(content, "[a-z]{2,10}")) << m.dump();
    // Streamed: the same split (same seed), no piece of a tag in either part.
    const Streamed st = stream(*s, chat(kThinkGrammar, seed));
    EXPECT_EQ(st.reasoning, reasoning);
    EXPECT_EQ(st.content, content);
    EXPECT_EQ(st.finish, "stop");
  }
  // Text that does not open with <think> stays content.
  HttpReply r = post(*s, "/v1/chat/completions", chat("root ::= [a-z]{2,8} \" <think>x</think>\"\n", 4).dump());
  ASSERT_EQ(r.status, 200) << r.body;
  const Json m = r.json()["choices"][0]["message"];
  EXPECT_FALSE(m.contains("reasoning_content")) << m.dump();
  EXPECT_TRUE(matches(m["content"], "[a-z]{2,8} <think>x</think>")) << m.dump();
  // /v1/completions is raw text.
  Json comp = {{"prompt", "Once"}, {"max_tokens", 60}, {"seed", 5}, {"grammar", kThinkGrammar}};
  r = post(*s, "/v1/completions", comp.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.json()["choices"][0]["text"].get<std::string>().rfind("<think>\n", 0), 0u) << r.body;
}

TEST(ServerReasoning, NoneAndNonThinkingTemplatesKeepTheText) {
  for (Reasoning format : {Reasoning::kNone, Reasoning::kAuto}) {  // auto: ChatML is no thinking template
    auto s = start_server(format);
    ASSERT_NE(s, nullptr);
    HttpReply r = post(*s, "/v1/chat/completions", chat(kThinkGrammar, 1).dump());
    ASSERT_EQ(r.status, 200) << r.body;
    const Json m = r.json()["choices"][0]["message"];
    EXPECT_FALSE(m.contains("reasoning_content")) << m.dump();
    EXPECT_EQ(m["content"].get<std::string>().rfind("<think>\n", 0), 0u) << m.dump();
  }
}

// A thinking template (it writes <think>, so auto splits) whose generation prompt opens the
// reasoning unless enable_thinking is false, as Qwen3's and DeepSeek-R1's do.
const char* kThinkingTemplate =
    "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor %}<|assistant|>"
    "{% if enable_thinking is defined and enable_thinking is false %}<think></think>{% else %}<think>\n{% endif %}";

TEST(ServerReasoning, PromptOpensTheReasoningAndKwargsReachTheTemplate) {
  auto s = start_server(Reasoning::kAuto, kThinkingTemplate);
  ASSERT_NE(s, nullptr);
  const char* inside = "root ::= [a-z]{3,10} \"\\n</think>\\n\\n\" [a-z]{2,10}\n";
  HttpReply r = post(*s, "/v1/chat/completions", chat(inside, 1).dump());
  ASSERT_EQ(r.status, 200) << r.body;
  const Json on = r.json();
  const Json m = on["choices"][0]["message"];
  EXPECT_TRUE(matches(m.value("reasoning_content", ""), "[a-z]{3,10}")) << m.dump();
  EXPECT_TRUE(matches(m["content"], "[a-z]{2,10}")) << m.dump();
  const Streamed st = stream(*s, chat(inside, 1));
  EXPECT_EQ(st.reasoning, m.value("reasoning_content", ""));
  EXPECT_EQ(st.content, m["content"]);

  Json off = chat("root ::= [a-z]{3,10}\n", 2);
  off["chat_template_kwargs"] = {{"enable_thinking", false}};
  r = post(*s, "/v1/chat/completions", off.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  const Json j = r.json();
  EXPECT_FALSE(j["choices"][0]["message"].contains("reasoning_content")) << r.body;
  EXPECT_TRUE(matches(j["choices"][0]["message"]["content"], "[a-z]{3,10}")) << r.body;
  // The template saw enable_thinking: its prompt ends "<think></think>", not "<think>\n".
  EXPECT_NE(j["usage"]["prompt_tokens"].get<int>(), on["usage"]["prompt_tokens"].get<int>()) << r.body;

  for (const char* bad : {R"("chat_template_kwargs": 3)", R"("chat_template_kwargs": {"messages": []})"}) {
    const std::string body = R"({"messages": [{"role": "user", "content": "hi"}], )" + std::string(bad) + "}";
    r = post(*s, "/v1/chat/completions", body);
    ASSERT_EQ(r.status, 400) << r.body;
    EXPECT_EQ(r.json()["error"]["param"].get<std::string>().rfind("chat_template_kwargs", 0), 0u) << r.body;
  }
}

}  // namespace
}  // namespace lumen::server::testing
