// Tool calling through HTTP on stories260K (byte tokens: it can spell any JSON; no chat
// template, so ChatML and the json call format). Its free output is stories, so calls with
// valid arguments under tool_choice "required" or a named function are the grammar's doing.
#include <gtest/gtest.h>

#include "server/server_test_util.h"

namespace lumen::server::testing {
namespace {

class ServerTools : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    TestServerOptions o;
    o.model_path = stories260k_path();
    o.n_ctx = 1024;  // the tool list in the system message is ~430 byte-level tokens
    server_ = TestServer::start(o).release();
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  void SetUp() override { ASSERT_NE(server_, nullptr); }
  const TestServer& s() const { return *server_; }
  static TestServer* server_;
};
TestServer* ServerTools::server_ = nullptr;

const char* kTools = R"([
  {"type": "function", "function": {"name": "get_weather", "description": "The weather in a city",
   "parameters": {"type": "object", "properties": {
       "city": {"type": "string", "minLength": 1, "maxLength": 10},
       "days": {"type": "integer", "minimum": 1, "maximum": 7}},
     "required": ["city", "days"], "additionalProperties": false}}},
  {"type": "function", "function": {"name": "now", "description": "The time"}}])";

Json request(const Json& tool_choice, uint64_t seed) {
  return {{"messages", {{{"role", "user"}, {"content", "What is the weather in Paris?"}}}},
          {"tools", Json::parse(kTools)},
          {"tool_choice", tool_choice},
          {"parallel_tool_calls", false},
          {"max_tokens", 200},
          {"temperature", 1.0},
          {"seed", seed}};
}

// arguments (a JSON string) valid for get_weather's schema, or {} for now.
void expect_valid_call(const Json& call) {
  ASSERT_EQ(call["type"], "function") << call.dump();
  ASSERT_TRUE(call["id"].is_string()) << call.dump();
  const std::string name = call["function"]["name"];
  ASSERT_TRUE(call["function"]["arguments"].is_string()) << call.dump();
  const Json args = Json::parse(call["function"]["arguments"].get<std::string>(), nullptr, false);
  ASSERT_TRUE(args.is_object()) << call.dump();
  if (name == "now") {
    EXPECT_TRUE(args.empty()) << call.dump();
    return;
  }
  ASSERT_EQ(name, "get_weather");
  ASSERT_EQ(args.size(), 2u) << call.dump();
  ASSERT_TRUE(args["city"].is_string()) << call.dump();
  ASSERT_TRUE(args["days"].is_number_integer()) << call.dump();
  EXPECT_GE(args["days"].get<int64_t>(), 1);
  EXPECT_LE(args["days"].get<int64_t>(), 7);
}

TEST_F(ServerTools, RequiredAndNamedAlwaysGiveValidCalls) {
  Json named = {{"type", "function"}, {"function", {{"name", "get_weather"}}}};
  for (const Json& choice : {Json("required"), named}) {
    Json body = request(choice, 1);
    body["n"] = 3;
    HttpReply r = post(s(), "/v1/chat/completions", body.dump());
    ASSERT_EQ(r.status, 200) << r.body;
    const Json j = r.json();
    ASSERT_EQ(j["choices"].size(), 3u);
    for (const Json& c : j["choices"]) {
      EXPECT_EQ(c["finish_reason"], "tool_calls") << c.dump();
      const Json& m = c["message"];
      EXPECT_TRUE(m["content"].is_null()) << c.dump();
      ASSERT_EQ(m["tool_calls"].size(), 1u) << c.dump();
      expect_valid_call(m["tool_calls"][0]);
      if (choice.is_object()) {
        EXPECT_EQ(m["tool_calls"][0]["function"]["name"], "get_weather");
      }
    }
  }
  Json now = request({{"type", "function"}, {"function", {{"name", "now"}}}}, 2);
  HttpReply r = post(s(), "/v1/chat/completions", now.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  const Json call = r.json()["choices"][0]["message"]["tool_calls"][0];
  EXPECT_EQ(call["function"]["name"], "now");
  EXPECT_EQ(call["function"]["arguments"], "{}");
}

TEST_F(ServerTools, StreamedCallsComeAsOpenAiDeltas) {
  Json body = request("required", 3);
  body["stream"] = true;
  SseReply sr = post_stream(s(), "/v1/chat/completions", body.dump());
  ASSERT_EQ(sr.status, 200) << sr.raw;
  ASSERT_TRUE(sr.done);
  std::string id, name, arguments, finish;
  for (const Json& e : sr.events) {
    for (const Json& c : e["choices"]) {
      if (c["finish_reason"].is_string()) finish = c["finish_reason"];
      if (!c["delta"].contains("tool_calls")) continue;
      const Json& tc = c["delta"]["tool_calls"][0];
      EXPECT_EQ(tc["index"], 0);
      if (tc.contains("id")) {  // the first delta of a call: id, type, name, empty arguments
        EXPECT_TRUE(id.empty());
        id = tc["id"];
        EXPECT_EQ(tc["type"], "function");
        name = tc["function"]["name"];
        EXPECT_EQ(tc["function"]["arguments"], "");
      } else {
        arguments += tc["function"]["arguments"].get<std::string>();
      }
    }
  }
  EXPECT_EQ(finish, "tool_calls");
  EXPECT_FALSE(id.empty());
  expect_valid_call({{"id", id}, {"type", "function"}, {"function", {{"name", name}, {"arguments", arguments}}}});
}

TEST_F(ServerTools, ToolTurnsRenderAndNoneOrAutoAnswerText) {
  Json body = request("none", 4);
  body["max_tokens"] = 16;
  body["messages"] = Json::parse(R"([
      {"role": "user", "content": "Weather in Oslo?"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
        "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\", \"days\": 1}"}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}])");
  for (const char* choice : {"none", "auto"}) {
    body["tool_choice"] = choice;
    HttpReply r = post(s(), "/v1/chat/completions", body.dump());
    ASSERT_EQ(r.status, 200) << r.body;
    const Json c = r.json()["choices"][0];
    // A story model answers with text: no calls parse out of it.
    EXPECT_TRUE(c["message"]["content"].is_string()) << c.dump();
    EXPECT_FALSE(c["message"].contains("tool_calls")) << c.dump();
    EXPECT_NE(c["finish_reason"], "tool_calls");
  }
}

TEST_F(ServerTools, BadToolsGet400NamingTheField) {
  Json body = request("required", 5);
  body["tools"][1]["function"]["parameters"] =
      Json::parse(R"({"type": "object", "properties": {"t": {"type": "array", "uniqueItems": true}}})");
  HttpReply r = post(s(), "/v1/chat/completions", body.dump());
  ASSERT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(r.json()["error"]["param"], "tools[1].function.parameters") << r.body;
  body = request({{"type", "function"}, {"function", {{"name", "sing"}}}}, 5);
  r = post(s(), "/v1/chat/completions", body.dump());
  ASSERT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(r.json()["error"]["param"], "tool_choice.function.name") << r.body;
}

}  // namespace
}  // namespace lumen::server::testing
