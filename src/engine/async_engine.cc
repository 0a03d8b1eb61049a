#include "engine/async_engine.h"

#include <algorithm>

#include "base/log.h"

namespace lumen::engine {

bool RequestStream::wait_next(RequestEvent* out, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_for(lock, timeout, [&] { return !events_.empty(); })) return false;
  *out = std::move(events_.front());
  events_.pop_front();
  return true;
}

void RequestStream::cancel() {
  if (!finished()) owner_->request_cancel(id_);
}

bool RequestStream::finished() const {
  std::lock_guard<std::mutex> lock(mu_);
  return finished_;
}

void RequestStream::push(RequestEvent ev) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_) return;
    if (ev.request_finished) finished_ = true;
    events_.push_back(std::move(ev));
  }
  cv_.notify_all();
}

AsyncEngine::AsyncEngine(std::unique_ptr<Engine> engine, const AsyncEngineConfig& config)
    : engine_(std::move(engine)), config_(config) {
  const std::string& path = engine_->model().file().path();
  std::string id = path;
  while (id.size() > 1 && id.back() == '/') id.pop_back();
  if (const size_t slash = id.find_last_of('/'); slash != std::string::npos) id = id.substr(slash + 1);
  if (auto name = engine_->model().file().get_string("general.name"); name && !name->empty())
    id = std::string(*name);
  model_id_ = id;
  metrics_ = engine_->metrics();
}

std::unique_ptr<AsyncEngine> AsyncEngine::start(std::unique_ptr<Engine> engine,
                                                const AsyncEngineConfig& config) {
  std::unique_ptr<AsyncEngine> a(new AsyncEngine(std::move(engine), config));
  a->thread_ = std::thread([p = a.get()] { p->loop(); });
  return a;
}

AsyncEngine::~AsyncEngine() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  // Whatever is still pending ends as cancelled, so no consumer waits forever.
  for (auto& [id, stream] : streams_) {
    RequestEvent ev;
    ev.request_id = id;
    ev.finished = ev.request_finished = true;
    ev.finish_reason = FinishReason::kCancelled;
    stream->push(std::move(ev));
  }
  for (auto& [req, stream] : inbox_) {
    RequestEvent ev;
    ev.request_id = stream->id();
    ev.finished = ev.request_finished = true;
    ev.finish_reason = FinishReason::kCancelled;
    stream->push(std::move(ev));
  }
}

Result<std::shared_ptr<RequestStream>> AsyncEngine::submit(Request request) {
  LUMEN_TRY(engine_->validate(request));
  std::shared_ptr<RequestStream> stream;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return error("engine is shutting down", StatusCode::kUnavailable);
    const int64_t n_queued = static_cast<int64_t>(inbox_.size()) + n_engine_waiting_;
    if (n_queued >= config_.max_queued_requests)
      return error("server is busy: " + std::to_string(n_queued) + " requests are queued (limit " +
                       std::to_string(config_.max_queued_requests) + ")",
                   StatusCode::kUnavailable);
    stream.reset(new RequestStream(this, next_id_++));
    inbox_.emplace_back(std::move(request), stream);
  }
  cv_.notify_all();
  return stream;
}

void AsyncEngine::request_cancel(RequestId id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    cancel_inbox_.push_back(id);
  }
  cv_.notify_all();
}

EngineMetrics AsyncEngine::metrics() const {
  std::lock_guard<std::mutex> lock(mu_);
  EngineMetrics m = metrics_;
  m.n_waiting += static_cast<int32_t>(inbox_.size());
  return m;
}

void AsyncEngine::wait_idle() {
  std::unique_lock<std::mutex> lock(mu_);
  idle_cv_.wait(lock, [&] { return stop_ || (inbox_.empty() && !busy_ && streams_.empty()); });
}

void AsyncEngine::loop() {
  for (;;) {
    std::deque<std::pair<Request, std::shared_ptr<RequestStream>>> new_requests;
    std::vector<RequestId> cancels;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !inbox_.empty() || !cancel_inbox_.empty() || engine_->has_work(); });
      if (stop_) return;
      new_requests.swap(inbox_);
      cancels.swap(cancel_inbox_);
      busy_ = true;
      for (auto& [req, stream] : new_requests) streams_[stream->id()] = stream;
    }
    // Engine calls happen outside the lock: handler threads never wait on a forward step.
    for (auto& [req, stream] : new_requests) {
      auto id = engine_->add_request(std::move(req), stream->id());
      if (!id.ok()) {  // validated at submit, so only a changed state can get here
        RequestEvent ev;
        ev.request_id = stream->id();
        ev.finished = ev.request_finished = true;
        ev.finish_reason = FinishReason::kError;
        ev.error = id.message();
        stream->push(std::move(ev));
        std::lock_guard<std::mutex> lock(mu_);
        streams_.erase(stream->id());
      }
    }
    for (RequestId id : cancels) {
      engine_->cancel(id);
      std::shared_ptr<RequestStream> stream;
      {
        std::lock_guard<std::mutex> lock(mu_);
        auto it = streams_.find(id);
        if (it == streams_.end()) continue;
        stream = it->second;
        streams_.erase(it);
      }
      RequestEvent ev;
      ev.request_id = id;
      ev.finished = ev.request_finished = true;
      ev.finish_reason = FinishReason::kCancelled;
      stream->push(std::move(ev));
    }
    std::span<RequestEvent> events;
    if (engine_->has_work()) events = engine_->step();
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (RequestEvent& ev : events) {
        auto it = streams_.find(ev.request_id);
        if (it == streams_.end()) continue;  // cancelled meanwhile
        std::shared_ptr<RequestStream> stream = it->second;
        if (ev.request_finished) streams_.erase(it);
        stream->push(std::move(ev));
      }
      engine_->metrics(&metrics_);
      n_engine_waiting_ = metrics_.n_waiting;
      busy_ = false;
    }
    idle_cv_.notify_all();
  }
}

}  // namespace lumen::engine
