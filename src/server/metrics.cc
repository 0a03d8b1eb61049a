#include "server/metrics.h"

#include <cinttypes>
#include <algorithm>
#include <cstdio>

namespace lumen::server {
namespace {

// Prometheus wants shortest round-trip floats; %.17g is round-trip, %g is enough for bounds.
std::string num(double x) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.10g", x);
  return buf;
}

void metric_header(std::string* out, std::string_view name, std::string_view help, std::string_view type) {
  *out += "# HELP ";
  *out += name;
  *out += ' ';
  *out += help;
  *out += "\n# TYPE ";
  *out += name;
  *out += ' ';
  *out += type;
  *out += '\n';
}

void scalar(std::string* out, std::string_view name, std::string_view help, std::string_view type,
            double value, std::string_view labels = "") {
  metric_header(out, name, help, type);
  *out += name;
  if (!labels.empty()) {
    *out += '{';
    *out += labels;
    *out += '}';
  }
  *out += ' ';
  *out += num(value);
  *out += '\n';
}

// A Prometheus label value: backslash, double quote and newline escaped.
std::string label_value(std::string_view v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

// Latency buckets in seconds, 1 ms .. 120 s (TTFT / e2e / queue time).
std::vector<double> latency_bounds() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0,
          2.5,   5.0,    7.5,   10.0, 20.0,  40.0, 80.0,  120.0};
}

// Inter-token latency buckets in seconds, 0.1 ms .. 2.5 s.
std::vector<double> itl_bounds() {
  return {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.025,
          0.03,   0.04,    0.05,   0.075, 0.1,    0.15,  0.2,    0.3,  0.5,   1.0,  2.5};
}

// The KV cache by layer group (kv/kv_manager.h): blocks and bytes per group, and what the
// live sequences hold. The group labels say which layers: window 0 is full attention.
void render_kv_groups(std::string* out, const engine::EngineMetrics& m) {
  auto labels = [&](size_t g) {
    return "{group=\"" + std::to_string(g) + "\",window=\"" + std::to_string(m.kv_groups[g].window) + "\"}";
  };
  auto per_group = [&](std::string_view name, std::string_view help, auto value) {
    metric_header(out, name, help, "gauge");
    for (size_t g = 0; g < m.kv_groups.size(); ++g)
      *out += std::string(name) + labels(g) + " " + num(static_cast<double>(value(m.kv_groups[g]))) + "\n";
  };
  per_group("lumen_kv_group_layers", "Layers whose K/V a KV group stores.",
            [](const kv::KvGroupUsage& u) { return u.n_slots; });
  per_group("lumen_kv_group_bytes_per_token", "Bytes of one token's K and V in a KV group (all its layers).",
            [](const kv::KvGroupUsage& u) { return u.block_bytes / std::max<size_t>(1, u.block_size); });
  per_group("lumen_kv_group_blocks_used", "Blocks of a KV group referenced by sequences.",
            [](const kv::KvGroupUsage& u) { return u.n_used; });
  per_group("lumen_kv_group_blocks_total", "Blocks in a KV group's pool.",
            [](const kv::KvGroupUsage& u) { return u.n_blocks; });
  per_group("lumen_kv_group_used_bytes", "Bytes of a KV group's blocks referenced by sequences.",
            [](const kv::KvGroupUsage& u) { return static_cast<double>(u.block_bytes) * u.n_used; });
  metric_header(out, "lumen_kv_sequence_bytes", "KV bytes a live sequence holds over all groups (max, mean).", "gauge");
  *out += "lumen_kv_sequence_bytes{stat=\"max\"} " + num(static_cast<double>(m.kv_seq_bytes_max)) + "\n";
  *out += "lumen_kv_sequence_bytes{stat=\"mean\"} " +
          num(m.n_kv_seqs > 0 ? static_cast<double>(m.kv_seq_bytes_sum) / m.n_kv_seqs : 0.0) + "\n";
}

constexpr const char* kOutcomeNames[] = {"stop", "length", "cancelled", "error", "rejected"};
static_assert(std::size(kOutcomeNames) == static_cast<size_t>(Outcome::kCount));

}  // namespace

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), n_in_bucket_(bounds_.size() + 1, 0) {}

void Histogram::observe(double value) {
  if (!(value >= 0)) value = 0;  // clock skew or NaN never makes a negative bucket
  size_t b = 0;
  while (b < bounds_.size() && value > bounds_[b]) ++b;
  std::lock_guard<std::mutex> lock(mu_);
  n_in_bucket_[b]++;
  sum_ += value;
  n_++;
}

uint64_t Histogram::count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return n_;
}

void Histogram::render(std::string* out, std::string_view name, std::string_view help, std::string_view labels) const {
  std::vector<uint64_t> n_in_bucket;
  double sum = 0;
  uint64_t n = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    n_in_bucket = n_in_bucket_;
    sum = sum_;
    n = n_;
  }
  metric_header(out, name, help, "histogram");
  uint64_t cumulative = 0;
  for (size_t b = 0; b <= bounds_.size(); ++b) {
    cumulative += n_in_bucket[b];
    *out += name;
    *out += "_bucket{le=\"";
    *out += b < bounds_.size() ? num(bounds_[b]) : "+Inf";
    *out += '"';
    if (!labels.empty()) *out += "," + std::string(labels);
    *out += "} " + std::to_string(cumulative) + "\n";
  }
  const std::string braced = labels.empty() ? "" : "{" + std::string(labels) + "}";
  *out += std::string(name) + "_sum" + braced + " " + num(sum) + "\n";
  *out += std::string(name) + "_count" + braced + " " + std::to_string(n) + "\n";
}

ServerMetrics::ServerMetrics()
    : ttft_s(latency_bounds()), itl_s(itl_bounds()), e2e_s(latency_bounds()), queue_s(latency_bounds()) {}

void ServerMetrics::count_http(int status) {
  size_t i = 0;
  while (i + 1 < kHttpCodes.size() && kHttpCodes[i] != status) ++i;
  n_http_[i].fetch_add(1, std::memory_order_relaxed);
}

void ServerMetrics::count_outcome(Outcome outcome) {
  n_outcome_[static_cast<size_t>(outcome)].fetch_add(1, std::memory_order_relaxed);
}

std::string ServerMetrics::render(const engine::EngineMetrics* engine, const ServingGauges& gauges) const {
  std::string out;
  out.reserve(8192);
  scalar(&out, "lumen_model_loaded", "1 once the model is loaded and requests are served.", "gauge",
         engine ? 1 : 0);
  if (engine) {
    const engine::EngineMetrics& m = *engine;
    scalar(&out, "lumen_num_requests_running", "Requests whose sequences are in the running batch.",
           "gauge", m.n_running);
    scalar(&out, "lumen_num_requests_waiting", "Requests queued for admission.", "gauge", m.n_waiting);
    scalar(&out, "lumen_kv_blocks_used", "KV cache blocks referenced or cached.", "gauge", m.kv_blocks_used);
    scalar(&out, "lumen_kv_blocks_total", "KV cache blocks in the pool.", "gauge", m.kv_blocks_total);
    scalar(&out, "lumen_kv_cache_usage_perc", "Fraction of KV cache blocks in use (0-1, all groups).", "gauge",
           m.kv_blocks_total > 0 ? static_cast<double>(m.kv_blocks_used) / m.kv_blocks_total : 0.0);
    render_kv_groups(&out, m);
    scalar(&out, "lumen_prompt_tokens_total", "Prompt tokens of admitted requests.", "counter",
           static_cast<double>(m.prompt_tokens));
    scalar(&out, "lumen_generation_tokens_total", "Generated tokens.", "counter",
           static_cast<double>(m.generated_tokens));
    scalar(&out, "lumen_prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache.", "counter",
           static_cast<double>(m.prompt_tokens));
    scalar(&out, "lumen_prefix_cache_hits_total", "Prompt tokens served from the prefix cache.", "counter",
           static_cast<double>(m.cached_tokens));
    scalar(&out, "lumen_num_preemptions_total", "Sequences preempted (recomputed later).", "counter",
           static_cast<double>(m.preemptions));
    scalar(&out, "lumen_engine_steps_total", "Forward steps run by the engine.", "counter",
           static_cast<double>(m.steps));
    // Speculative decoding, vLLM's spec_decode names with lumen's prefix.
    scalar(&out, "lumen_spec_decode_num_drafts_total", "Verify chunks (a sequence's proposals in one step).",
           "counter", static_cast<double>(m.spec_num_drafts));
    scalar(&out, "lumen_spec_decode_num_draft_tokens_total", "Proposed tokens verified.", "counter",
           static_cast<double>(m.spec_num_draft_tokens));
    scalar(&out, "lumen_spec_decode_num_accepted_tokens_total", "Proposed tokens accepted.", "counter",
           static_cast<double>(m.spec_num_accepted_tokens));
    if (!m.spec_accepted_per_pos.empty()) {
      metric_header(&out, "lumen_spec_decode_num_accepted_tokens_per_pos_total",
                    "Verify chunks that accepted the proposal at this position (acceptance by position).",
                    "counter");
      for (size_t j = 0; j < m.spec_accepted_per_pos.size(); ++j)
        out += "lumen_spec_decode_num_accepted_tokens_per_pos_total{position=\"" + std::to_string(j) + "\"} " +
               std::to_string(m.spec_accepted_per_pos[j]) + "\n";
    }
  }
  scalar(&out, "lumen_draining", "1 while the server drains (SIGTERM): not ready, finishing accepted requests.",
         "gauge", gauges.draining ? 1 : 0);
  if (const TransportStats* t = gauges.transport) {
    scalar(&out, "lumen_http_connections_open", "HTTP connections open.", "gauge", static_cast<double>(t->n_open));
    scalar(&out, "lumen_http_requests_in_flight", "HTTP requests queued for or running on a worker.", "gauge",
           static_cast<double>(t->n_active));
    scalar(&out, "lumen_http_connections_accepted_total", "HTTP connections accepted.", "counter",
           static_cast<double>(t->n_accepted));
    metric_header(&out, "lumen_http_connections_refused_total",
                  "Connections refused or closed to stay within the limits, by reason.", "counter");
    out += "lumen_http_connections_refused_total{reason=\"capacity\"} " + std::to_string(t->n_refused_capacity) + "\n";
    out += "lumen_http_connections_refused_total{reason=\"per_client\"} " + std::to_string(t->n_refused_per_client) + "\n";
    out += "lumen_http_connections_refused_total{reason=\"idle_evicted\"} " + std::to_string(t->n_evicted_idle) + "\n";
    metric_header(&out, "lumen_http_timeouts_total", "Connections closed by a deadline, by phase.", "counter");
    out += "lumen_http_timeouts_total{phase=\"request\"} " + std::to_string(t->n_request_timeouts) + "\n";
    out += "lumen_http_timeouts_total{phase=\"write\"} " + std::to_string(t->n_write_timeouts) + "\n";
    scalar(&out, "lumen_http_bad_requests_total", "Requests refused by the HTTP parser (4xx/5xx before routing).",
           "counter", static_cast<double>(t->n_bad_requests));
  }
  const std::string model = "model_name=\"" + label_value(gauges.model_name) + "\"";
  if (engine) {  // vLLM's v1 names for the same series
    const engine::EngineMetrics& m = *engine;
    scalar(&out, "vllm:num_requests_running", "Requests in the running batch (vLLM name).", "gauge", m.n_running, model);
    scalar(&out, "vllm:num_requests_waiting", "Requests waiting for admission (vLLM name).", "gauge", m.n_waiting, model);
    scalar(&out, "vllm:kv_cache_usage_perc", "KV cache usage, 1 = 100% (vLLM name).", "gauge",
           m.kv_blocks_total > 0 ? static_cast<double>(m.kv_blocks_used) / m.kv_blocks_total : 0.0, model);
    scalar(&out, "vllm:num_preemptions_total", "Preemptions (vLLM name).", "counter",
           static_cast<double>(m.preemptions), model);
    scalar(&out, "vllm:prompt_tokens_total", "Prompt tokens (vLLM name).", "counter",
           static_cast<double>(m.prompt_tokens), model);
    scalar(&out, "vllm:generation_tokens_total", "Generated tokens (vLLM name).", "counter",
           static_cast<double>(m.generated_tokens), model);
    scalar(&out, "vllm:prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache (vLLM name).",
           "counter", static_cast<double>(m.prompt_tokens), model);
    scalar(&out, "vllm:prefix_cache_hits_total", "Prompt tokens found in the prefix cache (vLLM name).", "counter",
           static_cast<double>(m.cached_tokens), model);
    scalar(&out, "vllm:spec_decode_num_drafts_total", "Verify chunks (vLLM name).", "counter",
           static_cast<double>(m.spec_num_drafts), model);
    scalar(&out, "vllm:spec_decode_num_draft_tokens_total", "Proposed tokens verified (vLLM name).", "counter",
           static_cast<double>(m.spec_num_draft_tokens), model);
    scalar(&out, "vllm:spec_decode_num_accepted_tokens_total", "Proposed tokens accepted (vLLM name).", "counter",
           static_cast<double>(m.spec_num_accepted_tokens), model);
  }
  ttft_s.render(&out, "vllm:time_to_first_token_seconds", "TTFT (vLLM name).", model);
  itl_s.render(&out, "vllm:inter_token_latency_seconds", "Inter-token latency (vLLM name).", model);
  e2e_s.render(&out, "vllm:e2e_request_latency_seconds", "End-to-end request latency (vLLM name).", model);
  queue_s.render(&out, "vllm:request_queue_time_seconds", "Time waiting for the first step (vLLM name).", model);
  metric_header(&out, "vllm:request_success_total", "Finished requests by finish reason (vLLM name).", "counter");
  out += "vllm:request_success_total{finished_reason=\"stop\"," + model + "} " +
         std::to_string(n_outcome_[static_cast<size_t>(Outcome::kStop)].load(std::memory_order_relaxed)) + "\n";
  out += "vllm:request_success_total{finished_reason=\"length\"," + model + "} " +
         std::to_string(n_outcome_[static_cast<size_t>(Outcome::kLength)].load(std::memory_order_relaxed)) + "\n";
  ttft_s.render(&out, "lumen_time_to_first_token_seconds", "Time from arrival to the first generated token.");
  itl_s.render(&out, "lumen_inter_token_latency_seconds", "Time between consecutive generated tokens.");
  e2e_s.render(&out, "lumen_e2e_request_latency_seconds", "Time from arrival to the last token.");
  queue_s.render(&out, "lumen_request_queue_time_seconds", "Time from arrival to the first forward step.");

  metric_header(&out, "lumen_requests_total", "Generation requests by how they ended.", "counter");
  for (size_t i = 0; i < n_outcome_.size(); ++i)
    out += std::string("lumen_requests_total{outcome=\"") + kOutcomeNames[i] + "\"} " +
           std::to_string(n_outcome_[i].load(std::memory_order_relaxed)) + "\n";
  metric_header(&out, "lumen_http_requests_total", "HTTP responses by status code.", "counter");
  for (size_t i = 0; i < kHttpCodes.size(); ++i) {
    const uint64_t n = n_http_[i].load(std::memory_order_relaxed);
    const std::string code = kHttpCodes[i] ? std::to_string(kHttpCodes[i]) : "other";
    out += "lumen_http_requests_total{code=\"" + code + "\"} " + std::to_string(n) + "\n";
  }
  return out;
}

}  // namespace lumen::server
