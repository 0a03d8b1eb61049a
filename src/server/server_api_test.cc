// The API details apps need: GET /v1/models/{id} and the names a model answers to
// (--alias, general.name, the file name), CORS (--cors-origin), and /v1/embeddings.
#include <cmath>
#include <cstring>

#include "server/cors.h"
#include "server/server_test_util.h"

namespace lumen::server {
namespace {

using namespace lumen::server::testing;

constexpr const char* kGeneralName = "Raincandy U TinyStories 656K";  // the tiny model's general.name

std::string header(const HttpReply& r, const std::string& name) {
  auto it = r.headers.find(name);
  return it == r.headers.end() ? "" : it->second;
}

// ---- models ----------------------------------------------------------------------------

TEST(ServerModels, RetrieveByEveryNameAndListTheServedId) {
  auto s = TestServer::start();
  ASSERT_TRUE(s);
  HttpReply list = get(*s, "/v1/models");
  ASSERT_EQ(list.status, 200);
  EXPECT_EQ(list.json()["data"][0]["id"], kGeneralName);
  for (const std::string id : {"Raincandy%20U%20TinyStories%20656K", "TinyStories-656K-Q8_0.gguf", "TinyStories-656K-Q8_0"}) {
    HttpReply r = get(*s, "/v1/models/" + id);
    ASSERT_EQ(r.status, 200) << id << ": " << r.body;
    EXPECT_EQ(r.json()["id"], kGeneralName);
    EXPECT_EQ(r.json()["object"], "model");
  }
  HttpReply missing = get(*s, "/v1/models/gpt-4o");
  ASSERT_EQ(missing.status, 404);
  EXPECT_EQ(missing.json()["error"]["code"], "model_not_found");
  EXPECT_EQ(missing.json()["error"]["type"], "invalid_request_error");
  EXPECT_NE(missing.json()["error"]["message"].get<std::string>().find("gpt-4o"), std::string::npos);
  EXPECT_EQ(post(*s, "/v1/models/x", "{}").status, 405);
}

TEST(ServerModels, AliasIsServedAndTheFileNameStillAccepted) {
  TestServerOptions o;
  o.server.model_alias = "tiny";
  auto s = TestServer::start(o);
  ASSERT_TRUE(s);
  EXPECT_EQ(get(*s, "/v1/models").json()["data"][0]["id"], "tiny");
  EXPECT_EQ(get(*s, "/v1/models/tiny").json()["id"], "tiny");
  for (const std::string model : {"tiny", kGeneralName, "TinyStories-656K-Q8_0", "TinyStories-656K-Q8_0.gguf"}) {
    Json req = {{"model", model}, {"prompt", "Once"}, {"max_tokens", 2}};
    HttpReply r = post(*s, "/v1/completions", req.dump());
    ASSERT_EQ(r.status, 200) << model << ": " << r.body;
    EXPECT_EQ(r.json()["model"], "tiny");
  }
  HttpReply wrong = post(*s, "/v1/completions", Json{{"model", "tinier"}, {"prompt", "Once"}, {"max_tokens", 2}}.dump());
  EXPECT_EQ(wrong.status, 404);
  EXPECT_EQ(wrong.json()["error"]["code"], "model_not_found");
}

// ---- CORS ------------------------------------------------------------------------------

TEST(ServerCors, PolicyParsing) {
  EXPECT_FALSE(CorsPolicy().enabled());
  auto p = CorsPolicy::parse({"http://App.Example:80, https://b.example:8443", "http://localhost:3000"});
  ASSERT_TRUE(p.ok()) << p.message();
  EXPECT_TRUE(p->allows("http://app.example"));
  EXPECT_TRUE(p->allows("https://b.example:8443"));
  EXPECT_TRUE(p->allows("http://localhost:3000"));
  EXPECT_FALSE(p->allows("https://app.example"));  // another scheme is another origin
  EXPECT_FALSE(p->allows("http://localhost:3001"));
  EXPECT_FALSE(p->allows("null"));
  EXPECT_TRUE(CorsPolicy::parse({"*"})->allows("https://anything.example"));
  for (const std::string bad : {"ftp://x.example", "http://x.example/path", "x.example", "", "http://a b"}) {
    auto r = CorsPolicy::parse({bad});
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.message().find("--cors-origin"), std::string::npos) << r.message();
  }
}

TEST(ServerCors, OffByDefault) {
  auto s = TestServer::start();
  ASSERT_TRUE(s);
  const httplib::Headers pre = {{"Origin", "http://localhost:3000"}, {"Access-Control-Request-Method", "POST"}};
  HttpReply r = send(*s, "OPTIONS", "/v1/chat/completions", pre);
  EXPECT_EQ(r.status, 405);
  EXPECT_EQ(header(r, "Access-Control-Allow-Origin"), "");
  HttpReply models = send(*s, "GET", "/v1/models", {{"Origin", "http://localhost:3000"}});
  EXPECT_EQ(models.status, 200);  // a loopback origin passes the CSRF check, but gets no CORS header
  EXPECT_EQ(header(models, "Access-Control-Allow-Origin"), "");
}

TEST(ServerCors, PreflightAndResponsesForAnAllowedOrigin) {
  TestServerOptions o;
  o.server.cors_origins = {"https://app.example"};
  auto s = TestServer::start(o);
  ASSERT_TRUE(s);
  const std::string origin = "https://app.example";
  HttpReply pre = send(*s, "OPTIONS", "/v1/chat/completions",
                       {{"Origin", origin},
                        {"Access-Control-Request-Method", "POST"},
                        {"Access-Control-Request-Headers", "authorization, content-type, x-stainless-os"}});
  ASSERT_EQ(pre.status, 204) << pre.body;
  EXPECT_EQ(header(pre, "Access-Control-Allow-Origin"), origin);
  EXPECT_NE(header(pre, "Access-Control-Allow-Methods").find("POST"), std::string::npos);
  const std::string allowed = header(pre, "Access-Control-Allow-Headers");
  for (const char* h : {"Authorization", "Content-Type", "x-stainless-os"})
    EXPECT_NE(allowed.find(h), std::string::npos) << allowed;
  EXPECT_EQ(header(pre, "Access-Control-Max-Age"), std::to_string(CorsPolicy::kMaxAgeSeconds));
  EXPECT_EQ(send(*s, "OPTIONS", "/v1/models/x", {{"Origin", origin}, {"Access-Control-Request-Method", "GET"}}).status,
            204);

  // The answers themselves, an error and a stream included, carry Allow-Origin.
  const httplib::Headers from_page = {{"Origin", origin}};
  HttpReply ok = send(*s, "POST", "/v1/completions", from_page, Json{{"prompt", "Once"}, {"max_tokens", 2}}.dump());
  EXPECT_EQ(ok.status, 200) << ok.body;
  EXPECT_EQ(header(ok, "Access-Control-Allow-Origin"), origin);
  EXPECT_EQ(header(ok, "Vary"), "Origin");
  HttpReply bad = send(*s, "POST", "/v1/completions", from_page, Json{{"prompt", "Once"}, {"max_tokens", -1}}.dump());
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(header(bad, "Access-Control-Allow-Origin"), origin);
  HttpReply stream = send(*s, "POST", "/v1/completions", from_page,
                          Json{{"prompt", "Once"}, {"max_tokens", 2}, {"stream", true}}.dump());
  EXPECT_EQ(stream.status, 200);
  EXPECT_NE(stream.body.find("data: [DONE]"), std::string::npos);
  EXPECT_EQ(header(stream, "Access-Control-Allow-Origin"), origin);

  // Another origin: no preflight answer, no CORS headers, and (no API key) the CSRF refusal.
  const std::string other = "https://evil.example";
  HttpReply pre_other = send(*s, "OPTIONS", "/v1/completions", {{"Origin", other}, {"Access-Control-Request-Method", "POST"}});
  EXPECT_EQ(pre_other.status, 405);
  EXPECT_EQ(header(pre_other, "Access-Control-Allow-Origin"), "");
  HttpReply refused = send(*s, "POST", "/v1/completions", {{"Origin", other}}, Json{{"prompt", "Once"}}.dump());
  EXPECT_EQ(refused.status, 403);
  EXPECT_EQ(header(refused, "Access-Control-Allow-Origin"), "");
}

TEST(ServerCors, WithAnApiKeyThePreflightNeedsNoKeyButTheRequestDoes) {
  TestServerOptions o;
  o.server.cors_origins = {"*"};
  o.server.api_key = "sekret";
  auto s = TestServer::start(o);
  ASSERT_TRUE(s);
  const std::string origin = "https://any.example";
  HttpReply pre = send(*s, "OPTIONS", "/v1/embeddings", {{"Origin", origin}, {"Access-Control-Request-Method", "POST"}});
  EXPECT_EQ(pre.status, 204);
  EXPECT_EQ(header(pre, "Access-Control-Allow-Origin"), origin);
  HttpReply no_key = send(*s, "GET", "/v1/models", {{"Origin", origin}});
  EXPECT_EQ(no_key.status, 401);
  EXPECT_EQ(header(no_key, "Access-Control-Allow-Origin"), origin);  // the page can read why
  HttpReply with_key = send(*s, "GET", "/v1/models", {{"Origin", origin}, {"Authorization", "Bearer sekret"}});
  EXPECT_EQ(with_key.status, 200);
  EXPECT_EQ(header(with_key, "Access-Control-Allow-Origin"), origin);
}

// ---- embeddings ------------------------------------------------------------------------

std::unique_ptr<TestServer> embeddings_server(engine::Pooling pooling = engine::Pooling::kNone) {
  TestServerOptions o;
  o.server.embeddings = true;
  o.server.pooling = pooling;
  o.max_seqs = 8;
  return TestServer::start(o);
}

std::vector<float> vector_of(const Json& item) { return item["embedding"].get<std::vector<float>>(); }

TEST(ServerEmbeddings, OffWithoutTheFlag) {
  auto s = TestServer::start();
  ASSERT_TRUE(s);
  HttpReply r = post(*s, "/v1/embeddings", Json{{"input", "hello"}}.dump());
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(r.json()["error"]["code"], "embeddings_disabled");
  EXPECT_NE(r.body.find("--embeddings"), std::string::npos);
}

TEST(ServerEmbeddings, OneTextAndItsShape) {
  auto s = embeddings_server();
  ASSERT_TRUE(s);
  HttpReply r = post(*s, "/v1/embeddings", Json{{"input", "Once upon a time"}, {"model", kGeneralName}}.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  const Json j = r.json();
  EXPECT_EQ(j["object"], "list");
  EXPECT_EQ(j["model"], kGeneralName);
  ASSERT_EQ(j["data"].size(), 1u);
  EXPECT_EQ(j["data"][0]["object"], "embedding");
  EXPECT_EQ(j["data"][0]["index"], 0);
  const std::vector<float> v = vector_of(j["data"][0]);
  EXPECT_EQ(static_cast<int32_t>(v.size()), s->server->engine()->hparams().n_embd);
  double n2 = 0;
  for (float x : v) n2 += double{x} * x;
  EXPECT_NEAR(n2, 1.0, 1e-5);
  HttpReply tok = post(*s, "/tokenize", Json{{"content", "Once upon a time"}}.dump());
  EXPECT_EQ(j["usage"]["prompt_tokens"], tok.json()["count"]);
  EXPECT_EQ(j["usage"]["total_tokens"], tok.json()["count"]);
}

// Acceptance 4 over HTTP: 32 texts in one request give, item by item, what each gives
// alone (within 1e-5); token ids give what their text gives; base64 decodes to the floats.
TEST(ServerEmbeddings, ABatchOf32EqualsEachAloneAndTheEncodingsAgree) {
  auto s = embeddings_server(engine::Pooling::kMean);
  ASSERT_TRUE(s);
  std::vector<std::string> texts;
  for (int i = 0; i < 32; ++i) texts.push_back("Story " + std::to_string(i) + ": the cat sat on the mat " + std::string(i % 5, '!'));
  HttpReply batch = post(*s, "/v1/embeddings", Json{{"input", texts}}.dump());
  ASSERT_EQ(batch.status, 200) << batch.body;
  const Json data = batch.json()["data"];
  ASSERT_EQ(data.size(), 32u);
  for (size_t i = 0; i < texts.size(); i += 7) {
    HttpReply alone = post(*s, "/v1/embeddings", Json{{"input", texts[i]}}.dump());
    ASSERT_EQ(alone.status, 200);
    const std::vector<float> a = vector_of(alone.json()["data"][0]), b = vector_of(data[i]);
    EXPECT_EQ(data[i]["index"], i);
    ASSERT_EQ(a.size(), b.size());
    for (size_t k = 0; k < a.size(); ++k) ASSERT_NEAR(a[k], b[k], 1e-5) << "item " << i << " dim " << k;
  }
  const std::vector<int32_t> ids = post(*s, "/tokenize", Json{{"content", texts[3]}}.dump()).json()["tokens"];
  for (const Json& input : {Json(ids), Json::array({ids, ids})}) {
    HttpReply by_ids = post(*s, "/v1/embeddings", Json{{"input", input}}.dump());
    ASSERT_EQ(by_ids.status, 200) << by_ids.body;
    const std::vector<float> a = vector_of(by_ids.json()["data"][0]), b = vector_of(data[3]);
    for (size_t k = 0; k < a.size(); ++k) ASSERT_NEAR(a[k], b[k], 1e-5);
  }
  HttpReply b64 = post(*s, "/v1/embeddings", Json{{"input", texts[3]}, {"encoding_format", "base64"}}.dump());
  ASSERT_EQ(b64.status, 200);
  const std::string enc = b64.json()["data"][0]["embedding"];
  std::string bytes;
  auto val = [](char c) -> int {
    const std::string abc = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    return static_cast<int>(abc.find(c));
  };
  for (size_t i = 0; i + 3 < enc.size(); i += 4) {
    const uint32_t v = (val(enc[i]) << 18) | (val(enc[i + 1]) << 12) | ((enc[i + 2] == '=' ? 0 : val(enc[i + 2])) << 6) |
                       (enc[i + 3] == '=' ? 0 : val(enc[i + 3]));
    bytes.push_back(static_cast<char>(v >> 16));
    if (enc[i + 2] != '=') bytes.push_back(static_cast<char>(v >> 8));
    if (enc[i + 3] != '=') bytes.push_back(static_cast<char>(v));
  }
  const std::vector<float> want = vector_of(data[3]);
  ASSERT_EQ(bytes.size(), want.size() * 4);
  std::vector<float> got(want.size());
  std::memcpy(got.data(), bytes.data(), bytes.size());
  EXPECT_EQ(got, want);
}

TEST(ServerEmbeddings, BadInputsAreA400NamingTheField) {
  auto s = embeddings_server();
  ASSERT_TRUE(s);
  const int32_t n_embd = s->server->engine()->hparams().n_embd;
  struct Case {
    Json body;
    const char* param;
  };
  const std::vector<Case> cases = {
      {Json::object(), "input"},
      {Json{{"input", ""}}, "input"},
      {Json{{"input", Json::array()}}, "input"},
      {Json{{"input", {"a", 3}}}, "input[1]"},
      {Json{{"input", {"a", ""}}}, "input[1]"},
      {Json{{"input", {1, 2, 99999999}}}, "input[2]"},
      {Json{{"input", {Json::array({1}), Json::array()}}}, "input[1]"},
      {Json{{"input", 42}}, "input"},
      {Json{{"input", "x"}, {"encoding_format", "int8"}}, "encoding_format"},
      {Json{{"input", "x"}, {"dimensions", n_embd / 2}}, "dimensions"},
      {Json{{"input", std::vector<std::string>(2049, "x")}}, "input"},
  };
  for (const Case& c : cases) {
    HttpReply r = post(*s, "/v1/embeddings", c.body.dump());
    EXPECT_EQ(r.status, 400) << c.body.dump().substr(0, 200) << " -> " << r.body;
    EXPECT_EQ(r.json()["error"]["param"], c.param) << r.body;
  }
  EXPECT_EQ(post(*s, "/v1/embeddings", Json{{"input", "x"}, {"model", "other"}}.dump()).status, 404);
  EXPECT_EQ(post(*s, "/v1/embeddings", Json{{"input", "x"}, {"dimensions", n_embd}}.dump()).status, 200);
  std::string too_long;
  for (int i = 0; i < 400; ++i) too_long += "and the cat ";
  HttpReply r = post(*s, "/v1/embeddings", Json{{"input", {"fine", too_long}}}.dump());
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.json()["error"]["param"], "input[1]");
}

}  // namespace
}  // namespace lumen::server
