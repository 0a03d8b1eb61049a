// The cpp-httplib adapter: server lifecycle, routes, authentication, the small endpoints.
// httplib is confined to this file and generation_handler.cc; no exception leaves them
// (httplib's exception handler turns one into a 500).
#include <httplib.h>

#include <sys/socket.h>

#include <chrono>
#include <thread>

#include <nlohmann/json.hpp>

#include "base/check.h"
#include "base/log.h"
#include "server/serving_state.h"

namespace lumen::server {
namespace {

using Json = nlohmann::json;

// Used when the model ships no chat template, as llama.cpp and `lumen chat` do.
// TODO(integrator): share one definition with cli/chat_cmd.cc (e.g. in tokenizer/chat_template.h).
constexpr const char* kChatMlTemplate =
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + "
    "'<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

std::string dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

// Compares without an early exit, so the time taken says nothing about the key.
bool same_secret(const std::string& a, const std::string& b) {
  unsigned diff = a.size() != b.size();
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned>(a[i] ^ (i < b.size() ? b[i] : 0));
  return diff == 0;
}

ApiError loading_error() { return ApiError{503, "the model is loading", "server_error", "", "model_loading"}; }

// httplib 0.11 listens with a backlog of 5: a burst of more simultaneous connects (16
// clients starting together) overflows it, and the kernel drops their SYNs, which clients
// retry only after a second. The listening socket is a protected member, so a subclass can
// raise the backlog after binding (listen() on a listening socket updates it; the kernel
// caps it at net.core.somaxconn).
class Server : public httplib::Server {
 public:
  bool raise_backlog(int backlog) { return ::listen(svr_sock_, backlog) == 0; }
};

constexpr int kListenBacklog = 1024;

}  // namespace

struct HttpServer::Impl {
  ServerConfig config;
  Server svr;
  mutable ServerMetrics metrics;  // internally synchronized
  std::atomic<bool> stopping{false};
  // Written once by attach_engine before `state` publishes it; read-only afterwards.
  std::unique_ptr<ServingState> state_owner;
  std::atomic<const ServingState*> state{nullptr};
  std::thread listener;
  int port = 0;
  std::mutex lifecycle_mu;  // attach_engine vs stop
  bool stopped = false;

  HandlerEnv env() const { return HandlerEnv{&config, &metrics, &stopping}; }
  const ServingState* ready() const { return state.load(std::memory_order_acquire); }

  void routes();
  void handle_health(httplib::Response& res) const;
  void handle_models(httplib::Response& res) const;
  void handle_metrics(httplib::Response& res) const;
  void handle_tokenize(const httplib::Request& req, httplib::Response& res) const;
  void handle_detokenize(const httplib::Request& req, httplib::Response& res) const;
};

void HttpServer::Impl::routes() {
  svr.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (config.api_key.empty() || req.path == "/health") return httplib::Server::HandlerResponse::Unhandled;
    const std::string auth = req.get_header_value("Authorization");
    constexpr std::string_view kBearer = "Bearer ";
    if (auth.rfind(kBearer, 0) == 0 && same_secret(auth.substr(kBearer.size()), config.api_key))
      return httplib::Server::HandlerResponse::Unhandled;
    send_error(res, ApiError{401, "invalid or missing API key (send Authorization: Bearer KEY)",
                             "authentication_error", "", "invalid_api_key"});
    return httplib::Server::HandlerResponse::Handled;
  });
  // Errors httplib produces itself (404 for unknown routes, 413, 400 for bad HTTP) get an
  // OpenAI error body too; responses that already have one keep it.
  httplib::Server::HandlerWithResponse on_error = [](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    ApiError e;
    e.http_status = res.status;
    if (res.status == 404) {
      e.type = "not_found_error";
      e.message = "no route " + req.method + " " + req.path.substr(0, 256);
    } else if (res.status == 413) {
      e.message = "the request body is over the size limit";
    } else {
      e.message = "HTTP error " + std::to_string(res.status);
      if (res.status >= 500) e.type = "server_error";
    }
    send_error(res, e);
    return httplib::Server::HandlerResponse::Handled;
  };
  svr.set_error_handler(std::move(on_error));
  svr.set_exception_handler([](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
    // The exception's text is not logged: a library may quote the request in it (STYLE 19).
    const char* kind = "unknown exception";
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::bad_alloc&) {
      kind = "std::bad_alloc";
    } catch (const std::exception&) {
      kind = "std::exception";
    } catch (...) {
    }
    LUMEN_LOG_ERROR("server: %s in the handler of %s (%zu-byte body)", kind, req.path.substr(0, 64).c_str(),
                    req.body.size());
    send_error(res, ApiError{500, "internal error", "server_error", "", ""});
  });
  svr.set_logger([this](const httplib::Request&, const httplib::Response& res) { metrics.count_http(res.status); });

  svr.Get("/health", [this](const httplib::Request&, httplib::Response& res) { handle_health(res); });
  svr.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) { handle_models(res); });
  svr.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) { handle_metrics(res); });
  auto generation = [this](Endpoint endpoint) {
    return [this, endpoint](const httplib::Request& req, httplib::Response& res) {
      const ServingState* s = ready();
      if (!s) return send_error(res, loading_error());
      handle_generation(*s, env(), endpoint, req, res);
    };
  };
  svr.Post("/v1/completions", generation(Endpoint::kCompletions));
  svr.Post("/v1/chat/completions", generation(Endpoint::kChatCompletions));
  svr.Post("/tokenize", [this](const httplib::Request& req, httplib::Response& res) { handle_tokenize(req, res); });
  svr.Post("/detokenize",
           [this](const httplib::Request& req, httplib::Response& res) { handle_detokenize(req, res); });
}

void HttpServer::Impl::handle_health(httplib::Response& res) const {
  if (!ready()) {
    res.status = 503;
    res.set_header("Retry-After", "1");
    res.set_content(R"({"status":"loading"})", "application/json");
    return;
  }
  res.set_content(R"({"status":"ok"})", "application/json");
}

void HttpServer::Impl::handle_models(httplib::Response& res) const {
  const ServingState* s = ready();
  if (!s) return send_error(res, loading_error());
  Json model = {{"id", s->model_name},
                {"object", "model"},
                {"created", s->created_s},
                {"owned_by", "lumen"},
                {"max_model_len", s->limits.n_ctx}};
  res.set_content(dump(Json{{"object", "list"}, {"data", Json::array({model})}}), "application/json");
}

void HttpServer::Impl::handle_metrics(httplib::Response& res) const {
  const ServingState* s = ready();
  std::string body;
  if (s) {
    const engine::EngineMetrics m = s->engine->metrics();
    body = metrics.render(&m);
  } else {
    body = metrics.render(nullptr);
  }
  res.set_content(body, "text/plain; version=0.0.4; charset=utf-8");
}

void HttpServer::Impl::handle_tokenize(const httplib::Request& req, httplib::Response& res) const {
  const ServingState* s = ready();
  if (!s) return send_error(res, loading_error());
  auto parsed = parse_tokenize_request(req.body, s->limits);
  if (!parsed.ok()) return send_error(res, api_error_from_status(parsed.status()));
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

void HttpServer::Impl::handle_detokenize(const httplib::Request& req, httplib::Response& res) const {
  const ServingState* s = ready();
  if (!s) return send_error(res, loading_error());
  auto ids = parse_detokenize_request(req.body, s->limits);
  if (!ids.ok()) return send_error(res, api_error_from_status(ids.status()));
  const std::string text = s->engine->tokenizer().decode(*ids, /*remove_special=*/false);
  // "content" as llama.cpp's server answers, "prompt" as vLLM's: the same text.
  res.set_content(dump(Json{{"content", text}, {"prompt", text}}), "application/json");
}

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

HttpServer::~HttpServer() { stop(); }

Result<std::unique_ptr<HttpServer>> HttpServer::start(const ServerConfig& config) {
  auto impl = std::make_unique<Impl>();
  impl->config = config;
  Impl& s = *impl;
  const size_t n_threads = config.n_http_threads > 0 ? static_cast<size_t>(config.n_http_threads) : 64;
  s.svr.new_task_queue = [n_threads] { return new httplib::ThreadPool(n_threads); };
  s.svr.set_payload_max_length(static_cast<size_t>(config.max_body_bytes));
  s.svr.set_read_timeout(30, 0);   // a client that stalls mid-request is dropped
  s.svr.set_write_timeout(30, 0);
  s.svr.set_keep_alive_timeout(5);
  s.svr.set_tcp_nodelay(true);     // SSE chunks go out as tokens come
  s.routes();
  if (config.port == 0) {
    s.port = s.svr.bind_to_any_port(config.host);
    if (s.port <= 0) return error("--host " + config.host + ": cannot bind any port on this address");
  } else {
    if (!s.svr.bind_to_port(config.host, config.port))
      return error("--host/--port: cannot bind " + config.host + ":" + std::to_string(config.port) +
                   " (in use, or not an address of this machine)");
    s.port = config.port;
  }
  if (!s.svr.raise_backlog(kListenBacklog)) LUMEN_LOG_WARN("server: could not raise the listen backlog");
  s.listener = std::thread([&s] { s.svr.listen_after_bind(); });
  // stop() right after start() must find the accept loop running, or it would not end it.
  for (int i = 0; i < 5000 && !s.svr.is_running(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

int HttpServer::port() const { return impl_->port; }

void HttpServer::attach_engine(std::unique_ptr<engine::AsyncEngine> engine) {
  std::lock_guard<std::mutex> lock(impl_->lifecycle_mu);
  LUMEN_CHECK_MSG(!impl_->state_owner, "attach_engine called twice");
  if (impl_->stopped) return;  // shutting down: the engine is dropped here
  auto st = std::make_unique<ServingState>();
  const tok::Tokenizer& tk = engine->tokenizer();
  std::string source = tk.chat_template();
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

void HttpServer::stop() {
  {
    std::lock_guard<std::mutex> lock(impl_->lifecycle_mu);
    if (impl_->stopped) return;
    impl_->stopped = true;
  }
  // Handlers see `stopping` within idle_poll_ms and end their requests; then httplib's
  // pool drains and the listener returns.
  impl_->stopping.store(true);
  impl_->svr.stop();
  if (impl_->listener.joinable()) impl_->listener.join();
  impl_->state.store(nullptr, std::memory_order_release);
  impl_->state_owner.reset();  // stops the engine thread
}

}  // namespace lumen::server
