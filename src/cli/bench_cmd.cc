// lumen bench: pp / tg rates through the same engine every other command uses.
//
//   ppN       one request of N random tokens, prefilled in one step; rate = N / time.
//   tgN       one request generating N tokens one step at a time (after a 1-token prompt);
//             rate = N / time of the N decode steps.
//   tgN@dD    the same after D random tokens are already in the KV cache (attention over a
//             long cache is its own cost); the prefill is not timed.
//
// Each test runs -r times after one warm-up; the median is reported with min and max.
// Every run uses fresh random tokens and the prefix cache is off, so a repeated prompt is
// computed again rather than found in the cache.
// Bytes moved per generated token = weight bytes (every matrix once + one embedding row)
// + the KV cache read at that depth; dividing by time gives GB/s, compared with the
// machine's read bandwidth measured in the same process (--membw, STREAM-like) when asked.
// The bandwidth test runs after the model tests: its 512 MiB buffer must not count in the
// model's peak RSS (read from VmHWM before it), nor compete with the model for memory.
// It reads memory mapped like the weights (2 MiB pages when the weights got them).
// A hash of the logits of the first generated token proves the kernels computed the same
// thing as the last run (same kernels table, same model, same random prompt).
#include "cli/bench_cmd.h"

#include <algorithm>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <random>
#include <sstream>

#include <nlohmann/json.hpp>

#include "base/timer.h"
#include "cli/bench_spec.h"
#include "cli/common.h"
#include "roofline/membw.h"
#include "roofline/peak_flops.h"
#include "roofline/predict.h"

namespace lumen::cli {
namespace {

struct TestResult {
  std::string name;     // "pp512", "tg128", "tg128@d4096"
  std::vector<double> tok_s;
  double bytes_per_token = 0;  // tg: weights + average KV read per token
  // tg with --membw: the bandwidth readings around its runs, run k between readings k and
  // k + 1 (or one reading for all runs, where they could not be bracketed).
  std::vector<double> membw_gb_s;
  double median() const;
  // The roof of run k: the higher of the readings around it.
  double roof_gb_s(size_t k) const {
    return membw_gb_s.size() > k + 1 ? std::max(membw_gb_s[k], membw_gb_s[k + 1]) : membw_gb_s.back();
  }
  // Each run's GB/s as % of its roof; empty without readings.
  std::vector<double> pct_runs() const {
    std::vector<double> pct;
    if (membw_gb_s.empty()) return pct;
    for (size_t k = 0; k < tok_s.size(); ++k) pct.push_back(100.0 * tok_s[k] * bytes_per_token / 1e9 / roof_gb_s(k));
    return pct;
  }
  double min() const { return *std::min_element(tok_s.begin(), tok_s.end()); }
  double max() const { return *std::max_element(tok_s.begin(), tok_s.end()); }
};

double median_of(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double TestResult::median() const { return median_of(tok_s); }

std::vector<int32_t> random_tokens(int64_t n, int32_t n_vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> dist(0, n_vocab - 1);
  std::vector<int32_t> v(n);
  for (auto& t : v) t = dist(rng);
  return v;
}

struct RunOutcome {
  engine::RequestTimings timings;
  uint64_t logits_hash = 0;
  bool ok = false;
  std::string error;
};

RunOutcome run_request(engine::Engine& eng, std::vector<int32_t> prompt, int32_t max_tokens) {
  RunOutcome out;
  engine::Request req;
  req.prompt_ids = std::move(prompt);
  req.params.max_tokens = max_tokens;
  req.params.ignore_eos = true;
  req.params.sampling.temperature = 0;  // greedy: sampling cost is one argmax
  req.params.hash_logits = true;
  auto id = eng.add_request(std::move(req));
  if (!id.ok()) {
    out.error = id.message();
    return out;
  }
  while (eng.has_work()) {
    for (engine::RequestEvent& ev : eng.step()) {
      if (ev.logits_hash) out.logits_hash = ev.logits_hash;
      if (ev.finish_reason == engine::FinishReason::kError) out.error = ev.error;
    }
  }
  out.timings = eng.timings(*id).value_or(engine::RequestTimings{});
  out.ok = out.error.empty();
  return out;
}

std::string main_weight_type(const gguf::ModelFile& f) {
  std::map<std::string, uint64_t> bytes;
  for (const gguf::TensorInfo& t : f.tensors())
    if (t.view.n_dims == 2) bytes[std::string(dtype_name(t.view.dtype))] += t.view.n_bytes;
  std::string best;
  uint64_t most = 0;
  for (const auto& [name, b] : bytes)
    if (b > most) most = b, best = name;
  return best;
}

// A field of /proc/self/status in KiB (VmHWM: peak resident set; VmRSS: current), or -1.
int64_t proc_status_kib(const char* field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  const std::string key = std::string(field) + ":";
  while (std::getline(in, line)) {
    if (line.rfind(key, 0) == 0) {
      std::istringstream ss(line.substr(key.size()));
      int64_t kib = -1;
      ss >> kib;
      return kib;
    }
  }
  return -1;
}

// Whether most of the weights decode reads are mapped with 2 MiB pages: FilePmdMapped +
// AnonHugePages of the mappings that hold the matrices as the kernels read them (the
// interleaved copies where there are some, else the file's tensors), against their size.
bool weights_on_huge_pages(const model::ModelWeights& w) {
  uintptr_t lo = UINTPTR_MAX, hi = 0;
  auto span_of = [&](const TensorView& t) {
    const auto p = reinterpret_cast<uintptr_t>(t.interleaved ? t.interleaved : t.data);
    lo = std::min(lo, p);
    hi = std::max(hi, p + (t.interleaved ? t.interleaved_n_bytes : t.n_bytes));
  };
  for (const TensorView* t : model::matrices(w)) span_of(*t);
  if (hi <= lo) return false;
  std::ifstream in("/proc/self/smaps");
  std::string line;
  bool inside = false;
  int64_t huge_kib = 0;
  while (std::getline(in, line)) {
    unsigned long a = 0, b = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &a, &b) == 2 && line.find(':') > line.find(' ')) {
      inside = a < hi && b > lo;
    } else if (inside && (line.rfind("FilePmdMapped:", 0) == 0 || line.rfind("AnonHugePages:", 0) == 0)) {
      huge_kib += std::atol(line.c_str() + line.find(':') + 1);
    }
  }
  return huge_kib * 1024 * 2 >= static_cast<int64_t>(hi - lo);
}

// Resets the process's peak resident set (VmHWM) to its current size; false where the
// kernel does not allow it (Linux >= 4.0 does, for the process itself).
bool reset_peak_rss() {
  std::ofstream out("/proc/self/clear_refs");
  out << "5";
  out.flush();
  return static_cast<bool>(out);
}

std::string model_label(const std::string& path) {
  const size_t slash = path.find_last_of('/', path.size() > 1 ? path.size() - 2 : 0);
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

}  // namespace

int cmd_bench(int argc, char** argv, int first) {
  std::vector<OptionSpec> specs = engine_option_specs();
  specs.push_back({{"-p", "--n-prompt"}, "N", "prompt tokens of the pp test (default 512; 0 = skip)"});
  specs.push_back({{"-n", "--n-gen"}, "N", "generated tokens of the tg test (default 128; 0 = skip)"});
  specs.push_back({{"-d", "--depth"}, "D", "also run tg at this KV depth (tokens already cached)"});
  specs.push_back({{"-r", "--repetitions"}, "N", "runs per test; the median is reported (default 3)"});
  specs.push_back({{"--membw"}, "", "measure this machine's read bandwidth in the same process"});
  specs.push_back({{"--vs-roofline"}, "", "print the roofline prediction next to each measurement"});
  specs.push_back({{"--json"}, "", "print a JSON array, one object per test"});
  for (OptionSpec& s : spec_option_specs()) {
    if (s.names[0] == "--spec") s.help = "speculative vs plain, alternating: ngram, replay or random (bench_spec.cc)";
    specs.push_back(s);
  }
  specs.push_back({{"-f", "--file"}, "PATH", "with --spec: prompts, one per line (default: story beginnings)"});
  ArgParser args("bench", "lumen bench -m MODEL [-t N] [-p 512] [-n 128] [-d D] [-r 3] [--membw] [--json]", specs);
  int rc = 0;
  if (!parse_or_report(args, argc, argv, first, rc)) return rc;
  const bool membw_only = args.has("--membw") && !args.has("--model");
  auto n_prompt = args.get_int("--n-prompt", 512, 0, 1 << 16);
  auto n_gen = args.get_int("--n-gen", 128, 0, 1 << 16);
  auto depth = args.get_int("--depth", 0, 0, 1 << 20);
  auto reps = args.get_int("--repetitions", 3, 1, 1000);
  auto threads = args.get_int("--threads", 0, 1, 1024);
  for (const Status* st : {&n_prompt.status(), &n_gen.status(), &depth.status(), &reps.status(), &threads.status()}) {
    if (!st->ok()) {
      std::fprintf(stderr, "error: %s\n", st->message().c_str());
      return 2;
    }
  }
  const bool json = args.has("--json");
  const int n_threads = threads_or_all_cores(*threads);

  // --- memory bandwidth only (no model) ---
  if (membw_only) {
    ThreadPool pool(n_threads);
    roofline::MembwResult r = roofline::measure_read_bandwidth_detailed(pool, roofline::kDefaultMembwBytes, false);
    roofline::MembwResult h = roofline::measure_read_bandwidth_detailed(pool, roofline::kDefaultMembwBytes, true);
    if (json) {
      nlohmann::json j = {{"test", "membw"}, {"gb_s", r.best_bytes_per_s / 1e9}, {"gb_s_median", r.median_bytes_per_s / 1e9},
                          {"gb_s_hugepages", h.best_bytes_per_s / 1e9}, {"threads", n_threads},
                          {"bytes", r.n_bytes}};
      std::puts(nlohmann::json::array({j}).dump().c_str());
    } else {
      std::printf("lumen bench --membw: %d threads, %zu MiB: read %.1f GB/s (median %.1f), with huge pages %.1f GB/s%s\n",
                  n_threads, r.n_bytes >> 20, r.best_bytes_per_s / 1e9, r.median_bytes_per_s / 1e9,
                  h.best_bytes_per_s / 1e9, h.huge_pages ? "" : " (THP not granted)");
    }
    return 0;
  }

  auto config = engine_config_from_args(args);
  if (!config.ok()) {
    std::fprintf(stderr, "error: %s\n", config.message().c_str());
    return 2;
  }
  engine::EngineConfig c = *config;
  c.n_threads = n_threads;
  c.max_seqs = 1;
  c.enable_prefix_cache = false;  // every run computes its whole prompt
  if (args.has("--spec") || args.has("--draft-model")) {
    if (c.n_ctx <= 0) c.n_ctx = static_cast<int32_t>(std::max<int64_t>(512, *n_gen + 256));
    return run_spec_bench(args, c, *n_gen, *reps, json);
  }
  const int64_t need_ctx = std::max<int64_t>({*n_prompt, *depth + *n_gen + 2, *n_gen + 2, 16});
  if (c.n_ctx <= 0 || c.n_ctx < need_ctx) c.n_ctx = static_cast<int32_t>(need_ctx);
  if (!args.has("--batch-size")) c.max_batch_tokens = static_cast<int32_t>(std::max<int64_t>(*n_prompt, 1));
  const double load_t0 = now_ms();
  std::unique_ptr<engine::Engine> eng = load_engine_or_report(args, c);
  if (!eng) return 1;
  const double load_ms = now_ms() - load_t0;
  const model::HParams& hp = eng->hparams();
  const gguf::ModelFile& file = eng->model().file();
  const double weight_bytes = static_cast<double>(model::weight_bytes_per_token(eng->model().weights(), hp));
  const double kv_bytes_per_ctx_token = 2.0 * hp.n_layer * hp.n_kv_dim() * (c.kv_dtype == DType::kF32 ? 4 : 2);
  const std::string label = model_label(*args.get("--model"));
  const std::string type = main_weight_type(file);

  std::vector<TestResult> results;
  uint64_t logits_hash = 0;
  std::string error;
  // Warm-up: touch every weight page once (and let the CPU clock settle).
  RunOutcome warm = run_request(*eng, random_tokens(std::min<int64_t>(*n_prompt > 0 ? *n_prompt : 8, 32), hp.n_vocab, 1), 2);
  if (!warm.ok) error = warm.error;
  const bool weights_huge = weights_on_huge_pages(eng->model().weights());

  // --- memory bandwidth, same process, same threads, around every tg run ---
  // The machine's bandwidth moves between levels (about 50 and 80 GB/s here) for minutes at
  // a time, whatever runs, so a reading taken once, before or after the tests, can describe
  // another level than the one a run streamed at. Each tg run is bracketed by readings
  // (consecutive runs share the one between them) and its GB/s is divided by the higher of
  // its two; a test's % is the median over its runs. Each reading's 512 MiB buffer would
  // count in the peak RSS, so the peak is reset after every reading and the highest peak
  // between readings is kept; where the kernel does not allow the reset, there is one
  // reading, after all the tests.
  const bool want_membw = args.has("--membw") || args.has("--vs-roofline");
  std::optional<ThreadPool> membw_pool;
  if (want_membw) membw_pool.emplace(n_threads);
  double peak_rss_kib = static_cast<double>(proc_status_kib("VmHWM"));
  const bool bracket = want_membw && reset_peak_rss();
  std::vector<double> readings;     // GB/s, in the order taken
  bool reading_is_fresh = false;    // nothing has run since the last reading
  auto take_reading = [&] {
    peak_rss_kib = std::max(peak_rss_kib, static_cast<double>(proc_status_kib("VmHWM")));
    const roofline::MembwResult r =
        roofline::measure_read_bandwidth_detailed(*membw_pool, roofline::kDefaultMembwBytes, weights_huge);
    if (bracket) reset_peak_rss();
    readings.push_back(r.best_bytes_per_s / 1e9);
    reading_is_fresh = true;
  };
  if (*n_prompt > 0 && error.empty()) {
    TestResult t{"pp" + std::to_string(*n_prompt), {}, weight_bytes, {}};
    for (int64_t r = 0; r < *reps && error.empty(); ++r) {
      const double t0 = now_ms();
      RunOutcome o = run_request(*eng, random_tokens(*n_prompt, hp.n_vocab, 42 + r), 1);
      const double ms = o.timings.first_token_ms - t0;
      if (!o.ok) error = o.error;
      t.tok_s.push_back(*n_prompt / (ms / 1000.0));
      logits_hash = o.logits_hash;
    }
    results.push_back(t);
  }
  auto run_tg = [&](int64_t d) {
    TestResult t{"tg" + std::to_string(*n_gen) + (d > 0 ? "@d" + std::to_string(d) : ""), {}, 0, {}};
    // Average KV bytes read per generated token: the context grows from d+1 to d+n.
    t.bytes_per_token = weight_bytes + kv_bytes_per_ctx_token * (d + 1 + (*n_gen + 1) / 2.0);
    for (int64_t r = 0; r < *reps && error.empty(); ++r) {
      if (bracket && !reading_is_fresh) take_reading();
      if (bracket && r == 0) t.membw_gb_s.push_back(readings.back());
      reading_is_fresh = false;
      RunOutcome o = run_request(*eng, random_tokens(std::max<int64_t>(d, 1), hp.n_vocab, 7 + r), static_cast<int32_t>(*n_gen + 1));
      if (!o.ok) error = o.error;
      const double ms = o.timings.finish_ms - o.timings.first_token_ms;  // n_gen decode steps
      t.tok_s.push_back(*n_gen / (ms / 1000.0));
      if (*n_prompt == 0) logits_hash = o.logits_hash;
      if (bracket && o.ok) {
        take_reading();
        t.membw_gb_s.push_back(readings.back());
      }
    }
    results.push_back(t);
  };
  if (*n_gen > 0 && error.empty()) run_tg(0);
  if (*n_gen > 0 && *depth > 0 && error.empty()) run_tg(*depth);
  if (!error.empty()) {
    std::fprintf(stderr, "error: %s\n", error.c_str());
    return 1;
  }
  // Peak RSS of loading and of the model tests, without the bandwidth test's buffers.
  peak_rss_kib = std::max(peak_rss_kib, static_cast<double>(proc_status_kib("VmHWM")));
  const double peak_rss_mib = peak_rss_kib / 1024.0;

  std::optional<roofline::MachineRates> rates;
  if (want_membw && !bracket) {  // one reading, after everything
    take_reading();
    for (TestResult& t : results)
      if (t.name.rfind("tg", 0) == 0) t.membw_gb_s = {readings.back()};
  }
  if (want_membw && readings.empty()) take_reading();  // --membw without a tg test
  // The roof for predictions and pp: the highest reading of the run.
  const double membw_gb_s = readings.empty() ? 0.0 : *std::max_element(readings.begin(), readings.end());
  if (args.has("--vs-roofline")) {
    const roofline::PeakRates peak = roofline::measure_peak_rates(*membw_pool);
    rates = roofline::MachineRates{membw_gb_s * 1e9, peak.flops_f32, peak.ops_int8};
  }

  // The roofline's prediction per test. pp: at the run's highest bandwidth reading. tg:
  // per run, at the higher of the readings around it (as its % of bandwidth), so that a
  // run at the machine's other bandwidth level is set against its own roof; the test's
  // prediction and ratio are the medians over its runs.
  struct Predicted {
    double tok_s = 0;
    double ratio = 0;
    const char* roof = "";
  };
  auto predict = [&](int64_t d, double bytes_per_s) -> std::optional<roofline::Prediction> {
    roofline::PredictOptions o;
    o.n_prompt = std::max<int64_t>(*n_prompt, 1);
    o.n_gen = std::max<int64_t>(*n_gen, 1);
    o.n_depth = d;
    o.kv_bytes_per_elem = c.kv_dtype == DType::kF32 ? 4 : 2;
    roofline::MachineRates r = *rates;
    r.read_bytes_per_s = bytes_per_s;
    auto p = roofline::predict_lumen(file, r, o);
    if (!p.ok()) return std::nullopt;
    return *p;
  };
  auto predicted_for = [&](const TestResult& t, int64_t d) -> std::optional<Predicted> {
    if (!rates) return std::nullopt;
    const bool is_tg = t.name.rfind("tg", 0) == 0;
    if (!is_tg) {
      auto p = predict(d, rates->read_bytes_per_s);
      if (!p) return std::nullopt;
      return Predicted{p->pp_tok_s, t.median() / p->pp_tok_s, p->pp_binding_roof};
    }
    std::vector<double> tok, ratio;
    const char* roof = "";
    for (size_t k = 0; k < t.tok_s.size(); ++k) {
      auto p = predict(d, t.roof_gb_s(k) * 1e9);
      if (!p) return std::nullopt;
      tok.push_back(p->tg_tok_s);
      ratio.push_back(t.tok_s[k] / p->tg_tok_s);
      roof = p->binding_roof;
    }
    return Predicted{median_of(tok), median_of(ratio), roof};
  };

  nlohmann::json arr = nlohmann::json::array();
  char hash_hex[17];
  std::snprintf(hash_hex, sizeof hash_hex, "%016" PRIx64, logits_hash);
  std::string summary = "lumen bench: " + label + " " + type;
  for (const TestResult& t : results) {
    const bool is_tg = t.name.rfind("tg", 0) == 0;
    const double med = t.median();
    const double gb_s = is_tg ? med * t.bytes_per_token / 1e9 : 0.0;
    const std::vector<double> pct_runs = t.pct_runs();
    const double pct = is_tg ? median_of(pct_runs) : 0.0;
    nlohmann::json j = {{"test", t.name}, {"tok_s", med}, {"tok_s_min", t.min()}, {"tok_s_max", t.max()},
                        {"threads", n_threads}, {"model", label}, {"type", type},
                        {"weight_bytes_per_token", weight_bytes}, {"peak_rss_mib", peak_rss_mib},
                        {"load_ms", load_ms}, {"weights_huge_pages", weights_huge},
                        {"logits_hash", hash_hex}, {"kernels", std::string(eng->kernel_name())}};
    j["gb_s"] = is_tg ? nlohmann::json(gb_s) : nlohmann::json(nullptr);
    j["pct_bandwidth"] = pct > 0 ? nlohmann::json(pct) : nlohmann::json(nullptr);
    if (membw_gb_s > 0) {
      j["membw_gb_s"] = membw_gb_s;  // the highest reading of the whole run
      if (is_tg) {
        j["membw_readings_gb_s"] = t.membw_gb_s;
        j["pct_bandwidth_runs"] = pct_runs;
      }
    }
    const std::optional<Predicted> pr = predicted_for(t, t.name.find('@') != std::string::npos ? *depth : 0);
    if (pr) {
      j["predicted_tok_s"] = pr->tok_s;
      j["ratio_to_predicted"] = pr->ratio;
      j["binding_roof"] = pr->roof;
    }
    arr.push_back(j);
    char line[512];
    if (is_tg) {
      std::snprintf(line, sizeof line, " | %s %.1f tok/s, %.1f GB/s", t.name.c_str(), med, gb_s);
      summary += line;
      if (pct > 0) {
        const auto [lo, hi] = std::minmax_element(t.membw_gb_s.begin(), t.membw_gb_s.end());
        std::snprintf(line, sizeof line, " (%.0f%% of the bandwidth read around its runs, %.1f-%.1f GB/s)", pct, *lo,
                      *hi);
        summary += line;
      }
    } else {
      std::snprintf(line, sizeof line, " | %s %.1f tok/s", t.name.c_str(), med);
      summary += line;
    }
    if (pr) {
      std::snprintf(line, sizeof line, " [roofline %.1f, %.0f%%, %s-bound]", pr->tok_s, 100 * pr->ratio, pr->roof);
      summary += line;
    }
  }
  if (json) {
    std::puts(arr.dump().c_str());
    return 0;
  }
  std::printf("%-28s %-6s %3s %-14s %10s %10s %10s %8s\n", "model", "type", "t", "test", "tok/s", "min", "max", "GB/s");
  for (const TestResult& t : results) {
    const bool is_tg = t.name.rfind("tg", 0) == 0;
    std::printf("%-28s %-6s %3d %-14s %10.2f %10.2f %10.2f %8s\n", label.c_str(), type.c_str(), n_threads,
                t.name.c_str(), t.median(), t.min(), t.max(),
                is_tg ? std::to_string(t.median() * t.bytes_per_token / 1e9).substr(0, 6).c_str() : "-");
  }
  std::printf("%s | logits %s\n", summary.c_str(), hash_hex);
  std::printf("weights %.1f MiB read per token%s | load %.0f ms | peak RSS %.1f MiB (without --membw's buffers) | kernels %s\n",
              weight_bytes / 1048576.0, weights_huge ? " (2 MiB pages)" : "", load_ms, peak_rss_mib,
              std::string(eng->kernel_name()).c_str());
  if (membw_gb_s > 0) {
    std::printf("read bandwidth (--membw, best pass): %zu readings, %.1f-%.1f GB/s%s\n", readings.size(),
                *std::min_element(readings.begin(), readings.end()), membw_gb_s,
                bracket ? " (around every tg run)" : " (one, after the tests: this kernel does not let the peak RSS be reset)");
  }
  return 0;
}

}  // namespace lumen::cli
