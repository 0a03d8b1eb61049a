// lumen bench serve: drives a running OpenAI-compatible server (lumen serve, llama.cpp's
// llama-server, ...) at one or more concurrency levels and reports throughput, latency
// percentiles and goodput under an SLA. The work is in server/load_generator.h.
#include "cli/bench_serve_cmd.h"

#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <optional>
#include <sstream>

#include "cli/args.h"
#include "cli/common.h"
#include "server/load_generator.h"

namespace lumen::cli {
namespace {

std::vector<OptionSpec> bench_serve_specs() {
  return {
      {{"--url"}, "URL", "server root, loopback only (default http://127.0.0.1:8080)"},
      {{"--concurrency"}, "LIST", "clients at once, comma-separated levels (default 1,4,8,16)"},
      {{"--requests"}, "N", "requests per level (default 64, at most 100000)"},
      {{"--prompt-tokens"}, "N", "distinct prompt tokens per request (default 200)"},
      {{"--shared-prefix"}, "N", "tokens of a prefix shared by every prompt of a group (default 0)"},
      {{"--prefix-groups"}, "N", "distinct shared prefixes (system prompts, tenants); request i has prefix i % N (default 1)"},
      {{"--max-tokens"}, "N", "tokens to generate per request (default 64)"},
      {{"--respect-eos"}, "", "let requests stop at end-of-generation (default: ignore_eos, fixed length)"},
      {{"--prompt-format"}, "FMT", "auto (token ids via the server's /tokenize, else text), text, or ids"},
      {{"--model"}, "NAME", "model field of the requests (default: the first of /v1/models)"},
      {{"--api-key"}, "KEY", "Authorization: Bearer KEY (or env LUMEN_API_KEY)"},
      {{"--sla-ttft-ms"}, "MS", "goodput: time to first token at most (default 2000)"},
      {{"--sla-tpot-ms"}, "MS", "goodput: time per output token at most (default 50)"},
      {{"--time-limit"}, "S", "seconds per level after which no request starts (default 600)"},
      {{"--timeout"}, "S", "per-request timeout in seconds (default 600)"},
      {{"--seed"}, "N", "prompt seed (default 1)"},
      {{"--spec-ab"}, "R", "lumen serve with speculation: at each level R rounds of speculative on and off "
                           "(\"speculative\": false), alternating, after one unmeasured warm-up run that fills the prefix "
                           "cache; then the median throughput of each"},
      {{"--json"}, "", "print one JSON object per level (in --concurrency order) instead of the table"},
  };
}

Result<std::vector<int32_t>> parse_levels(const std::string& text) {
  std::vector<int32_t> levels;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    char* end = nullptr;
    const long v = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v < 1 || v > 1024)
      return error("--concurrency: '" + item + "' is not a level in [1, 1024]");
    levels.push_back(static_cast<int32_t>(v));
  }
  if (levels.empty() || levels.size() > 32) return error("--concurrency: give 1 to 32 levels");
  return levels;
}

struct BenchServeOptions {
  server::LoadConfig load;
  server::Sla sla;
  std::vector<int32_t> levels;
  bool json = false;
  std::string url;
  int32_t spec_rounds = 0;  // --spec-ab: rounds of (spec on, spec off) per level
};

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

Result<BenchServeOptions> options_from_args(const ArgParser& args) {
  BenchServeOptions o;
  server::LoadConfig& c = o.load;
  o.url = args.get_or("--url", "http://127.0.0.1:8080");
  LUMEN_TRY(server::parse_loopback_url(o.url, &c.host, &c.port));
  LUMEN_ASSIGN_OR_RETURN(o.levels, parse_levels(args.get_or("--concurrency", "1,4,8,16")));
  LUMEN_ASSIGN_OR_RETURN(int64_t n, args.get_int("--requests", 64, 1, 100000));
  c.n_requests = static_cast<int32_t>(n);
  LUMEN_ASSIGN_OR_RETURN(int64_t pt, args.get_int("--prompt-tokens", 200, 1, 1 << 20));
  c.prompt_tokens = static_cast<int32_t>(pt);
  LUMEN_ASSIGN_OR_RETURN(int64_t sp, args.get_int("--shared-prefix", 0, 0, 1 << 20));
  c.shared_prefix_tokens = static_cast<int32_t>(sp);
  LUMEN_ASSIGN_OR_RETURN(int64_t groups, args.get_int("--prefix-groups", 1, 1, 4096));
  c.prefix_groups = static_cast<int32_t>(groups);
  LUMEN_ASSIGN_OR_RETURN(int64_t mt, args.get_int("--max-tokens", 64, 1, 1 << 20));
  c.max_tokens = static_cast<int32_t>(mt);
  c.ignore_eos = !args.has("--respect-eos");
  const std::string fmt = args.get_or("--prompt-format", "auto");
  if (fmt == "auto") c.format = server::PromptFormat::kAuto;
  else if (fmt == "text") c.format = server::PromptFormat::kText;
  else if (fmt == "ids") c.format = server::PromptFormat::kIds;
  else return error("--prompt-format: '" + fmt + "' is not auto, text or ids");
  c.model = args.get_or("--model", "");
  c.api_key = args.get_or("--api-key", "");
  if (c.api_key.empty())
    if (const char* env = std::getenv("LUMEN_API_KEY")) c.api_key = env;
  LUMEN_ASSIGN_OR_RETURN(o.sla.ttft_ms, args.get_float("--sla-ttft-ms", 2000, 0, 1e9));
  LUMEN_ASSIGN_OR_RETURN(o.sla.tpot_ms, args.get_float("--sla-tpot-ms", 50, 0, 1e9));
  LUMEN_ASSIGN_OR_RETURN(c.time_limit_s, args.get_float("--time-limit", 600, 0.001, 86400));
  LUMEN_ASSIGN_OR_RETURN(c.request_timeout_s, args.get_float("--timeout", 600, 1, 86400));
  LUMEN_ASSIGN_OR_RETURN(int64_t seed, args.get_int("--seed", 1, 0, INT64_MAX));
  c.seed = static_cast<uint64_t>(seed);
  LUMEN_ASSIGN_OR_RETURN(int64_t ab, args.get_int("--spec-ab", 0, 1, 100));
  o.spec_rounds = static_cast<int32_t>(ab);
  o.json = args.has("--json");
  return o;
}

std::string triple(const server::Percentiles& p) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.1f/%.1f/%.1f", p.p50, p.p90, p.p99);
  return buf;
}

}  // namespace

int cmd_bench_serve(int argc, char** argv, int first) {
  ArgParser args("bench serve",
                 "lumen bench serve [--url http://127.0.0.1:8080] [--concurrency 1,4,8,16] [--requests 64] "
                 "[--prompt-tokens 200] [--max-tokens 64] [--shared-prefix N] [--json]",
                 bench_serve_specs());
  int rc = 0;
  if (!parse_or_report(args, argc, argv, first, rc)) return rc;
  auto opts = options_from_args(args);
  if (!opts.ok()) {
    std::fprintf(stderr, "error: %s\n", opts.message().c_str());
    return 2;
  }
  signal(SIGPIPE, SIG_IGN);
  const BenchServeOptions& o = *opts;
  int n_failed_total = 0;
  bool header_printed = false;
  // Runs: each level once, or with --spec-ab 2R times, speculation on and off in turn
  // (on first in even rounds, off first in odd ones: both see the same drift in load).
  // Each level draws its own prompts (LoadConfig::prompt_set: none of an earlier level's are
  // in the prefix cache); the --spec-ab runs of one level share theirs, so they start with
  // one unmeasured warm-up run of that set: otherwise the first measured run alone prefills
  // its prompts while every later one finds them in the server's prefix cache.
  struct Run {
    int32_t level;
    std::optional<bool> spec;
    uint32_t prompt_set;
    bool warmup = false;
  };
  std::vector<Run> runs;
  for (size_t li = 0; li < o.levels.size(); ++li) {
    const int32_t level = o.levels[li];
    const auto set = static_cast<uint32_t>(li);
    if (o.spec_rounds == 0) runs.push_back({level, std::nullopt, set});
    if (o.spec_rounds > 0) runs.push_back({level, false, set, true});
    for (int32_t r = 0; r < o.spec_rounds; ++r) {
      runs.push_back({level, r % 2 == 0, set});
      runs.push_back({level, r % 2 != 0, set});
    }
  }
  std::map<std::pair<int32_t, bool>, std::vector<double>> ab_tok_s;  // (level, spec) -> out tok/s per run
  for (const Run& run : runs) {
    const int32_t level = run.level;
    server::LoadConfig c = o.load;
    c.concurrency = level;
    c.speculative = run.spec;
    c.prompt_set = run.prompt_set;
    auto result = server::run_load(c);
    if (!result.ok()) {
      std::fprintf(stderr, "error: %s\n", result.message().c_str());
      return 1;
    }
    const server::LoadSummary s = server::summarize(*result, o.sla);
    n_failed_total += s.n_failed;
    if (run.warmup) {
      std::fprintf(stderr, "lumen bench serve: conc %d warm-up (speculation off, not counted): %d ok, %d failed, %.1f out tok/s\n",
                   level, s.n_ok, s.n_failed, s.output_tok_s);
      continue;
    }
    if (run.spec) ab_tok_s[{level, *run.spec}].push_back(s.output_tok_s);
    if (o.json) {
      std::string line = server::summary_json(s);
      if (run.spec) line.insert(1, std::string("\"speculative\":") + (*run.spec ? "true" : "false") + ",");
      std::printf("%s\n", line.c_str());
      std::fflush(stdout);
      continue;
    }
    if (!header_printed) {
      header_printed = true;
      std::printf("lumen bench serve: %s | model %s | prompt %d tok%s (%s) | max_tokens %d%s | SLA ttft<=%.0f ms tpot<=%.0f ms\n",
                  o.url.c_str(), result->model.empty() ? "?" : result->model.c_str(), c.prompt_tokens,
                  c.shared_prefix_tokens > 0 ? (" + " + std::to_string(c.shared_prefix_tokens) + " shared").c_str() : "",
                  result->prompts_as_ids ? "token ids" : "text, ~1 tok/word", c.max_tokens,
                  c.ignore_eos ? " (ignore_eos)" : "", o.sla.ttft_ms, o.sla.tpot_ms);
      std::printf("%5s %5s %9s %7s %9s %8s %22s %19s %19s %22s %7s\n", "conc", "spec", "ok/fail", "req/s", "out tok/s", "goodput",
                  "TTFT p50/90/99 ms", "TPOT p50/90/99", "ITL p50/90/99", "E2E p50/90/99 ms", "cached");
    }
    char okfail[32];
    std::snprintf(okfail, sizeof okfail, "%d/%d", s.n_ok, s.n_failed);
    char cached[16] = "-";
    if (s.cached_token_ratio >= 0) std::snprintf(cached, sizeof cached, "%.1f%%", 100 * s.cached_token_ratio);
    std::printf("%5d %5s %9s %7.2f %9.1f %8.2f %22s %19s %19s %22s %7s\n", level,
                !run.spec ? "-" : *run.spec ? "on" : "off", okfail, s.req_s, s.output_tok_s,
                s.goodput_req_s, triple(s.ttft_ms).c_str(), triple(s.tpot_ms).c_str(), triple(s.itl_ms).c_str(),
                triple(s.e2e_ms).c_str(), cached);
    std::fflush(stdout);
    if (s.n_failed > 0) {
      for (const server::RequestSample& r : result->samples)
        if (!r.ok) {
          std::fprintf(stderr, "lumen bench serve: first failure: %s\n", r.error.c_str());
          break;
        }
    }
  }
  for (const int32_t level : o.levels) {
    if (o.spec_rounds == 0 || o.json) break;
    const std::vector<double>& on = ab_tok_s[{level, true}];
    const std::vector<double>& off = ab_tok_s[{level, false}];
    const double m_on = median_of(on), m_off = median_of(off);
    std::printf("conc %d: out tok/s spec on %.1f [%.1f, %.1f] | off %.1f [%.1f, %.1f] | x%.2f\n", level, m_on,
                *std::min_element(on.begin(), on.end()), *std::max_element(on.begin(), on.end()), m_off,
                *std::min_element(off.begin(), off.end()), *std::max_element(off.begin(), off.end()),
                m_off > 0 ? m_on / m_off : 0);
  }
  return n_failed_total > 0 ? 1 : 0;
}

}  // namespace lumen::cli
