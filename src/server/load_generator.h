// The load generator behind `lumen bench serve`: closed-loop clients (each sends its next
// request when the previous one ends) that stream /v1/completions from any
// OpenAI-compatible server (lumen, llama.cpp's llama-server, vLLM) and time every token.
//
// Per request: TTFT (request sent -> first non-empty text chunk), ITL (gaps between text
// chunks), TPOT ((e2e - TTFT) / (output tokens - 1)), end-to-end latency. Output tokens come
// from the final `usage` when the server sends one (stream_options.include_usage), else
// they are counted as text chunks (one token per chunk, as llama-server streams).
//
// Prompts are random words from a fixed list, seeded. With PromptFormat::kAuto the words are
// first turned into token ids through the server's /tokenize and cut to exactly
// prompt_tokens (+ shared_prefix_tokens) ids, sent as a token-id array: every server then
// sees the same token count. Without /tokenize (or with kText) the words are sent as text,
// one word ~ one token. The shared-prefix workload puts the same prefix before every
// request's distinct part (LoadConfig::prompt_set chooses the distinct parts).
//
// Safety: loopback addresses only (it is a load generator), a bounded request count, and a
// time limit after which no new request starts.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"

namespace lumen::server {

enum class PromptFormat : uint8_t { kAuto, kText, kIds };

struct LoadConfig {
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string api_key;
  std::string model;                 // "" -> ask /v1/models, else leave it out
  int32_t concurrency = 1;
  int32_t n_requests = 64;
  int32_t prompt_tokens = 200;       // distinct tokens per request
  int32_t shared_prefix_tokens = 0;  // the same tokens before every prompt (of one group)
  int32_t prefix_groups = 1;         // distinct shared prefixes; request i has prefix i % groups
  int32_t max_tokens = 64;
  bool ignore_eos = true;            // fixed-length outputs (lumen, vLLM, llama-server honour it)
  // lumen's per-request "speculative" field: unset leaves it out (the server's default).
  std::optional<bool> speculative;
  PromptFormat format = PromptFormat::kAuto;
  uint64_t seed = 1;
  // Which set of distinct prompt parts, drawn from (seed, prompt_set); the shared prefixes
  // come from the seed alone. `bench serve` gives each concurrency level its own set, so no
  // level finds an earlier level's prompts in the server's prefix cache.
  uint32_t prompt_set = 0;
  double time_limit_s = 600;         // no new request starts after this
  double request_timeout_s = 600;
};

struct RequestSample {
  bool ok = false;
  std::string error;
  int32_t n_output = 0;
  int32_t n_prompt = -1;             // from the final usage (-1: not reported)
  int32_t n_cached = -1;             // usage.prompt_tokens_details.cached_tokens
  double ttft_ms = 0;
  double tpot_ms = 0;
  double e2e_ms = 0;
  std::vector<double> itl_ms;
};

struct LoadResult {
  std::vector<RequestSample> samples;  // in completion order
  double wall_s = 0;                   // first request sent -> last request done
  bool prompts_as_ids = false;
  std::string model;
};

struct Sla {
  double ttft_ms = 2000;
  double tpot_ms = 50;
};

struct Percentiles {
  double p50 = 0, p90 = 0, p99 = 0, mean = 0;
};

struct LoadSummary {
  double output_tok_s = 0;
  double req_s = 0;
  double goodput_req_s = 0;  // requests meeting the SLA per second
  double cached_token_ratio = -1;  // prompt tokens served from the prefix cache / prompt tokens (-1: not reported)
  int32_t n_ok = 0;
  int32_t n_failed = 0;
  Percentiles ttft_ms, tpot_ms, itl_ms, e2e_ms;
};

// "http://HOST:PORT[/]" with a loopback HOST (localhost, 127.0.0.0/8, ::1).
Status parse_loopback_url(const std::string& url, std::string* host, int* port);

// Runs one load level. Errors: the server cannot be reached or prompts cannot be built;
// failed requests are samples, not errors.
Result<LoadResult> run_load(const LoadConfig& config);

// Percentiles by linear interpolation between order statistics (numpy's default).
Percentiles percentiles(std::vector<double> values);
LoadSummary summarize(const LoadResult& result, const Sla& sla);
// {"output_tok_s", "req_s", "goodput_req_s", "n_ok", "n_failed", "cached_token_ratio", "ttft_ms",
//  "tpot_ms", "itl_ms", "e2e_ms"}, the latter each {"p50", "p90", "p99", "mean"}.
std::string summary_json(const LoadSummary& summary);

}  // namespace lumen::server
