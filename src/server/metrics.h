// Server-side metrics for /metrics, in the Prometheus text exposition format (0.0.4).
//
// Latency histograms are observed by HTTP handler threads as their requests finish; each
// Histogram has its own mutex (the only shared mutable state of the HTTP side besides the
// engine's queues, STYLE 18). Counters are atomics. Engine counters and gauges (tokens,
// preemptions, running / waiting requests, KV blocks) come from AsyncEngine::metrics() at
// scrape time, so they are never double-counted here.
//
// Names: lumen_* (lumen's own, documented in src/server/README.md) and, for what vLLM also
// exports, the same series under vLLM's v1 names (vllm:num_requests_running,
// vllm:kv_cache_usage_perc, ..., labelled model_name) so its dashboards and autoscaling
// rules carry over.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "engine/engine.h"
#include "server/http_transport.h"

namespace lumen::server {

class Histogram {
 public:
  // `bounds`: ascending bucket upper bounds (the +Inf bucket is implicit).
  explicit Histogram(std::vector<double> bounds);
  void observe(double value);
  // Appends # HELP / # TYPE and the _bucket / _sum / _count lines; `labels` (`k="v"`, already
  // escaped) go on every line.
  void render(std::string* out, std::string_view name, std::string_view help, std::string_view labels = "") const;
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

// What a scrape reports besides the engine's metrics.
struct ServingGauges {
  bool draining = false;
  std::string model_name;              // the label of the vllm: series
  const TransportStats* transport = nullptr;
};

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
  std::string render(const engine::EngineMetrics* engine, const ServingGauges& gauges = ServingGauges()) const;

 private:
  static constexpr std::array<int, 14> kHttpCodes = {200, 400, 401, 403, 404, 405, 408, 413, 429, 431, 500, 501, 503, 0};  // 0: other
  std::array<std::atomic<uint64_t>, kHttpCodes.size()> n_http_{};
  std::array<std::atomic<uint64_t>, static_cast<size_t>(Outcome::kCount)> n_outcome_{};
};

}  // namespace lumen::server
