// AsyncEngine: the engine on its own thread, with queues in front of it. This is the one
// place on the engine side where threads meet (STYLE 18): HTTP handler threads submit
// requests and read their events through RequestStreams; the engine thread alone touches
// the Engine (scheduler, KV cache, model), which stays single-threaded by contract.
//
//   handler thread                          engine thread
//   submit(req) --> inbox (mutex) ------->  drain inbox -> Engine::add_request
//   stream->wait_next() <-- per-request  <-- Engine::step() events, routed by request id
//                           event queue
//   stream->cancel()  --> cancel inbox -->  Engine::cancel (blocks freed at once)
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "base/status.h"
#include "engine/engine.h"
#include "engine/request.h"

namespace lumen::engine {

struct AsyncEngineConfig {
  int32_t max_queued_requests = 256;  // waiting (not yet running) requests at most; then 503
};

class AsyncEngine;

// The consumer side of one request. Thread-safe.
class RequestStream {
 public:
  RequestId id() const { return id_; }
  // Blocks until the next event or the timeout; false on timeout. After the event with
  // request_finished == true, no more events come.
  bool wait_next(RequestEvent* out, std::chrono::milliseconds timeout);
  // Asks the engine to stop the request and free its KV blocks (idempotent, non-blocking).
  void cancel();
  bool finished() const;

 private:
  friend class AsyncEngine;
  RequestStream(AsyncEngine* owner, RequestId id) : owner_(owner), id_(id) {}
  void push(RequestEvent ev);

  AsyncEngine* owner_;
  RequestId id_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<RequestEvent> events_;
  bool finished_ = false;
};

class AsyncEngine {
 public:
  // Starts the engine thread.
  static std::unique_ptr<AsyncEngine> start(std::unique_ptr<Engine> engine, const AsyncEngineConfig& config);
  ~AsyncEngine();  // stops the thread; pending streams get a cancelled final event
  AsyncEngine(const AsyncEngine&) = delete;
  AsyncEngine& operator=(const AsyncEngine&) = delete;

  // Validates and queues a request. Errors: kInvalidArgument naming the field, or
  // kUnavailable when the queue is full (HTTP 503 + Retry-After).
  Result<std::shared_ptr<RequestStream>> submit(Request request);

  // Immutable after start: safe from any thread.
  const tok::Tokenizer& tokenizer() const { return engine_->tokenizer(); }
  const model::HParams& hparams() const { return engine_->hparams(); }
  const EngineConfig& config() const { return engine_->config(); }
  const std::string& model_id() const { return model_id_; }
  const std::string& model_path() const { return engine_->model().file().path(); }

  EngineMetrics metrics() const;
  // Blocks until the engine has no running or waiting requests (tests, shutdown).
  void wait_idle();

 private:
  friend class RequestStream;
  AsyncEngine(std::unique_ptr<Engine> engine, const AsyncEngineConfig& config);
  void request_cancel(RequestId id);
  void loop();

  std::unique_ptr<Engine> engine_;
  AsyncEngineConfig config_;
  std::string model_id_;

  mutable std::mutex mu_;                 // guards everything below
  std::condition_variable cv_;            // wakes the engine thread
  std::condition_variable idle_cv_;       // wakes wait_idle()
  std::deque<std::pair<Request, std::shared_ptr<RequestStream>>> inbox_;
  std::vector<RequestId> cancel_inbox_;
  std::map<RequestId, std::shared_ptr<RequestStream>> streams_;  // live requests
  EngineMetrics metrics_;
  int32_t n_engine_waiting_ = 0;          // waiting inside the engine (for the queue bound)
  bool busy_ = false;
  bool stop_ = false;
  RequestId next_id_ = 1;
  std::thread thread_;
};

}  // namespace lumen::engine
