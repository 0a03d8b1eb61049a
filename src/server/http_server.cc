// The server's routes, authentication, Host / Origin checks, health and the small
// endpoints, over the epoll transport (http_transport.h). No exception leaves a handler:
// handle() catches them (STYLE 4) and answers 500.
#include <algorithm>
#include <chrono>
#include <thread>

#include <nlohmann/json.hpp>

#include "base/check.h"
#include "base/log.h"
#include "server/cors.h"
#include "server/http_transport.h"
#include "server/reasoning.h"
#include "server/routing_key.h"
#include "server/serving_state.h"

namespace lumen::server {
namespace {

using Json = nlohmann::json;

// Used when the model ships no chat template, as llama.cpp and `lumen chat` do.
// TODO(integrator): share one definition with cli/chat_cmd.cc (e.g. in tokenizer/chat_template.h).
constexpr const char* kChatMlTemplate =
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + "
    "'<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

// /tokenize reads at most this many bytes of text per context token (and at least
// kMinTokenizeBytes): any prompt that fits the context fits, and a 4 MiB body cannot
// become millions of ids. /detokenize takes at most kDetokenizeIdsPerCtx ids per context
// token.
constexpr int64_t kTokenizeBytesPerCtx = 32;
constexpr int64_t kMinTokenizeBytes = 64 << 10;
constexpr int64_t kDetokenizeIdsPerCtx = 4;

std::string dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

// Compares without an early exit, so the time taken says nothing about the key.
bool same_secret(const std::string& a, const std::string& b) {
  unsigned diff = a.size() != b.size();
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned>(a[i] ^ (i < b.size() ? b[i] : 0));
  return diff == 0;
}

ApiError loading_error() { return ApiError{503, "the model is loading", "server_error", "", "model_loading"}; }

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return out;
}

// The host of a Host header value or an Origin's authority: without port, brackets, case.
std::string host_of(std::string_view authority) {
  if (!authority.empty() && authority[0] == '[') {
    const size_t close = authority.find(']');
    return lower(authority.substr(1, close == std::string_view::npos ? std::string_view::npos : close - 1));
  }
  const size_t colon = authority.find(':');
  if (colon != std::string_view::npos && authority.find(':', colon + 1) == std::string_view::npos)
    authority = authority.substr(0, colon);
  return lower(authority);
}

bool is_loopback_name(const std::string& host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0 ||
         (host.size() > 10 && host.compare(host.size() - 10, 10, ".localhost") == 0);
}

enum class RouteKind : uint8_t { kInline, kWorker };

// %XX escapes decoded (a malformed one stays as it is); '+' is not a space in a path.
std::string percent_decode(std::string_view s) {
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && hex(s[i + 1]) >= 0 && hex(s[i + 2]) >= 0) {
      out.push_back(static_cast<char>(hex(s[i + 1]) * 16 + hex(s[i + 2])));
      i += 2;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

// The last path component of a model path (a file, or a directory of safetensors).
std::string base_name(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

}  // namespace

struct HttpServer::Impl {
  ServerConfig config;
  std::unique_ptr<HttpTransport> transport;
  mutable ServerMetrics metrics;  // internally synchronized
  std::atomic<bool> stopping{false};
  std::atomic<bool> draining{false};
  std::vector<std::string> allowed_hosts;  // lower case, beside the loopback names
  CorsPolicy cors;                         // --cors-origin (off: no CORS headers)
  bool any_host = false;
  // Written once by attach_engine before `state` publishes it; read-only afterwards.
  std::unique_ptr<ServingState> state_owner;
  std::atomic<const ServingState*> state{nullptr};
  std::mutex lifecycle_mu;  // attach_engine vs stop
  bool stopped = false;

  using Handler = void (Impl::*)(const HttpRequest&, HttpResponse&) const;
  struct Route {
    const char* method;
    const char* path;
    RouteKind kind;
    bool open;  // no API key, Host or Origin check (health checks: probes send any Host)
    Handler handler;
    bool prefix = false;  // `path` is a prefix: /v1/models/{id}
  };
  static bool matches(const Route& r, std::string_view path) {
    return r.prefix ? path.size() > std::string_view(r.path).size() && path.starts_with(r.path) : path == r.path;
  }
  static const std::vector<Route>& routes();
  // The route of a request (null: none); *path_known says whether another method has it.
  static const Route* find_route(const HttpRequest& req, bool* path_known);

  HandlerEnv env() const { return HandlerEnv{&config, &metrics, &stopping}; }
  const ServingState* ready() const { return state.load(std::memory_order_acquire); }

  HttpCallbacks callbacks();
  void handle(const HttpRequest& req, HttpResponse& res) const;
  void handle_uncaught(const HttpRequest& req, HttpResponse& res) const;  // route(), exceptions -> 500
  void route(const HttpRequest& req, HttpResponse& res) const;
  // A 401 / 403 for a request that may not use a guarded route, or nothing.
  bool refused(const HttpRequest& req, HttpResponse& res) const;
  bool host_allowed(const std::string& host) const;
  void error_response(int status, const std::string& message, HttpResponse& res) const;
  void before_send(HttpResponse& res) const;

  void handle_health(const HttpRequest&, HttpResponse& res) const;
  void handle_live(const HttpRequest&, HttpResponse& res) const;
  void handle_models(const HttpRequest&, HttpResponse& res) const;
  void handle_model(const HttpRequest& req, HttpResponse& res) const;
  void handle_metrics(const HttpRequest&, HttpResponse& res) const;
  void handle_tokenize(const HttpRequest& req, HttpResponse& res) const;
  void handle_detokenize(const HttpRequest& req, HttpResponse& res) const;
  void handle_routing_key(const HttpRequest& req, HttpResponse& res) const;
  void handle_completions(const HttpRequest& req, HttpResponse& res) const;
  void handle_chat(const HttpRequest& req, HttpResponse& res) const;
  void handle_embeddings(const HttpRequest& req, HttpResponse& res) const;
};

const std::vector<HttpServer::Impl::Route>& HttpServer::Impl::routes() {
  static const std::vector<Route> kRoutes = {
      {"GET", "/health", RouteKind::kInline, true, &Impl::handle_health},
      {"GET", "/health/ready", RouteKind::kInline, true, &Impl::handle_health},
      {"GET", "/readyz", RouteKind::kInline, true, &Impl::handle_health},
      {"GET", "/health/live", RouteKind::kInline, true, &Impl::handle_live},
      {"GET", "/livez", RouteKind::kInline, true, &Impl::handle_live},
      {"GET", "/v1/models", RouteKind::kInline, false, &Impl::handle_models},
      {"GET", "/v1/models/", RouteKind::kInline, false, &Impl::handle_model, /*prefix=*/true},
      {"GET", "/metrics", RouteKind::kInline, false, &Impl::handle_metrics},
      {"POST", "/v1/completions", RouteKind::kWorker, false, &Impl::handle_completions},
      {"POST", "/v1/chat/completions", RouteKind::kWorker, false, &Impl::handle_chat},
      {"POST", "/tokenize", RouteKind::kWorker, false, &Impl::handle_tokenize},
      {"POST", "/detokenize", RouteKind::kWorker, false, &Impl::handle_detokenize},
      {"POST", "/v1/routing_key", RouteKind::kWorker, false, &Impl::handle_routing_key},
      {"POST", "/v1/embeddings", RouteKind::kWorker, false, &Impl::handle_embeddings},
  };
  return kRoutes;
}

const HttpServer::Impl::Route* HttpServer::Impl::find_route(const HttpRequest& req, bool* path_known) {
  *path_known = false;
  // HEAD is GET without the body (the transport leaves it out).
  std::string_view method = req.method;
  if (method == "HEAD") method = "GET";
  for (const Route& r : routes()) {
    if (!matches(r, req.path)) continue;
    *path_known = true;
    if (method == r.method) return &r;
  }
  return nullptr;
}

HttpCallbacks HttpServer::Impl::callbacks() {
  HttpCallbacks cb;
  cb.handle = [this](const HttpRequest& req, HttpResponse& res) { handle(req, res); };
  // Unknown routes and refusals are answered on the I/O thread too: they cost nothing.
  cb.runs_inline = [](const HttpRequest& req) {
    bool known = false;
    const Route* r = find_route(req, &known);
    return r == nullptr || r->kind == RouteKind::kInline;
  };
  cb.error_response = [this](int status, const std::string& message, HttpResponse& res) {
    error_response(status, message, res);
  };
  cb.before_send = [this](HttpResponse& res) { before_send(res); };
  return cb;
}

void HttpServer::Impl::error_response(int status, const std::string& message, HttpResponse& res) const {
  ApiError e;
  e.http_status = status;
  e.message = message;
  if (status >= 500) e.type = "server_error";
  send_error(res, e);
}

void HttpServer::Impl::before_send(HttpResponse& res) const {
  if (!config.replica_id.empty()) res.set_header("X-Replica-Id", config.replica_id);
  metrics.count_http(res.status);
}

bool HttpServer::Impl::host_allowed(const std::string& host) const {
  if (any_host || is_loopback_name(host)) return true;
  return std::find(allowed_hosts.begin(), allowed_hosts.end(), host) != allowed_hosts.end();
}

bool HttpServer::Impl::refused(const HttpRequest& req, HttpResponse& res) const {
  if (!config.api_key.empty()) {
    const std::string auth = req.header_value("Authorization");
    constexpr std::string_view kBearer = "Bearer ";
    if (auth.rfind(kBearer, 0) == 0 && same_secret(auth.substr(kBearer.size()), config.api_key)) return false;
    send_error(res, ApiError{401, "invalid or missing API key (send Authorization: Bearer KEY)", "authentication_error",
                             "", "invalid_api_key"});
    return true;
  }
  // No key: a web page the user visits must not drive this server (CSRF), nor read its
  // answers through a rebound DNS name. Browsers send the page's Origin and the name they
  // resolved as Host; both must be allowed names.
  const std::string host = host_of(req.header_value("Host"));
  if (req.has_header("Host") && !host_allowed(host)) {
    send_error(res, ApiError{403,
                             "Host '" + host.substr(0, 128) +
                                 "' is not allowed without an API key (loopback names only; see --allowed-host)",
                             "invalid_request_error", "", "host_not_allowed"});
    return true;
  }
  if (req.has_header("Origin") && !cors.allows(req.header_value("Origin"))) {
    const std::string origin = req.header_value("Origin");
    const size_t scheme_end = origin.find("://");
    const std::string origin_host = scheme_end == std::string::npos ? "" : host_of(std::string_view(origin).substr(scheme_end + 3));
    if (origin_host.empty() || !host_allowed(origin_host)) {
      send_error(res, ApiError{403,
                               "Origin '" + origin.substr(0, 128) +
                                   "' is not allowed without an API key (cross-origin requests are refused; see "
                                   "--allowed-host and --cors-origin)",
                               "invalid_request_error", "", "origin_not_allowed"});
      return true;
    }
  }
  return false;
}

void HttpServer::Impl::route(const HttpRequest& req, HttpResponse& res) const {
  bool path_known = false;
  const Route* r = find_route(req, &path_known);
  if (!r) {
    if (!path_known)
      return send_error(res, ApiError{404, "no route " + req.method.substr(0, 16) + " " + req.path.substr(0, 256),
                                      "not_found_error", "", ""});
    std::string allow;
    for (const Route& other : routes())
      if (matches(other, req.path)) allow += std::string(allow.empty() ? "" : ", ") + other.method;
    // A browser's preflight for an allowed origin (never authenticated: browsers send no
    // Authorization header on it).
    if (CorsPolicy::is_preflight(req) && cors.allows(req.header_value("Origin")))
      return cors.answer_preflight(req, allow, res);
    res.set_header("Allow", allow);
    return send_error(res, ApiError{405, "method " + req.method.substr(0, 16) + " is not allowed on " + req.path +
                                             " (allowed: " + allow + ")",
                                    "invalid_request_error", "", ""});
  }
  if (!r->open && refused(req, res)) return;
  (this->*(r->handler))(req, res);
}

void HttpServer::Impl::handle(const HttpRequest& req, HttpResponse& res) const {
  handle_uncaught(req, res);
  cors.decorate(req, res);  // answers, errors and streams alike (the head goes out after this)
}

void HttpServer::Impl::handle_uncaught(const HttpRequest& req, HttpResponse& res) const {
  try {
    route(req, res);
  } catch (const std::bad_alloc&) {
    LUMEN_LOG_ERROR("server: out of memory in the handler of %s (%zu-byte body)", req.path.substr(0, 64).c_str(),
                    req.body.size());
    res = HttpResponse();
    send_error(res, ApiError{500, "internal error", "server_error", "", ""});
  } catch (const std::exception&) {
    // The exception's text is not logged: a library may quote the request in it (STYLE 19).
    LUMEN_LOG_ERROR("server: exception in the handler of %s (%zu-byte body)", req.path.substr(0, 64).c_str(),
                    req.body.size());
    res = HttpResponse();
    send_error(res, ApiError{500, "internal error", "server_error", "", ""});
  }
}

// Readiness (/health, /health/ready, /readyz): 200 only while the model is loaded and the
// server is not draining; a balancer sends nothing new to a replica that says 503.
void HttpServer::Impl::handle_health(const HttpRequest&, HttpResponse& res) const {
  const char* status = draining.load() ? "draining" : ready() ? "ok" : "loading";
  if (std::string_view(status) != "ok") {
    res.status = 503;
    res.set_header("Retry-After", "1");
  }
  res.set_content(std::string(R"({"status":")") + status + "\"}", "application/json");
}

// Liveness (/health/live, /livez): the process answers; loading and draining are alive.
void HttpServer::Impl::handle_live(const HttpRequest&, HttpResponse& res) const {
  res.set_content(R"({"status":"alive"})", "application/json");
}

namespace {
Json model_object(const ServingState& s) {
  return Json{{"id", s.model_name},
              {"object", "model"},
              {"created", s.created_s},
              {"owned_by", "lumen"},
              {"max_model_len", s.limits.n_ctx}};
}
}  // namespace

void HttpServer::Impl::handle_models(const HttpRequest&, HttpResponse& res) const {
  const ServingState* s = ready();
  if (!s) return send_error(res, loading_error());
  res.set_content(dump(Json{{"object", "list"}, {"data", Json::array({model_object(*s)})}}), "application/json");
}

// GET /v1/models/{id}: the model object under any name the server accepts for it.
void HttpServer::Impl::handle_model(const HttpRequest& req, HttpResponse& res) const {
  const ServingState* s = ready();
  if (!s) return send_error(res, loading_error());
  const std::string id = percent_decode(std::string_view(req.path).substr(std::string_view("/v1/models/").size()));
  if (!serves_model(*s, id)) return send_error(res, model_not_found(*s, id));
  res.set_content(dump(model_object(*s)), "application/json");
}

void HttpServer::Impl::handle_metrics(const HttpRequest&, HttpResponse& res) const {
  const ServingState* s = ready();
  const TransportStats stats = transport ? transport->stats() : TransportStats{};
  ServingGauges gauges;
  gauges.draining = draining.load();
  gauges.transport = &stats;
  gauges.model_name = s ? s->model_name : config.model_alias;
  std::string body;
  if (s) {
    const engine::EngineMetrics m = s->engine->metrics();
    body = metrics.render(&m, gauges);
  } else {
    body = metrics.render(nullptr, gauges);
  }
  res.set_content(body, "text/plain; version=0.0.4; charset=utf-8");
}

void HttpServer::Impl::handle_completions(const HttpRequest& req, HttpResponse& res) const {
  const ServingState* s = ready();
  if (!s) return send_error(res, loading_error());
  handle_generation(*s, env(), Endpoint::kCompletions, req, res);
}

void HttpServer::Impl::handle_chat(const HttpRequest& req, HttpResponse& res) const {
  const ServingState* s = ready();
  if (!s) return send_error(res, loading_error());
  handle_generation(*s, env(), Endpoint::kChatCompletions, req, res);
}

void HttpServer::Impl::handle_embeddings(const HttpRequest& req, HttpResponse& res) const {
  const ServingState* s = ready();
  if (!s) return send_error(res, loading_error());
  server::handle_embeddings(*s, env(), req, res);
}

void HttpServer::Impl::handle_tokenize(const HttpRequest& req, HttpResponse& res) const {
  const ServingState* s = ready();
  if (!s) return send_error(res, loading_error());
  auto parsed = parse_tokenize_request(req.body, s->limits);
  if (!parsed.ok()) return send_error(res, api_error_from_status(parsed.status()));
  // The output cap, enforced on the input: the text bounds the ids and the memory.
  const int64_t max_bytes = std::max<int64_t>(kMinTokenizeBytes, kTokenizeBytesPerCtx * s->limits.n_ctx);
  int64_t n_bytes = static_cast<int64_t>(parsed->text.size());
  for (const tok::ChatMessage& m : parsed->messages) n_bytes += static_cast<int64_t>(m.content.size());
  if (n_bytes > max_bytes)
    return send_error(res, invalid_request(parsed->has_messages ? "messages" : "content",
                                           "the text to tokenize is " + std::to_string(n_bytes) +
                                               " bytes; the limit is " + std::to_string(max_bytes) + " (" +
                                               std::to_string(kTokenizeBytesPerCtx) + " per context token)"));
  std::vector<int32_t> ids;
  if (parsed->has_messages) {
    auto chat = chat_prompt_ids(*s, parsed->messages);
    if (!chat.ok()) return send_error(res, api_error_from_status(chat.status()));
    ids = std::move(chat).value();
  } else {
    ids = s->engine->tokenizer().encode(parsed->text, parsed->add_special, /*parse_special=*/true);
  }
  Json body = {{"tokens", ids}, {"count", ids.size()}, {"max_model_len", s->limits.n_ctx}};
  res.set_content(dump(body), "application/json");
}

void HttpServer::Impl::handle_detokenize(const HttpRequest& req, HttpResponse& res) const {
  const ServingState* s = ready();
  if (!s) return send_error(res, loading_error());
  auto ids = parse_detokenize_request(req.body, s->limits);
  if (!ids.ok()) return send_error(res, api_error_from_status(ids.status()));
  const int64_t max_ids = kDetokenizeIdsPerCtx * std::max<int64_t>(s->limits.n_ctx, 4096);
  if (static_cast<int64_t>(ids->size()) > max_ids)
    return send_error(res, invalid_request("tokens", std::to_string(ids->size()) + " ids; the limit is " +
                                                         std::to_string(max_ids)));
  const std::string text = s->engine->tokenizer().decode(*ids, /*remove_special=*/false);
  // "content" as llama.cpp's server answers, "prompt" as vLLM's: the same text.
  res.set_content(dump(Json{{"content", text}, {"prompt", text}}), "application/json");
}

// POST /v1/routing_key: a generation request's body (completions or chat, told apart by
// "messages") -> {"routing_key", "source"}: what X-Routing-Key would say, without generating.
void HttpServer::Impl::handle_routing_key(const HttpRequest& req, HttpResponse& res) const {
  const ServingState* s = ready();
  if (!s) return send_error(res, loading_error());
  const bool chat = req.body.find("\"messages\"") != std::string::npos;
  auto parsed = parse_generation_request(req.body, chat ? Endpoint::kChatCompletions : Endpoint::kCompletions, s->limits);
  if (!parsed.ok()) return send_error(res, api_error_from_status(parsed.status()));
  std::vector<int32_t> ids;
  const std::string session = req.header_value("X-Session-Id");
  if (session.empty() && parsed->user.empty() && parsed->params.cache_salt.empty()) {
    if (chat) {
      auto r = chat_prompt_ids(*s, parsed->messages);
      if (!r.ok()) return send_error(res, api_error_from_status(r.status()));
      ids = std::move(r).value();
    } else if (parsed->prompt_is_ids) {
      ids = parsed->prompt_ids;
    } else {
      ids = s->engine->tokenizer().encode(parsed->prompt_text, /*add_special=*/true, /*parse_special=*/true);
    }
  }
  const std::string key = routing_key(session, parsed->user, parsed->params.cache_salt, ids);
  res.set_header("X-Routing-Key", key);
  res.set_content(dump(Json{{"routing_key", key}, {"source", key.substr(0, key.find('-'))}}), "application/json");
}

bool serves_model(const ServingState& state, std::string_view name) {
  return std::find(state.model_names.begin(), state.model_names.end(), name) != state.model_names.end();
}

ApiError model_not_found(const ServingState& state, std::string_view name) {
  return ApiError{404,
                  "the model '" + std::string(name.substr(0, 256)) + "' does not exist (this server serves '" +
                      state.model_name + "')",
                  "invalid_request_error", "model", "model_not_found"};
}

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

HttpServer::~HttpServer() { stop(); }

Result<std::unique_ptr<HttpServer>> HttpServer::start(const ServerConfig& config) {
  auto impl = std::make_unique<Impl>();
  impl->config = config;
  Impl& s = *impl;
  for (const std::string& h : config.allowed_hosts) {
    if (h == "*") s.any_host = true;
    else s.allowed_hosts.push_back(host_of(h));
  }
  if (config.host != "0.0.0.0" && config.host != "::" && !config.host.empty())
    s.allowed_hosts.push_back(host_of(config.host));
  auto cors = CorsPolicy::parse(config.cors_origins);
  if (!cors.ok()) return cors.status();
  s.cors = std::move(cors).value();
  TransportConfig t;
  t.host = config.host;
  t.port = config.port;
  t.n_workers = config.n_http_threads > 0 ? config.n_http_threads : 64;
  t.max_queued_jobs = std::max(256, 4 * t.n_workers);
  t.max_connections = config.max_connections;
  t.max_connections_per_client = config.max_connections_per_client;
  t.request_timeout_ms = config.request_timeout_ms;
  t.keep_alive_timeout_ms = config.keep_alive_timeout_ms;
  t.write_timeout_ms = config.write_timeout_ms;
  t.limits.max_body_bytes = config.max_body_bytes;
  auto transport = HttpTransport::start(t, s.callbacks());
  if (!transport.ok()) return transport.status();
  s.transport = std::move(transport).value();
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

int HttpServer::port() const { return impl_->transport->port(); }

void HttpServer::attach_engine(std::unique_ptr<engine::AsyncEngine> engine) {
  std::lock_guard<std::mutex> lock(impl_->lifecycle_mu);
  LUMEN_CHECK_MSG(!impl_->state_owner, "attach_engine called twice");
  if (impl_->stopped) return;  // shutting down: the engine is dropped here
  auto st = std::make_unique<ServingState>();
  const tok::Tokenizer& tk = engine->tokenizer();
  std::string source = impl_->config.chat_template.empty() ? tk.chat_template() : impl_->config.chat_template;
  if (!source.empty()) {
    auto t = tok::ChatTemplate::parse(source);
    if (t.ok()) st->chat_template = std::move(t).value();
    else LUMEN_LOG_WARN("server: the model's chat template does not parse (%s); using ChatML", t.message().c_str());
    if (!t.ok()) source.clear();
  }
  if (source.empty()) {
    auto t = tok::ChatTemplate::parse(kChatMlTemplate);
    LUMEN_CHECK_MSG(t.ok(), "the built-in ChatML template must parse");
    st->chat_template = std::move(t).value();
  }
  st->template_tools = template_tools(source, st->chat_template);  // "" (ChatML): no tool support of its own
  // The markers the vocabulary has as single control tokens (empty without their special
  // text): the output keeps them where a parser needs them.
  auto control_tokens = [&](const std::vector<std::string_view>& markers) {
    std::vector<int32_t> out;
    for (std::string_view marker : markers) {
      const std::vector<int32_t> ids = tk.encode(marker, /*add_special=*/false, /*parse_special=*/true);
      if (ids.size() == 1 && tk.token_to_piece(ids[0], /*special=*/false).empty()) out.push_back(ids[0]);
    }
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
  };
  st->tool_markers = control_tokens(tool_format_markers(st->template_tools.format));
  using Reasoning = ServerConfig::ReasoningFormat;
  const Reasoning rf = impl_->config.reasoning_format;
  st->reasoning = rf == Reasoning::kDeepseek || (rf == Reasoning::kAuto && template_thinks(source));
  st->reasoning_tags = reasoning_tags(source);
  st->reasoning_markers = control_tokens({st->reasoning_tags.open, st->reasoning_tags.close});
  st->bos_text = tk.bos_id() >= 0 ? std::string(tk.token_text(tk.bos_id())) : "";
  st->eos_text = tk.eos_id() >= 0 ? std::string(tk.token_text(tk.eos_id())) : "";
  ParserLimits& l = st->limits;
  l.max_body_bytes = impl_->config.max_body_bytes;
  l.n_vocab = std::min(tk.n_vocab(), engine->hparams().n_vocab);
  l.n_ctx = engine->config().n_ctx;
  l.max_n = engine->config().max_seqs;
  l.max_messages = impl_->config.max_messages;
  l.max_stop = impl_->config.max_stop;
  l.max_logprobs = impl_->config.max_logprobs;
  st->model_name = impl_->config.model_alias.empty() ? engine->model_id() : impl_->config.model_alias;
  // Requests may name the model by the served name, its general.name (or directory name,
  // engine->model_id()), or its file name with and without .gguf.
  const std::string file_name = base_name(engine->model_path());
  for (std::string name : {st->model_name, engine->model_id(), file_name,
                           file_name.ends_with(".gguf") ? file_name.substr(0, file_name.size() - 5) : file_name})
    if (!name.empty() && std::find(st->model_names.begin(), st->model_names.end(), name) == st->model_names.end())
      st->model_names.push_back(std::move(name));
  if (impl_->config.embeddings) {
    auto pooling = impl_->config.pooling != engine::Pooling::kNone ? Result<engine::Pooling>(impl_->config.pooling)
                                                                   : engine::model_pooling(engine->hparams());
    if (!engine->config().enable_embeddings)
      LUMEN_LOG_WARN("server: embeddings asked for, but the engine was created without them: /v1/embeddings is off");
    else if (!pooling.ok())
      LUMEN_LOG_WARN("server: /v1/embeddings is off: %s", pooling.message().c_str());
    else
      st->embed_pooling = *pooling;
  }
  st->grammars = std::make_unique<GrammarCache>(grammar::TokenTable::build(tk, engine->hparams().n_vocab), 64);
  st->created_s = std::chrono::duration_cast<std::chrono::seconds>(
                      std::chrono::system_clock::now().time_since_epoch()).count();
  st->engine = std::move(engine);
  impl_->state_owner = std::move(st);
  impl_->state.store(impl_->state_owner.get(), std::memory_order_release);
}

engine::AsyncEngine* HttpServer::engine() const {
  const ServingState* s = impl_->ready();
  return s ? s->engine.get() : nullptr;
}

bool HttpServer::draining() const { return impl_->draining.load(); }

bool HttpServer::drain(std::chrono::milliseconds timeout) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point t_end = Clock::now() + timeout;
  // The last part of the timeout is kept for ending what is still running: streams get
  // an error event and [DONE], whole responses a 503, and the bytes reach the clients.
  const auto grace = std::min<std::chrono::milliseconds>(std::chrono::milliseconds(2000), timeout / 4);
  impl_->draining.store(true);  // readiness says 503 from now on, before anything closes
  impl_->transport->begin_drain();
  bool all_done = impl_->transport->wait_idle_until(t_end - grace);
  if (!all_done) {
    LUMEN_LOG_WARN("server: drain deadline: ending %lld request(s) still running",
                   static_cast<long long>(impl_->transport->stats().n_active));
    impl_->stopping.store(true);
    impl_->transport->wait_idle_until(t_end);
  }
  stop();
  return all_done;
}

void HttpServer::stop() {
  {
    std::lock_guard<std::mutex> lock(impl_->lifecycle_mu);
    if (impl_->stopped) return;
    impl_->stopped = true;
  }
  // Handlers see `stopping` within idle_poll_ms and end their requests (an error event or a
  // 503 for their clients); then the transport closes the connections and joins its threads.
  impl_->stopping.store(true);
  impl_->draining.store(true);
  impl_->transport->begin_drain();
  impl_->transport->wait_idle_until(std::chrono::steady_clock::now() +
                                    std::chrono::milliseconds(std::max(200, 10 * impl_->config.idle_poll_ms)));
  impl_->transport->stop();
  impl_->state.store(nullptr, std::memory_order_release);
  impl_->state_owner.reset();  // stops the engine thread
}

}  // namespace lumen::server
