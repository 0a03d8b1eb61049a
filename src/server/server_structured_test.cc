// Structured output through HTTP: response_format (json_object, json_schema), llama.cpp's
// grammar and json_schema fields. stories260K's vocabulary has byte tokens, so it can spell
// any JSON; its free output is stories, so valid JSON is the grammar's doing.
#include <gtest/gtest.h>

#include <regex>

#include "server/server_test_util.h"

namespace lumen::server::testing {
namespace {

class ServerStructured : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    TestServerOptions o;
    o.model_path = stories260k_path();
    o.n_ctx = 512;
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
TestServer* ServerStructured::server_ = nullptr;

const char* kPersonSchema = R"({"type": "object", "properties": {
    "name": {"type": "string", "minLength": 1, "maxLength": 12},
    "age": {"type": "integer", "minimum": 0, "maximum": 120},
    "pets": {"type": "array", "items": {"enum": ["dog", "cat", "fish"]}, "maxItems": 3}},
    "required": ["name", "age", "pets"], "additionalProperties": false})";

void expect_person(const std::string& text) {
  const Json j = Json::parse(text, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << text;
  ASSERT_TRUE(j.is_object()) << text;
  ASSERT_EQ(j.size(), 3u) << text;
  ASSERT_TRUE(j["name"].is_string()) << text;
  EXPECT_GE(j["name"].get<std::string>().size(), 1u);
  ASSERT_TRUE(j["age"].is_number_integer()) << text;
  EXPECT_LE(j["age"].get<int64_t>(), 120);
  EXPECT_GE(j["age"].get<int64_t>(), 0);
  ASSERT_TRUE(j["pets"].is_array()) << text;
  EXPECT_LE(j["pets"].size(), 3u);
}

TEST_F(ServerStructured, ResponseFormatJsonSchemaChatAndCompletions) {
  const Json schema = Json::parse(kPersonSchema);
  Json chat = {{"messages", {{{"role", "user"}, {"content", "Describe a person."}}}},
               {"max_tokens", 200},
               {"temperature", 1.0},
               {"n", 3},
               {"seed", 1},
               {"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "person"}, {"schema", schema}, {"strict", true}}}}}};
  HttpReply r = post(s(), "/v1/chat/completions", chat.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  const Json j = r.json();
  ASSERT_EQ(j["choices"].size(), 3u);
  for (const Json& c : j["choices"]) {
    EXPECT_EQ(c["finish_reason"], "stop") << c.dump();
    expect_person(c["message"]["content"].get<std::string>());
  }
  // llama.cpp's json_schema field on /v1/completions, streamed.
  Json comp = {{"prompt", "Once upon a time"}, {"max_tokens", 200}, {"temperature", 1.0}, {"seed", 2},
               {"json_schema", schema}, {"stream", true}};
  SseReply sr = post_stream(s(), "/v1/completions", comp.dump());
  ASSERT_EQ(sr.status, 200);
  ASSERT_TRUE(sr.done);
  expect_person(sr.text());
}

// OpenAI and llama.cpp generate an object's properties in the schema's order (name, age,
// pets here), not sorted. The body is written as text: the test's Json would sort it.
TEST_F(ServerStructured, ObjectsFollowTheSchemaPropertyOrder) {
  const std::string chat = std::string(R"({"messages": [{"role": "user", "content": "Describe a person."}],
      "max_tokens": 200, "temperature": 1.0, "n": 3, "seed": 5,
      "response_format": {"type": "json_schema", "json_schema": {"name": "person", "schema": )") +
                           kPersonSchema + "}}}";
  const std::string comp = std::string(R"({"prompt": "Once upon a time", "max_tokens": 200, "temperature": 1.0,
      "seed": 6, "json_schema": )") + kPersonSchema + "}";
  std::vector<std::string> texts;
  HttpReply r = post(s(), "/v1/chat/completions", chat);
  ASSERT_EQ(r.status, 200) << r.body;
  const Json reply = r.json();
  for (const Json& c : reply["choices"]) texts.push_back(c["message"]["content"].get<std::string>());
  r = post(s(), "/v1/completions", comp);
  ASSERT_EQ(r.status, 200) << r.body;
  texts.push_back(r.json()["choices"][0]["text"].get<std::string>());
  ASSERT_EQ(texts.size(), 4u);
  for (const std::string& text : texts) {
    expect_person(text);
    const auto j = nlohmann::ordered_json::parse(text);
    std::vector<std::string> keys;
    for (const auto& [k, v] : j.items()) keys.push_back(k);
    EXPECT_EQ(keys, (std::vector<std::string>{"name", "age", "pets"})) << text;
  }
}

// JSON Schema pattern through response_format: each string matches its pattern, checked with
// std::regex (ECMAScript, search) rather than lumen's own matcher.
TEST_F(ServerStructured, PatternsConstrainStrings) {
  const Json schema = Json::parse(R"({"type": "object", "properties": {
      "code": {"type": "string", "pattern": "^[A-Z]{2}-\\d{4}$"},
      "tag": {"pattern": "^(red|green|blue)(/[a-z]{1,4}){0,2}$"},
      "quoted": {"type": "string", "pattern": "^[\"\\\\a-c]{2,4}$"}},
      "required": ["code", "tag", "quoted"], "additionalProperties": false})");
  Json chat = {{"messages", {{{"role", "user"}, {"content", "Give me codes."}}}},
               {"max_tokens", 200},
               {"temperature", 1.5},
               {"n", 3},
               {"seed", 7},
               {"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "codes"}, {"schema", schema}}}}}};
  HttpReply r = post(s(), "/v1/chat/completions", chat.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  const Json reply = r.json();
  ASSERT_EQ(reply["choices"].size(), 3u);
  for (const Json& c : reply["choices"]) {
    EXPECT_EQ(c["finish_reason"], "stop") << c.dump();
    const Json j = Json::parse(c["message"]["content"].get<std::string>(), nullptr, false);
    ASSERT_TRUE(j.is_object()) << c.dump();
    for (const char* key : {"code", "tag", "quoted"}) {
      ASSERT_TRUE(j.contains(key) && j[key].is_string()) << j.dump();
      const std::regex re(schema["properties"][key]["pattern"].get<std::string>(), std::regex::ECMAScript);
      EXPECT_TRUE(std::regex_search(j[key].get<std::string>(), re)) << key << ": " << j.dump();
    }
  }
}

TEST_F(ServerStructured, JsonObjectAndGrammarField) {
  Json chat = {{"messages", {{{"role", "user"}, {"content", "Give me JSON."}}}},
               {"max_tokens", 120},
               {"temperature", 1.0},
               {"seed", 3},
               {"response_format", {{"type", "json_object"}}}};
  for (int i = 0; i < 3; ++i) {
    chat["seed"] = i;
    HttpReply r = post(s(), "/v1/chat/completions", chat.dump());
    ASSERT_EQ(r.status, 200) << r.body;
    const Json c = r.json()["choices"][0];
    if (c["finish_reason"] != "stop") continue;  // a long object may run out of tokens
    const Json j = Json::parse(c["message"]["content"].get<std::string>(), nullptr, false);
    EXPECT_TRUE(j.is_object()) << c.dump();
  }
  Json g = {{"prompt", "The answer is"}, {"max_tokens", 20}, {"temperature", 1.0}, {"seed", 4},
            {"grammar", "root ::= (\"yes\" | \"no\") \", \" [0-9]{2}\n"}};
  HttpReply r = post(s(), "/v1/completions", g.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  const std::string text = r.json()["choices"][0]["text"].get<std::string>();
  ASSERT_EQ(text.size() == 6 || text.size() == 7, true) << text;
  EXPECT_TRUE(text.rfind("yes, ", 0) == 0 || text.rfind("no, ", 0) == 0) << text;
}

TEST_F(ServerStructured, BadConstraintsGet400NamingTheField) {
  const std::string user = R"("messages": [{"role": "user", "content": "hi"}])";
  struct Case {
    std::string path, body, param, message;
  };
  const std::vector<Case> cases = {
      {"/v1/chat/completions", "{" + user + R"(, "response_format": {"type": "xml"}})", "response_format.type", "must be"},
      {"/v1/chat/completions", "{" + user + R"(, "response_format": {"type": "json_schema"}})",
       "response_format.json_schema", "required"},
      {"/v1/chat/completions",
       "{" + user + R"j(, "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "string", "pattern": "a(?=b)"}}}})j",
       "response_format.json_schema.schema", "lookahead '(?=' is not supported"},
      {"/v1/completions", R"({"prompt": "x", "grammar": "root ::= foo"})", "grammar", "never defined"},
      {"/v1/completions", R"({"prompt": "x", "grammar": 5})", "grammar", "expected a string"},
      {"/v1/completions", R"({"prompt": "x", "json_schema": {"type": "object", "minProperties": 1}})", "json_schema",
       "unsupported keyword 'minProperties'"},
      {"/v1/completions", R"({"prompt": "x", "grammar": "root ::= \"a\"", "json_schema": {}})", "json_schema",
       "give only one of"},
      {"/v1/completions", R"({"prompt": "x", "mirostat": 2})", "mirostat", "not supported"},
      {"/v1/completions", R"({"prompt": "x", "typical_p": 0.5})", "typical_p", "not supported"},
      {"/v1/completions", R"({"prompt": "x", "n_probs": 3})", "n_probs", "use logprobs"},
      {"/v1/completions", R"({"prompt": "x", "repeat_penalty": 1.2, "repetition_penalty": 1.1})", "repeat_penalty",
       "differs"},
  };
  for (const Case& c : cases) {
    HttpReply r = post(s(), c.path, c.body);
    ASSERT_EQ(r.status, 400) << c.body << " -> " << r.body;
    const Json e = r.json()["error"];
    EXPECT_EQ(e["param"], c.param) << r.body;
    EXPECT_NE(e["message"].get<std::string>().find(c.message), std::string::npos) << r.body;
  }
  // Defaults and implemented llama.cpp fields are accepted.
  HttpReply ok = post(s(), "/v1/completions",
                      R"({"prompt": "x", "max_tokens": 2, "mirostat": 0, "typical_p": 1, "repeat_penalty": 1.1,
                          "repeat_last_n": 32, "cache_prompt": true, "response_format": {"type": "text"}})");
  EXPECT_EQ(ok.status, 200) << ok.body;
}

}  // namespace
}  // namespace lumen::server::testing
