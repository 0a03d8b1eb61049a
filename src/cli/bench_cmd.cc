// lumen bench: pp / tg rates through the same engine every other command uses.
//
//   ppN       one request of N random tokens, prefilled in one step; rate = N / time.
//   tgN       one request generating N tokens one step at a time (after a 1-token prompt);
//             rate = N / time of the N decode steps.
//   tgN@dD    the same after D random tokens are already in the KV cache (attention over a
//             long cache is its own cost). The depth's prefill is not part of the tg rate; it
//             runs in chunks of --batch-size (default 512, or the largest -p if larger, as
//             llama-bench's ubatch), and its steps and rate are reported beside the test
//             (depth_prefill_steps, depth_prefill_tok_s): a depth prefilled one token per step
//             (a batch of 1, what -p 0 used to give) is visible there.
//
// Each test runs -r times after one warm-up; the median is reported with min and max.
// Every run uses fresh random tokens and the prefix cache is off, so a repeated prompt is
// computed again rather than found in the cache.
// Bytes moved per generated token = weight bytes (every matrix once + one embedding row)
// + the KV cache read at that depth; dividing by time gives GB/s, compared with the
// machine's read bandwidth measured in the same process (--membw, STREAM-like) when asked:
// around every tg run and, every --membw-every ms of decoding, inside it (see run_model),
// each stretch of decoding set against the readings on either side of it. The bandwidth test's 512 MiB
// buffer does not count in the peak RSS reported.
// It reads memory mapped like the weights (2 MiB pages when the weights got them).
// A hash of the logits of the first generated token proves the kernels computed the same
// thing as the last run (same kernels table, same model, same random prompt).
#include "cli/bench_cmd.h"

#include <algorithm>
#include <functional>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <random>
#include <sstream>

#include <nlohmann/json.hpp>

#include "base/mapped_file.h"
#include "base/timer.h"
#include "cli/bench_grammar.h"
#include "cli/bench_spec.h"
#include "cli/common.h"
#include "cli/progress_bar.h"
#include "roofline/membw.h"
#include "roofline/peak_flops.h"
#include "roofline/predict.h"

namespace lumen::cli {
namespace {

struct TestResult {
  std::string name;     // "pp512", "tg128", "tg128@d4096"
  std::vector<double> tok_s;
  double bytes_per_token = 0;  // tg: weights + average KV read per token
  // tg with --membw: every bandwidth reading taken for this test, in order (or the one
  // reading for all runs, where they could not be bracketed).
  std::vector<double> membw_gb_s;
  // Run k's roof: each stretch of its decoding between two readings against the higher of
  // the two, weighted by the stretch's decode time (empty: the one reading is the roof).
  std::vector<double> roof_gb_s_runs = {};
  // Run k's roof as the higher of the readings just before and just after the whole run.
  std::vector<double> ends_gb_s_runs = {};
  int64_t n_prompt = 0, n_gen = 0, depth = 0;  // the test's shape (pp: n_prompt; tg: n_gen at depth)
  // tg at depth: each run's prefill of the depth (engine steps, tok/s); not in tok_s.
  std::vector<int64_t> depth_prefill_steps = {};
  std::vector<double> depth_prefill_tok_s = {};
  double median() const;
  double roof_gb_s(size_t k) const { return k < roof_gb_s_runs.size() ? roof_gb_s_runs[k] : membw_gb_s.back(); }
  // Each run's GB/s as % of its roof (or of `roofs`); empty without readings.
  std::vector<double> pct_runs(const std::vector<double>* roofs = nullptr) const {
    std::vector<double> pct;
    if (membw_gb_s.empty() || (roofs && roofs->size() < tok_s.size())) return pct;
    for (size_t k = 0; k < tok_s.size(); ++k)
      pct.push_back(100.0 * tok_s[k] * bytes_per_token / 1e9 / (roofs ? (*roofs)[k] : roof_gb_s(k)));
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
  double decode_ms = 0;        // wall time of the steps after the first token's
  int64_t n_decode_steps = 0;
  uint64_t logits_hash = 0;
  int64_t n_steps_prompt = 0;  // engine steps until the first token was sampled (the prefill)
  bool ok = false;
  std::string error;
};

// Called between two decode steps with the decode time so far (RunOutcome::decode_ms); its
// own time is not decode time.
using DecodePause = std::function<void(double decode_ms)>;

RunOutcome run_request(engine::Engine& eng, std::vector<int32_t> prompt, int32_t max_tokens,
                       const DecodePause& pause = nullptr) {
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
  bool first_token = false;
  while (eng.has_work()) {
    const bool decoding = first_token;
    if (!first_token) ++out.n_steps_prompt;
    const double t0 = now_ms();
    for (engine::RequestEvent& ev : eng.step()) {
      if (!ev.new_token_ids.empty()) first_token = true;
      if (ev.logits_hash) out.logits_hash = ev.logits_hash;
      if (ev.finish_reason == engine::FinishReason::kError) out.error = ev.error;
    }
    if (decoding) {
      out.decode_ms += now_ms() - t0;
      ++out.n_decode_steps;
      if (pause && eng.has_work()) pause(out.decode_ms);
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
  return huge_page_bytes(reinterpret_cast<const void*>(lo), hi - lo) * 2 >= static_cast<int64_t>(hi - lo);
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

// What to measure: every (model, threads) pair loads once and runs every test.
struct BenchPlan {
  std::vector<std::string> models;
  std::vector<int64_t> n_prompts, n_gens, depths, threads;
  int64_t reps = 3;
  int64_t membw_every_ms = 250;  // with --membw: a reading after this much decoding inside a tg run (0: none)
  bool membw_every_given = false;  // --membw-every was given: also for models that fit in a cache
  bool want_membw = false;
  bool vs_roofline = false;
  // A bar over all the runs on a terminal (stderr); null elsewhere.
  convert::Progress* progress = nullptr;
  mutable uint64_t n_runs_done = 0;
  void run_done(const std::string& what) const {
    if (progress) progress->update(++n_runs_done, what);
  }
  uint64_t n_runs() const {
    uint64_t n_tests = 0;
    for (int64_t p : n_prompts) n_tests += p > 0;
    for (int64_t n : n_gens)
      if (n > 0) {
        n_tests += 1;
        for (int64_t d : depths) n_tests += d > 0;
      }
    return models.size() * threads.size() * n_tests * static_cast<uint64_t>(reps);
  }
};

// "-p 64,512 -p 1024" -> {64, 512, 1024}; the fallback when the flag is absent.
Result<std::vector<int64_t>> int_list(const ArgParser& args, const std::string& name, int64_t fallback, int64_t min_value,
                                      int64_t max_value) {
  std::vector<int64_t> out;
  for (const std::string& value : args.get_all(name)) {
    std::string item;
    std::istringstream in(value);
    while (std::getline(in, item, ',')) {
      char* end = nullptr;
      errno = 0;
      const long long x = std::strtoll(item.c_str(), &end, 10);
      if (item.empty() || *end != '\0' || errno == ERANGE || x < min_value || x > max_value)
        return error("lumen bench: " + name + " expects integers in [" + std::to_string(min_value) + ", " +
                     std::to_string(max_value) + "], comma-separated; got '" + item + "' in '" + value + "'");
      out.push_back(x);
    }
  }
  if (out.empty()) out.push_back(fallback);
  return out;
}

// One (model, threads) pair: its tests as JSON rows, and the lines the text report adds.
struct ModelRun {
  std::vector<nlohmann::json> rows;
  std::vector<std::string> notes;
};

// Loads `model` on n_threads and runs the plan's tests; false after reporting an error.
bool run_model(const ArgParser& args, const BenchPlan& plan, const std::string& model, int n_threads, ModelRun* out) {
  auto config = engine_config_from_args(args, false);
  if (!config.ok()) {
    std::fprintf(stderr, "error: %s\n", config.message().c_str());
    return false;
  }
  engine::EngineConfig c = *config;
  c.n_threads = n_threads;
  c.max_seqs = 1;
  c.enable_prefix_cache = false;  // every run computes its whole prompt
  const int64_t max_p = *std::max_element(plan.n_prompts.begin(), plan.n_prompts.end());
  const int64_t max_n = *std::max_element(plan.n_gens.begin(), plan.n_gens.end());
  const int64_t max_d = *std::max_element(plan.depths.begin(), plan.depths.end());
  const int64_t need_ctx = std::max<int64_t>({max_p, max_d + max_n + 2, max_n + 2, 16});
  if (c.n_ctx <= 0 || c.n_ctx < need_ctx) c.n_ctx = static_cast<int32_t>(need_ctx);
  // A pp test is one step; a depth's prefill is chunked at the default (or given) batch.
  if (!args.has("--batch-size")) c.max_batch_tokens = static_cast<int32_t>(std::max<int64_t>(max_p, c.max_batch_tokens));
  const double load_t0 = now_ms();
  std::unique_ptr<engine::Engine> eng = load_engine_or_report(model, c);
  if (!eng) return false;
  const double load_ms = now_ms() - load_t0;
  const model::HParams& hp = eng->hparams();
  const gguf::ModelFile& file = eng->model().file();
  const double weight_bytes = static_cast<double>(model::weight_bytes_per_token(eng->model().weights(), hp));
  const model::KvLayout& kv_layout = eng->model().kv_layout();  // MLA: one latent row per layer
  double kv_bytes_per_ctx_token = 0;
  for (int32_t g = 0; g < kv_layout.n_groups(); ++g)
    kv_bytes_per_ctx_token += static_cast<double>(kv_layout.group_bytes_per_token(g, c.kv_dtypes));
  const std::string label = model_label(model);
  const std::string type = main_weight_type(file);
  uint64_t model_bytes = 0;
  int64_t n_params = 0;
  for (const gguf::TensorInfo& t : file.tensors()) model_bytes += t.view.n_bytes, n_params += t.view.n_elements();

  std::vector<TestResult> results;
  uint64_t logits_hash = 0;
  std::string error;
  // Warm-up: touch every weight page once (and let the CPU clock settle).
  RunOutcome warm = run_request(*eng, random_tokens(std::min<int64_t>(max_p > 0 ? max_p : 8, 32), hp.n_vocab, 1), 2);
  if (!warm.ok) error = warm.error;
  const bool weights_huge = weights_on_huge_pages(eng->model().weights());

  // --- memory bandwidth, same process, same threads, around and during every tg run ---
  // The machine's bandwidth moves between levels (here about 35 and 60-65 GB/s in 2026-11,
  // 50 and 80 before), whatever runs, at times for minutes, at times every few seconds, so
  // a reading taken once, before or after the tests, or even just before and after a run
  // of a few seconds, can describe another level than the one the run streamed at. So a
  // tg run is cut into stretches of about --membw-every ms of decoding with a reading
  // between each two (decoding pauses for it; the pause is not decode time), and before
  // and after the run (consecutive runs share the one between them). Each stretch's roof
  // is the higher of the readings on its two sides; the run's roof is the stretches'
  // roofs weighted by their decode time, its % its GB/s over that roof, and a test's % the
  // median over its runs. The readings share one 512 MiB buffer (ReadBandwidthMeter), which
  // does not count in the peak RSS reported: the peak is reset after every reading and
  // each peak seen after the buffer exists is taken without it. Where the kernel does not
  // allow the reset, there is one reading, after all the tests. A model whose weights are
  // smaller than the test's buffer may sit in the caches, which a reading flushes, slowing the
  // tokens after it: such a model gets readings inside its runs only when --membw-every is
  // given.
  const int64_t every_ms =
      plan.membw_every_given || weight_bytes >= static_cast<double>(roofline::kMinRecommendedMembwBytes) ? plan.membw_every_ms : 0;
  const bool want_membw = plan.want_membw || plan.vs_roofline;
  std::optional<ThreadPool> membw_pool;
  if (want_membw) membw_pool.emplace(n_threads);
  std::optional<roofline::ReadBandwidthMeter> meter;
  double peak_rss_kib = static_cast<double>(proc_status_kib("VmHWM"));
  auto sample_peak_rss = [&] {
    const double kib = static_cast<double>(proc_status_kib("VmHWM"));
    peak_rss_kib = std::max(peak_rss_kib, kib - (meter ? static_cast<double>(meter->n_bytes()) / 1024.0 : 0.0));
  };
  const bool bracket = want_membw && reset_peak_rss();
  std::vector<double> readings;     // GB/s, in the order taken
  bool reading_is_fresh = false;    // nothing has run since the last reading
  auto take_reading = [&] {
    sample_peak_rss();
    if (!meter) meter.emplace(*membw_pool, roofline::kDefaultMembwBytes, weights_huge);
    const roofline::MembwResult r = meter->measure();
    if (bracket) reset_peak_rss();
    readings.push_back(r.best_bytes_per_s / 1e9);
    reading_is_fresh = true;
  };
  for (const int64_t n_prompt : plan.n_prompts) {
    if (n_prompt <= 0 || !error.empty()) continue;
    TestResult t{"pp" + std::to_string(n_prompt), {}, weight_bytes, {}};
    t.n_prompt = n_prompt;
    for (int64_t r = 0; r < plan.reps && error.empty(); ++r) {
      const double t0 = now_ms();
      RunOutcome o = run_request(*eng, random_tokens(n_prompt, hp.n_vocab, 42 + r), 1);
      const double ms = o.timings.first_token_ms - t0;
      plan.run_done(label + " t" + std::to_string(n_threads) + " " + t.name);
      if (!o.ok) error = o.error;
      t.tok_s.push_back(n_prompt / (ms / 1000.0));
      logits_hash = o.logits_hash;
    }
    results.push_back(t);
  }
  const bool any_pp = !results.empty();
  auto run_tg = [&](int64_t n_gen, int64_t d) {
    TestResult t{"tg" + std::to_string(n_gen) + (d > 0 ? "@d" + std::to_string(d) : ""), {}, 0, {}};
    t.n_gen = n_gen;
    t.depth = d;
    // Average KV bytes read per generated token: the context grows from d+1 to d+n.
    t.bytes_per_token = weight_bytes + kv_bytes_per_ctx_token * (d + 1 + (n_gen + 1) / 2.0);
    for (int64_t r = 0; r < plan.reps && error.empty(); ++r) {
      if (bracket && !reading_is_fresh) take_reading();
      if (bracket && r == 0) t.membw_gb_s.push_back(readings.back());
      reading_is_fresh = false;
      // The decode time of each stretch between two readings, and the run's first reading.
      const size_t first_reading = readings.size() - (bracket ? 1 : 0);
      std::vector<double> stretch_ms;
      double cut_ms = 0;
      const DecodePause pause = [&](double decode_ms) {
        if (every_ms <= 0 || decode_ms - cut_ms < static_cast<double>(every_ms)) return;
        stretch_ms.push_back(decode_ms - cut_ms);
        cut_ms = decode_ms;
        take_reading();
        t.membw_gb_s.push_back(readings.back());
      };
      const double t0 = now_ms();
      RunOutcome o = run_request(*eng, random_tokens(std::max<int64_t>(d, 1), hp.n_vocab, 7 + r),
                                 static_cast<int32_t>(n_gen + 1), bracket ? pause : DecodePause());
      if (!o.ok) error = o.error;
      if (d > 0) {
        t.depth_prefill_steps.push_back(o.n_steps_prompt);
        t.depth_prefill_tok_s.push_back(d / ((o.timings.first_token_ms - t0) / 1000.0));
      }
      plan.run_done(label + " t" + std::to_string(n_threads) + " " + t.name);
      t.tok_s.push_back(static_cast<double>(o.n_decode_steps) / (o.decode_ms / 1000.0));
      if (!any_pp) logits_hash = o.logits_hash;
      if (bracket && o.ok) {
        stretch_ms.push_back(o.decode_ms - cut_ms);
        take_reading();
        t.membw_gb_s.push_back(readings.back());
        double weighted = 0, total_ms = 0;
        for (size_t j = 0; j < stretch_ms.size(); ++j) {
          weighted += stretch_ms[j] * std::max(readings[first_reading + j], readings[first_reading + j + 1]);
          total_ms += stretch_ms[j];
        }
        t.roof_gb_s_runs.push_back(total_ms > 0 ? weighted / total_ms : readings.back());
        t.ends_gb_s_runs.push_back(std::max(readings[first_reading], readings.back()));
      }
    }
    results.push_back(t);
  };
  for (const int64_t n_gen : plan.n_gens) {
    if (n_gen <= 0) continue;
    if (error.empty()) run_tg(n_gen, 0);
    for (const int64_t d : plan.depths)
      if (d > 0 && error.empty()) run_tg(n_gen, d);
  }
  if (!error.empty()) {
    std::fprintf(stderr, "error: %s: %s\n", label.c_str(), error.c_str());
    return false;
  }
  // Peak RSS of loading and of the model tests, without the bandwidth test's buffer.
  sample_peak_rss();
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
  if (plan.vs_roofline) {
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
  auto predict = [&](const TestResult& t, double bytes_per_s) -> std::optional<roofline::Prediction> {
    roofline::PredictOptions o;
    o.n_prompt = std::max<int64_t>(t.n_prompt, 1);
    o.n_gen = std::max<int64_t>(t.n_gen, 1);
    o.n_depth = t.depth;
    o.kv_bytes_per_elem = kv_bytes_per_elem(c.kv_dtypes, hp.head_dim);
    roofline::MachineRates r = *rates;
    r.read_bytes_per_s = bytes_per_s;
    auto p = roofline::predict_lumen(file, r, o);
    if (!p.ok()) return std::nullopt;
    return *p;
  };
  auto predicted_for = [&](const TestResult& t) -> std::optional<Predicted> {
    if (!rates) return std::nullopt;
    const bool is_tg = t.name.rfind("tg", 0) == 0;
    if (!is_tg) {
      auto p = predict(t, rates->read_bytes_per_s);
      if (!p) return std::nullopt;
      return Predicted{p->pp_tok_s, t.median() / p->pp_tok_s, p->pp_binding_roof};
    }
    std::vector<double> tok, ratio;
    const char* roof = "";
    for (size_t k = 0; k < t.tok_s.size(); ++k) {
      auto p = predict(t, t.roof_gb_s(k) * 1e9);
      if (!p) return std::nullopt;
      tok.push_back(p->tg_tok_s);
      ratio.push_back(t.tok_s[k] / p->tg_tok_s);
      roof = p->binding_roof;
    }
    return Predicted{median_of(tok), median_of(ratio), roof};
  };

  char hash_hex[17];
  std::snprintf(hash_hex, sizeof hash_hex, "%016" PRIx64, logits_hash);
  std::string summary = "lumen bench: " + label + " " + type + ", " + std::to_string(n_threads) + " threads";
  for (const TestResult& t : results) {
    const bool is_tg = t.name.rfind("tg", 0) == 0;
    const double med = t.median();
    const double gb_s = is_tg ? med * t.bytes_per_token / 1e9 : 0.0;
    const std::vector<double> pct_runs = t.pct_runs();
    const double pct = is_tg ? median_of(pct_runs) : 0.0;
    // The same runs against the higher of the readings at their two ends only.
    const double pct_ends = t.roof_gb_s_runs.empty() ? 0.0 : median_of(t.pct_runs(&t.ends_gb_s_runs));
    nlohmann::json j = {{"test", t.name}, {"tok_s", med}, {"tok_s_min", t.min()}, {"tok_s_max", t.max()},
                        {"threads", n_threads}, {"model", label}, {"type", type},
                        {"model_bytes", model_bytes}, {"n_params", n_params},
                        {"weight_bytes_per_token", weight_bytes}, {"peak_rss_mib", peak_rss_mib},
                        {"load_ms", load_ms}, {"weights_huge_pages", weights_huge},
                        {"logits_hash", hash_hex}, {"kernels", std::string(eng->kernel_name())}};
    j["gb_s"] = is_tg ? nlohmann::json(gb_s) : nlohmann::json(nullptr);
    j["pct_bandwidth"] = pct > 0 ? nlohmann::json(pct) : nlohmann::json(nullptr);
    if (!t.depth_prefill_steps.empty()) {
      j["depth_prefill_steps"] = t.depth_prefill_steps;
      j["depth_prefill_tok_s"] = median_of(t.depth_prefill_tok_s);
    }
    if (membw_gb_s > 0) {
      j["membw_gb_s"] = membw_gb_s;  // the highest reading of the whole run
      if (is_tg) {
        j["membw_readings_gb_s"] = t.membw_gb_s;
        j["pct_bandwidth_runs"] = pct_runs;
        if (!t.roof_gb_s_runs.empty()) {
          j["roof_gb_s_runs"] = t.roof_gb_s_runs;  // each run's readings, weighted by decode time
          j["pct_bandwidth_run_ends"] = pct_ends;
        }
      }
    }
    const std::optional<Predicted> pr = predicted_for(t);
    if (pr) {
      j["predicted_tok_s"] = pr->tok_s;
      j["ratio_to_predicted"] = pr->ratio;
      j["binding_roof"] = pr->roof;
    }
    out->rows.push_back(j);
    char line[512];
    if (is_tg) {
      std::snprintf(line, sizeof line, " | %s %.1f tok/s, %.1f GB/s", t.name.c_str(), med, gb_s);
      summary += line;
      if (!t.depth_prefill_tok_s.empty()) {
        std::snprintf(line, sizeof line, " (depth prefilled at %.1f tok/s)", median_of(t.depth_prefill_tok_s));
        summary += line;
      }
      if (pct > 0) {
        const auto [lo, hi] = std::minmax_element(t.membw_gb_s.begin(), t.membw_gb_s.end());
        if (t.roof_gb_s_runs.empty())
          std::snprintf(line, sizeof line, " (%.0f%% of the bandwidth read after the tests, %.1f GB/s)", pct, *hi);
        else if (every_ms <= 0)
          std::snprintf(line, sizeof line, " (%.0f%% of the bandwidth read around its runs, %.1f-%.1f GB/s)", pct, *lo, *hi);
        else
          std::snprintf(line, sizeof line,
                        " (%.0f%% of the bandwidth read during its runs, %.0f%% of the readings at their ends; %.1f-%.1f GB/s)",
                        pct, pct_ends, *lo, *hi);
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
  out->notes.push_back(summary + " | logits " + hash_hex);
  char line[512];
  std::snprintf(line, sizeof line, "weights %.1f MiB read per token%s | load %.0f ms | peak RSS %.1f MiB (without --membw's buffers) | kernels %s",
                weight_bytes / 1048576.0, weights_huge ? " (2 MiB pages)" : "", load_ms, peak_rss_mib,
                std::string(eng->kernel_name()).c_str());
  out->notes.push_back(line);
  if (membw_gb_s > 0) {
    const std::string when = !bracket ? " (one, after the tests: this kernel does not let the peak RSS be reset)"
                             : every_ms > 0
                                 ? " (around every tg run and after every " + std::to_string(every_ms) + " ms of its decoding)"
                                 : std::string(" (around every tg run)");
    std::snprintf(line, sizeof line, "read bandwidth (--membw, best pass): %zu readings, %.1f-%.1f GB/s%s", readings.size(),
                  *std::min_element(readings.begin(), readings.end()), membw_gb_s, when.c_str());
    out->notes.push_back(line);
  }
  return true;
}

std::string csv_field(const nlohmann::json& v) {
  if (v.is_null()) return "";
  if (!v.is_string()) return v.dump();
  std::string s = v.get<std::string>(), q = "\"";
  for (char ch : s) q += ch == '"' ? std::string("\"\"") : std::string(1, ch);
  return q + "\"";
}

// One row per (model, test, threads) as llama-bench prints it: t/s is the median with the
// spread of the runs.
void print_markdown(const std::vector<nlohmann::json>& rows) {
  const std::vector<std::string> head = {"model", "type", "size", "params", "kernels", "threads", "test", "t/s", "GB/s"};
  std::vector<std::vector<std::string>> cells;
  for (const nlohmann::json& j : rows) {
    char ts[96], gb[32], size[32], params[32];
    std::snprintf(ts, sizeof ts, "%.2f ± %.2f", j["tok_s"].get<double>(),
                  (j["tok_s_max"].get<double>() - j["tok_s_min"].get<double>()) / 2);
    std::snprintf(gb, sizeof gb, "%s", j["gb_s"].is_null() ? "-" : std::to_string(j["gb_s"].get<double>()).substr(0, 6).c_str());
    std::snprintf(size, sizeof size, "%.2f MiB", j["model_bytes"].get<double>() / 1048576.0);
    const double np = j["n_params"].get<double>();
    if (np >= 1e9) std::snprintf(params, sizeof params, "%.2f B", np / 1e9);
    else std::snprintf(params, sizeof params, "%.2f M", np / 1e6);
    cells.push_back({j["model"].get<std::string>(), j["type"].get<std::string>(), size, params,
                     j["kernels"].get<std::string>(), std::to_string(j["threads"].get<int>()), j["test"].get<std::string>(),
                     ts, gb});
  }
  std::vector<size_t> width(head.size());
  for (size_t k = 0; k < head.size(); ++k) {
    width[k] = head[k].size();
    for (const auto& row : cells) width[k] = std::max(width[k], row[k].size() - (k == 7 ? 1 : 0));  // "±" is 2 bytes
  }
  auto print_row = [&](const std::vector<std::string>& row, bool is_head) {
    std::string line = "|";
    for (size_t k = 0; k < row.size(); ++k) {
      const size_t w = width[k] + (!is_head && k == 7 ? 1 : 0);
      const bool right = k >= 5;  // numbers
      const std::string pad(w > row[k].size() ? w - row[k].size() : 0, ' ');
      line += " " + (right ? pad + row[k] : row[k] + pad) + " |";
    }
    std::puts(line.c_str());
  };
  print_row(head, true);
  std::string rule = "|";
  for (size_t k = 0; k < head.size(); ++k) rule += (k >= 5 ? " " + std::string(width[k] - 1, '-') + ": |" : " " + std::string(width[k], '-') + " |");
  std::puts(rule.c_str());
  for (const auto& row : cells) print_row(row, false);
}

void print_rows(const std::vector<nlohmann::json>& rows, const std::string& format) {
  if (format == "json") {
    nlohmann::json arr = nlohmann::json::array();
    for (const nlohmann::json& j : rows) arr.push_back(j);
    std::puts(arr.dump().c_str());
  } else if (format == "jsonl") {
    for (const nlohmann::json& j : rows) std::puts(j.dump().c_str());
  } else if (format == "csv") {
    const std::vector<std::string> keys = {"model", "type", "model_bytes", "n_params", "kernels", "threads", "test",
                                           "tok_s", "tok_s_min", "tok_s_max", "gb_s", "pct_bandwidth", "logits_hash"};
    std::string line;
    for (const std::string& k : keys) line += (line.empty() ? "" : ",") + k;
    std::puts(line.c_str());
    for (const nlohmann::json& j : rows) {
      line.clear();
      for (size_t k = 0; k < keys.size(); ++k) line += (k ? "," : "") + csv_field(j.value(keys[k], nlohmann::json()));
      std::puts(line.c_str());
    }
  } else {
    print_markdown(rows);
  }
}

}  // namespace

int cmd_bench(int argc, char** argv, int first) {
  std::vector<OptionSpec> specs = engine_option_specs();
  for (OptionSpec& s : specs) {
    if (s.names.back() == "--model") s.repeatable = true, s.help = "model (repeatable: every model runs every test)";
    if (s.names.back() == "--threads") s.repeatable = true, s.help = "thread counts, e.g. 1,2 (default: all cores)";
  }
  specs.push_back({{"-p", "--n-prompt"}, "N,..", "prompt tokens of the pp tests (default 512; 0 = skip)", true});
  specs.push_back({{"-n", "--n-gen"}, "N,..", "generated tokens of the tg tests (default 128; 0 = skip)", true});
  specs.push_back({{"-d", "--depth"}, "D,..", "also run each tg at these KV depths (tokens already cached)", true});
  specs.push_back({{"-r", "--repetitions"}, "N", "runs per test; the median is reported (default 3)"});
  specs.push_back({{"-o", "--output"}, "FMT", "md (default: one row per model, test and threads, like llama-bench), json, jsonl, csv"});
  specs.push_back({{"--membw"}, "", "measure this machine's read bandwidth in the same process, around every tg run and during it (--membw-every)"});
  specs.push_back({{"--membw-every"}, "MS", "with --membw: also read it after every MS ms of decoding inside a tg run (default 250 for models of 256 MiB or more, "
                   "which no cache holds; 0 = only around the runs)"});
  specs.push_back({{"--vs-roofline"}, "", "print the roofline prediction next to each measurement"});
  specs.push_back({{"--json"}, "", "the same as -o json"});
  for (OptionSpec& s : spec_option_specs()) {
    if (s.names[0] == "--spec") s.help = "speculative vs plain, alternating: ngram, replay or random (bench_spec.cc)";
    specs.push_back(s);
  }
  specs.push_back({{"--draft-fixed"}, "", "with --spec replay: propose exactly --draft-max tokens every step (no verify-cost "
                                       "cap; replay's acceptance 1 keeps k there): the speedup at that k"});
  specs.push_back({{"-f", "--file"}, "PATH", "with --spec: prompts, one per line (default: story beginnings)"});
  for (OptionSpec& s : grammar_option_specs()) {
    s.help = s.names[0] == "--json-schema" ? "TPOT with and without this JSON Schema's grammar, alternating, and the mask's cost (bench_grammar.cc)"
                                           : "the same with a GBNF grammar";
    s.repeatable = true;  // several only with --mask-walks
    specs.push_back(s);
  }
  specs.push_back({{"--temp"}, "T", "with --json-schema / --grammar-file: sampling temperature (default 1.0)"});
  specs.push_back({{"--mask-walks"}, "N",
                   "with --json-schema / --grammar-file (repeatable): no decoding; N random walks of up to -n tokens per "
                   "grammar, each replayed -r times, fill_mask per step = the fastest replay"});
  ArgParser args("bench", "lumen bench -m MODEL [-m MODEL2] [-t 1,2] [-p 512] [-n 128] [-d D] [-r 3] [--membw] [-o md|json|jsonl|csv]", specs);
  int rc = 0;
  if (!parse_or_report(args, argc, argv, first, rc)) return rc;
  BenchPlan plan;
  plan.models = args.get_all("--model");
  auto n_prompts = int_list(args, "--n-prompt", 512, 0, 1 << 16);
  auto n_gens = int_list(args, "--n-gen", 128, 0, 1 << 16);
  auto depths = int_list(args, "--depth", 0, 0, 1 << 20);
  auto threads = int_list(args, "--threads", 0, 1, 1024);
  auto reps = args.get_int("--repetitions", 3, 1, 1000);
  auto membw_every = args.get_int("--membw-every", 250, 0, 3600 * 1000);
  for (const Status* st : {&n_prompts.status(), &n_gens.status(), &depths.status(), &threads.status(), &reps.status(),
                           &membw_every.status()}) {
    if (!st->ok()) {
      std::fprintf(stderr, "error: %s\n", st->message().c_str());
      return 2;
    }
  }
  std::string format = args.has("--json") ? "json" : args.get_or("--output", "md");
  if (format != "md" && format != "json" && format != "jsonl" && format != "csv") {
    std::fprintf(stderr, "error: lumen bench: -o '%s' is not md, json, jsonl or csv\n", format.c_str());
    return 2;
  }
  plan.n_prompts = *n_prompts, plan.n_gens = *n_gens, plan.depths = *depths, plan.reps = *reps;
  for (int64_t t : *threads) plan.threads.push_back(threads_or_all_cores(t));
  plan.want_membw = args.has("--membw");
  plan.membw_every_ms = *membw_every;
  plan.membw_every_given = args.has("--membw-every");
  if (args.has("--membw-every") && !plan.want_membw && !args.has("--vs-roofline")) {
    std::fprintf(stderr, "error: lumen bench: --membw-every needs --membw\n");
    return 2;
  }
  plan.vs_roofline = args.has("--vs-roofline");
  const bool json = format == "json";

  // --- memory bandwidth only (no model) ---
  if (plan.want_membw && plan.models.empty()) {
    for (const int64_t n_threads : plan.threads) {
      ThreadPool pool(static_cast<int>(n_threads));
      roofline::MembwResult r = roofline::measure_read_bandwidth_detailed(pool, roofline::kDefaultMembwBytes, false);
      roofline::MembwResult h = roofline::measure_read_bandwidth_detailed(pool, roofline::kDefaultMembwBytes, true);
      if (format != "md") {
        nlohmann::json j = {{"test", "membw"}, {"gb_s", r.best_bytes_per_s / 1e9}, {"gb_s_median", r.median_bytes_per_s / 1e9},
                            {"gb_s_hugepages", h.best_bytes_per_s / 1e9}, {"threads", n_threads},
                            {"bytes", r.n_bytes}};
        std::puts(json ? nlohmann::json::array({j}).dump().c_str() : j.dump().c_str());
      } else {
        std::printf("lumen bench --membw: %d threads, %zu MiB: read %.1f GB/s (median %.1f), with huge pages %.1f GB/s%s\n",
                    static_cast<int>(n_threads), r.n_bytes >> 20, r.best_bytes_per_s / 1e9, r.median_bytes_per_s / 1e9,
                    h.best_bytes_per_s / 1e9, h.huge_pages ? "" : " (THP not granted)");
      }
    }
    return 0;
  }
  if (plan.models.empty()) {
    std::fprintf(stderr, "error: missing -m/--model PATH\n");
    return 2;
  }

  const bool spec = args.has("--spec") || args.has("--draft-model");
  const bool grammar = args.has("--json-schema") || args.has("--grammar-file");
  if (args.has("--mask-walks") && !grammar) {
    std::fprintf(stderr, "error: lumen bench: --mask-walks needs --json-schema or --grammar-file\n");
    return 2;
  }
  if (spec || grammar) {  // one engine, one request at a time, alternating runs
    const char* what = spec ? "--spec" : "--json-schema / --grammar-file";
    if (spec && grammar) {
      std::fprintf(stderr, "error: lumen bench: give --spec or --json-schema / --grammar-file, not both\n");
      return 2;
    }
    if (plan.models.size() > 1 || plan.threads.size() > 1 || plan.n_gens.size() > 1) {
      std::fprintf(stderr, "error: lumen bench %s takes one -m, one -t and one -n\n", what);
      return 2;
    }
    auto config = engine_config_from_args(args, false);
    if (!config.ok()) {
      std::fprintf(stderr, "error: %s\n", config.message().c_str());
      return 2;
    }
    engine::EngineConfig c = *config;
    c.n_threads = static_cast<int>(plan.threads[0]);
    c.max_seqs = 1;
    c.enable_prefix_cache = false;
    if (c.n_ctx <= 0) c.n_ctx = static_cast<int32_t>(std::max<int64_t>(512, plan.n_gens[0] + 256));
    return spec ? run_spec_bench(args, c, plan.n_gens[0], plan.reps, json)
                : run_grammar_bench(args, c, plan.n_gens[0], plan.reps, json);
  }

  std::vector<nlohmann::json> rows;
  std::vector<std::string> notes;
  std::optional<ProgressBar> bar;
  if (::isatty(::fileno(stderr))) {
    bar.emplace(stderr, true);
    plan.progress = &*bar;
    bar->start("bench", plan.n_runs(), "runs");
  }
  for (const std::string& model : plan.models) {
    for (const int64_t n_threads : plan.threads) {
      ModelRun run;
      if (!run_model(args, plan, model, static_cast<int>(n_threads), &run)) {
        if (bar) bar->finish();
        return 1;
      }
      rows.insert(rows.end(), run.rows.begin(), run.rows.end());
      notes.insert(notes.end(), run.notes.begin(), run.notes.end());
    }
  }
  if (bar) bar->finish();
  print_rows(rows, format);
  if (format == "md") {
    std::puts("");
    for (const std::string& n : notes) std::puts(n.c_str());
  }
  return 0;
}

}  // namespace lumen::cli
