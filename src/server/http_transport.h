// The HTTP/1.1 transport: one epoll I/O thread owns every socket; a pool of worker threads
// runs the handlers that may block (generation, tokenize). Handlers see HttpRequest and
// HttpResponse only (http_message.h); this is the server's one plug point for the wire.
//
//   I/O thread (epoll, non-blocking sockets)           worker threads (n_workers)
//   accept -> limits (total, per client address)
//   read -> HttpRequestParser (deadline for head+body)
//   complete request --- runs_inline? -> handle here (cheap routes: health, metrics)
//                    \-- else job queue (bounded) -----> handle(req, res) -> head + body
//   write <------------- Exchange::pending (mutex) <---- or a stream: StreamWriter::write,
//   idle keep-alive: an fd in epoll, no thread              which waits while the client's
//   hang-up (EPOLLRDHUP) -> ClientLink::gone                unsent bytes are over the mark
//
// What a connection costs: a slow or idle client holds a file descriptor and a few hundred
// bytes, never a thread; only a request being served holds a worker. Every phase has a
// deadline: reading a request (head and body as a whole), an idle keep-alive connection,
// and writing (no progress). Concurrency lives here and in the engine's queues (STYLE 18):
// the I/O thread alone touches connections; a worker touches only its Exchange (mutex).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "base/status.h"
#include "server/http_message.h"
#include "server/http_parser.h"

namespace lumen::server {

struct TransportConfig {
  std::string host = "127.0.0.1";
  int port = 8080;                          // 0: any free port (read it back with port())
  int32_t n_workers = 16;                   // threads running blocking handlers
  int32_t max_queued_jobs = 256;            // requests waiting for a worker; then 503
  int32_t max_connections = 1024;           // open at once; then the longest-idle goes, else 503
  int32_t max_connections_per_client = 0;   // per remote address; 0: no limit; then 429
  int32_t request_timeout_ms = 30000;       // a request's head and body, from its first byte
  int32_t keep_alive_timeout_ms = 15000;    // an idle connection (no byte of a next request)
  int32_t write_timeout_ms = 30000;         // a response with no write progress for this long
  int64_t stream_high_water_bytes = 256 << 10;  // a stream's writer waits above this
  HttpLimits limits;
};

// Counters for /metrics (monotonic except n_open and n_active).
struct TransportStats {
  int64_t n_open = 0;                  // connections open now
  int64_t n_active = 0;                // requests being served (queued or on a worker)
  int64_t n_accepted = 0;
  int64_t n_refused_capacity = 0;      // over max_connections with no idle one to close
  int64_t n_refused_per_client = 0;    // over max_connections_per_client
  int64_t n_evicted_idle = 0;          // idle keep-alive connections closed to make room
  int64_t n_request_timeouts = 0;      // head + body not in within request_timeout_ms
  int64_t n_write_timeouts = 0;
  int64_t n_bad_requests = 0;          // refused by the parser (4xx / 5xx)
};

struct HttpCallbacks {
  // Serves one request: fills `res` (a body, or a stream written after the head).
  std::function<void(const HttpRequest& req, HttpResponse& res)> handle;
  // Requests whose handler never blocks run on the I/O thread: they answer even when every
  // worker is busy (health checks, metrics). Called on the I/O thread.
  std::function<bool(const HttpRequest& req)> runs_inline;
  // The response to a request the transport refuses itself (bad HTTP, limits, a full job
  // queue, draining): fills `res` for `status` and a message naming what is wrong.
  std::function<void(int status, const std::string& message, HttpResponse& res)> error_response;
  // Sees every response just before its head is written (metrics, common headers). Called
  // on the thread that writes the head. Optional.
  std::function<void(HttpResponse& res)> before_send;
};

class HttpTransport {
 public:
  // Binds (no SO_REUSEPORT: a taken port is an error naming it) and starts the threads.
  static Result<std::unique_ptr<HttpTransport>> start(const TransportConfig& config, HttpCallbacks callbacks);
  ~HttpTransport();  // stop()s
  HttpTransport(const HttpTransport&) = delete;
  HttpTransport& operator=(const HttpTransport&) = delete;

  int port() const;
  // Draining: no new work. Requests already queued or being served go on; idle
  // connections close; inline requests still run (health says it is draining, so the
  // listener stays open for balancers to see that); any other request that arrives from
  // now on gets 503 + Retry-After; every response closes its connection.
  void begin_drain();
  // Blocks until no request is queued or being served, or the deadline; true if none is.
  bool wait_idle_until(std::chrono::steady_clock::time_point deadline);
  // Every connection and the listening socket are closed (handlers see their client gone
  // and return), then the threads are joined. Idempotent.
  void stop();
  TransportStats stats() const;

  struct Impl;

 private:
  explicit HttpTransport(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The bytes of a response head (status line, headers, Content-Length or chunked framing,
// Connection). `content_length` < 0: the body is chunked (HTTP/1.1) or runs to the close.
std::string http_response_head(const HttpResponse& res, int64_t content_length, bool chunked, bool keep_alive);

}  // namespace lumen::server
