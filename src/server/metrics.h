// Server-side metrics for /metrics, in the Prometheus text exposition format (0.0.4).
//
// Latency histograms are observed by HTTP handler threads as their requests finish; each
// Histogram has its own mutex (the only shared mutable state of the HTTP side besides the
// engine's queues, STYLE 18). Counters are atomics. Engine counters and gauges (tokens,
// preemptions, running / waiting requests, KV blocks) come from AsyncEngine::metrics() at
// scrape time, so they are never double-counted here.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "engine/engine.h"

namespace lumen::server {

class Histogram {
 public:
  // `bounds`: ascending bucket upper bounds (the +Inf bucket is implicit).
  explicit Histogram(std::vector<double> bounds);
  void observe(double value);
  // Appends # HELP / # TYPE and the _bucket / _sum / _count lines.
  void render(std::string* out, std::string_view name, std::string_view help) const;
  uint64_t count() const;

 private:
  const std::vector<double> bounds_;
  mutable std::mutex mu_;            // guards the three fields below
  std::vector<uint64_t> n_in_bucket_;  // [bounds.size() + 1], not cumulative
  double sum_ = 0;
  uint64_t n_ = 0;
};

// How requests ended, for lumen_requests_total{outcome=...}.
enum class Outcome : uint8_t { kStop, kLength, kCancelled, kError, kRejected, kCount };

class ServerMetrics {
 public:
  ServerMetrics();

  Histogram ttft_s;        // arrival -> first generated token
  Histogram itl_s;         // between consecutive tokens of one completion
  Histogram e2e_s;         // arrival -> last token
  Histogram queue_s;       // arrival -> first scheduled

  void count_http(int status);
  void count_outcome(Outcome outcome);

  // The whole exposition. `engine` is null while the model loads.
  std::string render(const engine::EngineMetrics* engine) const;

 private:
  static constexpr std::array<int, 9> kHttpCodes = {200, 400, 401, 404, 413, 429, 500, 503, 0};  // 0: other
  std::array<std::atomic<uint64_t>, kHttpCodes.size()> n_http_{};
  std::array<std::atomic<uint64_t>, static_cast<size_t>(Outcome::kCount)> n_outcome_{};
};

}  // namespace lumen::server
