// lumen's OpenAI-compatible HTTP server (its own epoll transport underneath, http_transport.h).
//
//   POST /v1/completions       POST /v1/chat/completions     (streaming SSE or one JSON)
//   GET  /v1/models, /v1/models/{id}                        GET  /health (503 while loading or draining)
//   GET  /health/live, /livez  GET  /health/ready, /readyz   (liveness / readiness)
//   POST /tokenize             POST /detokenize              GET  /metrics (Prometheus)
//   POST /v1/routing_key       (the key a balancer routes on, without generating)
//   POST /v1/embeddings        (with ServerConfig::embeddings)
//
// The server starts listening before the model is loaded, so /health can say "loading";
// attach_engine() makes it ready. It talks to the engine only through AsyncEngine's public
// API (STYLE: server -> engine public API only). Threads: the transport's I/O thread
// answers health, models and metrics itself; its workers run the other handlers, and a
// handler blocks on its RequestStream while its request runs. The only state handlers
// share is the engine (thread-safe by contract) and the metrics (own mutexes).
// Every route but the health checks needs `Authorization: Bearer KEY` when an API key is
// set; without a key, Host and Origin must name an allowed host (loopback by default).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "engine/async_engine.h"

namespace lumen::server {

struct ServerConfig {
  std::string host = "127.0.0.1";
  int port = 8080;                  // 0: any free port (read it back with port())
  std::string api_key;              // empty: no authentication
  std::string model_alias;          // served model name; empty: the engine's model id
  std::string chat_template;        // Jinja source used instead of the model's ("": the model's)
  // <think>...</think> -> reasoning_content (reasoning.h): kAuto when the chat template is a
  // thinking one, kDeepseek always, kNone never (llama-server's --reasoning-format).
  enum class ReasoningFormat : uint8_t { kAuto, kDeepseek, kNone };
  ReasoningFormat reasoning_format = ReasoningFormat::kAuto;
  int32_t n_http_threads = 0;       // 0: enough for every running and queued request + 8
  int64_t max_body_bytes = 4 << 20; // larger bodies get 413
  int32_t max_messages = 1024;
  int32_t max_stop = 16;
  int32_t max_logprobs = 20;
  int32_t idle_poll_ms = 50;        // how often a waiting handler checks its client is there
  bool log_requests = true;         // one info line per request: lengths and timings, never text
  std::string replica_id;           // sent back as X-Replica-Id on every response ("" : none)
  // Without an API key, requests must name one of these in Host (and Origin, if sent):
  // loopback names always, plus these ("*": any; the listen address is added when specific).
  std::vector<std::string> allowed_hosts;
  // CORS (cors.h): origins whose pages may call the API from a browser ("*": any; each
  // value may be a comma-separated list). Empty: no CORS headers, preflights get 405.
  std::vector<std::string> cors_origins;
  // POST /v1/embeddings (the engine must be created with enable_embeddings). pooling
  // kNone: the model's own (engine::model_pooling).
  bool embeddings = false;
  engine::Pooling pooling = engine::Pooling::kNone;
  // Connection handling (the transport's).
  int32_t max_connections = 1024;          // open at once
  int32_t max_connections_per_client = 256; // per remote address (0: no limit)
  int32_t request_timeout_ms = 30000;      // a request's head and body as a whole
  int32_t keep_alive_timeout_ms = 15000;   // an idle connection
  int32_t write_timeout_ms = 30000;        // a response that makes no write progress
};

class HttpServer {
 public:
  // Binds and starts serving (health says "loading" until attach_engine). Errors: the
  // address cannot be bound.
  static Result<std::unique_ptr<HttpServer>> start(const ServerConfig& config);
  ~HttpServer();  // stop()s
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  int port() const;
  // Hands the loaded engine to the server; from now on it serves requests. Call once.
  void attach_engine(std::unique_ptr<engine::AsyncEngine> engine);
  // The engine, once attached (tests read its metrics); null before.
  engine::AsyncEngine* engine() const;
  // Graceful drain: readiness turns false (the listener stays open so balancers see it),
  // idle connections close, requests that arrive get 503 + Retry-After and a closed
  // connection, requests already accepted run on.
  // Blocks until they are done or `timeout` is nearly over; then ends the rest as stop()
  // does (streams get an error event and [DONE]) and returns whether all had finished.
  bool drain(std::chrono::milliseconds timeout);
  bool draining() const;
  // Ends every running request (clients get an error event / 503), stops listening and
  // joins the worker threads. Idempotent.
  void stop();

 private:
  struct Impl;
  explicit HttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace lumen::server
