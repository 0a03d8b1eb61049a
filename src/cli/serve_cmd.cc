// lumen serve: listens first (so /health can answer "loading"), loads the model on a
// second thread, serves until SIGINT / SIGTERM, then drains: readiness false, the listener
// closed, running requests finished (or ended at the --drain-timeout), exit 0. A second
// signal exits at once.
#include "cli/serve_cmd.h"

#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "base/cpu_affinity.h"
#include "base/log.h"
#include "base/mapped_file.h"
#include "base/timer.h"
#include "cli/common.h"
#include "engine/async_engine.h"
#include "gguf/model_file.h"
#include "roofline/predict.h"
#include "server/cors.h"
#include "server/server.h"
#include "tensor/dtype.h"
#include "tokenizer/chat_template.h"

namespace lumen::cli {
namespace {

// Tokens per forward step when neither --max-batch-tokens nor -b is given: room for the
// decode rows of a full batch (--max-seqs) plus a prompt chunk of the model's prefill knee
// on this machine (the prompt length below which a pass costs one read of the weights,
// from the roofline with the measured bandwidth and peak rates), so that a step carrying
// a chunk costs about what a decode step costs. On CPUs the knee is a handful of tokens
// (quantized weights are small, arithmetic is slow), so the chunk is raised to
// kMinDefaultChunk: below that the matmul tiles run underfilled and per-step costs
// (dispatch, norms, attention setup) dominate. Rounded up to the 16-row matmul tile.
// kFallbackMaxBatchTokens when the knee cannot be computed.
constexpr int32_t kMinDefaultChunk = 64;
constexpr int32_t kFallbackMaxBatchTokens = 256;
constexpr int32_t kDefaultMaxSeqs = 8;
constexpr int32_t kDefaultMaxQueue = 64;

std::vector<OptionSpec> serve_option_specs() {
  std::vector<OptionSpec> specs = concat(engine_option_specs(), spec_option_specs());
  for (OptionSpec& spec : specs)  // the server's own default
    if (spec.names.back() == "--batch-size") spec.help = "same as --max-batch-tokens";
  std::vector<OptionSpec> more = {
      {{"--host"}, "ADDR", "address to listen on (default 127.0.0.1; anything else exposes the server)"},
      {{"--port"}, "N", "port to listen on (default 8080; 0: any free port, printed at start)"},
      {{"--api-key"}, "KEY", "require Authorization: Bearer KEY on every route but /health (or env LUMEN_API_KEY)"},
      {{"--alias"}, "NAME", "model name served by /v1/models and expected in requests (default: the model's)"},
      {{"--kv-memory"}, "SIZE", "KV cache memory, e.g. 2GiB (default: --max-seqs full contexts)"},
      {{"--max-seqs"}, "N", "sequences running at once (default 8; also the largest n a request may ask)"},
      {{"--max-batch-tokens"}, "N", "tokens per forward step (default: max-seqs + the prefill knee, at least 64; same as -b)"},
      {{"--max-queue"}, "N", "requests waiting for admission before new ones get 503 (default 64)"},
      {{"--http-threads"}, "N", "HTTP worker threads (default: max-seqs + max-queue + 8)"},
      {{"--max-body"}, "SIZE", "largest request body (default 4MiB)"},
      {{"--cpus"}, "LIST", "run on these CPUs only, e.g. 0-7,16-23 (default -t: their count); memory prefers their NUMA nodes"},
      {{"--numa-node"}, "N", "run on the CPUs of NUMA node N, with memory from it (instead of --cpus)"},
      {{"--replica-id"}, "ID", "sent back as the X-Replica-Id header of every response (letters, digits, . _ -)"},
      {{"--chat-template-file"}, "PATH", "use this Jinja chat template instead of the model's"},
      {{"--reasoning-format"}, "F", "auto (default: when the chat template is a thinking one), deepseek (always) or none: "
                                    "<think>...</think> goes to reasoning_content"},
      {{"--allowed-host"}, "NAME", "without --api-key, a Host / Origin name to serve besides loopback names (repeatable; '*': any)", true},
      {{"--cors-origin"}, "ORIGIN", "let pages from ORIGIN (scheme://host[:port], a comma list, or '*') call the API from a browser (repeatable; default: off)", true},
      {{"--drain-timeout"}, "SECONDS", "on SIGTERM / SIGINT, finish running requests for up to this long (default 30)"},
      {{"--request-timeout"}, "SECONDS", "a request's head and body must arrive within this (default 30)"},
      {{"--keep-alive-timeout"}, "SECONDS", "close idle keep-alive connections after this (default 15)"},
      {{"--max-connections"}, "N", "open HTTP connections at most (default 1024)"},
      {{"--max-connections-per-client"}, "N", "open connections per client address (default 256; 0: no limit)"},
      {{"--embeddings"}, "", "serve POST /v1/embeddings (pooled, L2-normalised hidden states; off by default)"},
      {{"--pooling"}, "mean|cls|last", "embedding pooling (default: the model's pooling_type; last for decoder LLMs)"},
      {{"--deterministic"}, "", "no effect (warns): results never depend on the batch, threads or prefix cache"},
      {{"--no-prefix-cache"}, "", "do not share KV blocks between requests with a common prefix"},
  };
  specs.insert(specs.end(), more.begin(), more.end());
  return specs;
}

struct ServeOptions {
  engine::EngineConfig engine;
  engine::AsyncEngineConfig async;
  server::ServerConfig server;
  int64_t drain_timeout_ms = 30000;
  std::vector<int> cpus;  // empty: wherever the kernel puts the threads
};

Result<int32_t> get_ms(const ArgParser& args, const char* flag, double fallback_s, double max_s) {
  LUMEN_ASSIGN_OR_RETURN(double seconds, args.get_float(flag, fallback_s, 0.05, max_s));
  return static_cast<int32_t>(seconds * 1000);
}

bool is_replica_id(const std::string& id) {
  return !id.empty() && id.size() <= 64 && std::all_of(id.begin(), id.end(), [](char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '.' || c == '_' || c == '-';
  });
}

Result<ServeOptions> serve_options_from_args(const ArgParser& args) {
  ServeOptions o;
  LUMEN_ASSIGN_OR_RETURN(o.engine, engine_config_from_args(args));
  LUMEN_TRY(spec_config_from_args(args, &o.engine.spec));
  LUMEN_ASSIGN_OR_RETURN(int64_t max_seqs, args.get_int("--max-seqs", kDefaultMaxSeqs, 1, 4096));
  o.engine.max_seqs = static_cast<int32_t>(max_seqs);
  if (args.has("--max-batch-tokens") && args.has("--batch-size"))
    return error("give one of --max-batch-tokens and -b/--batch-size");
  const char* batch_flag = args.has("--batch-size") ? "--batch-size" : "--max-batch-tokens";
  LUMEN_ASSIGN_OR_RETURN(int64_t batch, args.get_int(batch_flag, 0, 1, 1 << 16));
  o.engine.max_batch_tokens = static_cast<int32_t>(batch);  // 0: default_max_batch_tokens at load
  if (auto kv = args.get("--kv-memory")) {
    auto bytes = parse_bytes(*kv);
    if (!bytes.ok()) return error("--kv-memory: " + bytes.message());
    o.engine.kv_memory_bytes = *bytes;
  }
  if (args.has("--deterministic"))  // accepted so that old command lines keep working
    LUMEN_LOG_WARN("lumen serve: --deterministic is always on and the flag is ignored: a request's results "
                   "never depend on the batch, the threads or the prefix cache (tests/batch_invariance_test.cc)");
  o.engine.enable_prefix_cache = !args.has("--no-prefix-cache");
  LUMEN_ASSIGN_OR_RETURN(int64_t max_queue, args.get_int("--max-queue", kDefaultMaxQueue, 1, 1 << 20));
  o.async.max_queued_requests = static_cast<int32_t>(max_queue);

  server::ServerConfig& s = o.server;
  s.host = args.get_or("--host", "127.0.0.1");
  LUMEN_ASSIGN_OR_RETURN(int64_t port, args.get_int("--port", 8080, 0, 65535));
  s.port = static_cast<int>(port);
  s.api_key = args.get_or("--api-key", "");
  if (s.api_key.empty())
    if (const char* env = std::getenv("LUMEN_API_KEY")) s.api_key = env;
  s.model_alias = args.get_or("--alias", "");
  const int64_t default_threads = std::min<int64_t>(max_seqs + max_queue + 8, 1024);
  LUMEN_ASSIGN_OR_RETURN(int64_t threads, args.get_int("--http-threads", default_threads, 1, 4096));
  s.n_http_threads = static_cast<int32_t>(threads);
  if (auto body = args.get("--max-body")) {
    auto bytes = parse_bytes(*body);
    if (!bytes.ok()) return error("--max-body: " + bytes.message());
    if (*bytes < 1024 || *bytes > (int64_t{1} << 30)) return error("--max-body: must be in [1KiB, 1GiB]");
    s.max_body_bytes = *bytes;
  }
  if (auto path = args.get("--chat-template-file")) {
    auto text = read_text_file(*path);
    if (!text.ok()) return error("--chat-template-file: " + text.message());
    if (auto t = tok::ChatTemplate::parse(*text); !t.ok()) return error("--chat-template-file " + *path + ": " + t.message());
    s.chat_template = std::move(text).value();
  }
  const std::string reasoning = args.get_or("--reasoning-format", "auto");
  using Reasoning = server::ServerConfig::ReasoningFormat;
  if (reasoning == "auto") s.reasoning_format = Reasoning::kAuto;
  else if (reasoning == "deepseek") s.reasoning_format = Reasoning::kDeepseek;
  else if (reasoning == "none") s.reasoning_format = Reasoning::kNone;
  else return error("--reasoning-format: '" + reasoning.substr(0, 40) + "' is not auto, deepseek or none");
  s.replica_id = args.get_or("--replica-id", "");
  if (args.has("--replica-id") && !is_replica_id(s.replica_id))
    return error("--replica-id: '" + s.replica_id.substr(0, 80) + "' must be 1..64 letters, digits, '.', '_' or '-'");
  s.allowed_hosts = args.get_all("--allowed-host");
  for (const std::string& h : s.allowed_hosts)
    if (h.empty() || h.size() > 253 || h.find_first_of(" /\t") != std::string::npos)
      return error("--allowed-host: '" + h.substr(0, 80) + "' is not a host name");
  s.embeddings = args.has("--embeddings");
  o.engine.enable_embeddings = s.embeddings;
  if (auto pooling = args.get("--pooling")) {
    if (!s.embeddings) return error("--pooling: only with --embeddings");
    auto p = engine::parse_pooling(*pooling);
    if (!p.ok()) return error("--pooling: " + p.message());
    s.pooling = *p;
  }
  s.cors_origins = args.get_all("--cors-origin");
  if (auto cors = server::CorsPolicy::parse(s.cors_origins); !cors.ok()) return cors.status();
  if (args.has("--cpus") && args.has("--numa-node")) return error("give one of --cpus and --numa-node");
  if (auto list = args.get("--cpus")) {
    auto cpus = parse_cpu_list(*list);
    if (!cpus.ok()) return error("--cpus: " + cpus.message());
    o.cpus = std::move(cpus).value();
  }
  if (args.has("--numa-node")) {
    LUMEN_ASSIGN_OR_RETURN(int64_t node, args.get_int("--numa-node", 0, 0, 1023));
    auto cpus = cpus_of_numa_node(static_cast<int>(node));
    if (!cpus.ok()) return error("--numa-node: " + cpus.message());
    o.cpus = std::move(cpus).value();
  }
  LUMEN_ASSIGN_OR_RETURN(int32_t drain_ms, get_ms(args, "--drain-timeout", 30, 3600));
  o.drain_timeout_ms = drain_ms;
  LUMEN_ASSIGN_OR_RETURN(s.request_timeout_ms, get_ms(args, "--request-timeout", 30, 3600));
  LUMEN_ASSIGN_OR_RETURN(s.keep_alive_timeout_ms, get_ms(args, "--keep-alive-timeout", 15, 3600));
  LUMEN_ASSIGN_OR_RETURN(int64_t max_conns, args.get_int("--max-connections", 1024, 16, 1 << 20));
  s.max_connections = static_cast<int32_t>(max_conns);
  LUMEN_ASSIGN_OR_RETURN(int64_t per_client, args.get_int("--max-connections-per-client", 256, 0, 1 << 20));
  s.max_connections_per_client = static_cast<int32_t>(per_client);
  return o;
}

// Every connection is a descriptor: raise the soft limit to the hard one, and keep
// --max-connections (plus room for the model, logs and sockets being accepted) under it.
void fit_descriptor_limit(server::ServerConfig* s) {
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) != 0) return;
  if (r.rlim_cur < r.rlim_max) {
    r.rlim_cur = r.rlim_max;
    setrlimit(RLIMIT_NOFILE, &r);
    getrlimit(RLIMIT_NOFILE, &r);
  }
  constexpr int64_t kReserved = 64;
  const int64_t room = static_cast<int64_t>(r.rlim_cur) - kReserved;
  if (r.rlim_cur != RLIM_INFINITY && s->max_connections > room) {
    std::fprintf(stderr, "lumen serve: warning: --max-connections %d lowered to %lld (open-file limit %llu; raise it with ulimit -n)\n",
                 s->max_connections, static_cast<long long>(std::max<int64_t>(room, 16)),
                 static_cast<unsigned long long>(r.rlim_cur));
    s->max_connections = static_cast<int32_t>(std::max<int64_t>(room, 16));
  }
}

// The default token budget per step (see kMinDefaultChunk), and the knee it came from.
struct BatchDefault {
  int32_t max_batch_tokens = kFallbackMaxBatchTokens;
  int64_t knee_tokens = 0;  // 0: unknown (fallback)
};
BatchDefault default_max_batch_tokens(const std::string& model_path, const engine::EngineConfig& config) {
  BatchDefault d;
  auto file = gguf::open_model(model_path);
  if (!file.ok()) return d;  // the engine's load reports the error
  ThreadPool pool(threads_or_all_cores(config.n_threads));
  const roofline::MachineRates rates = roofline::measure_machine_rates(pool);
  // Bytes per element do not depend on the head size (a whole number of 32-element blocks).
  auto knee = roofline::prefill_knee_tokens(*file, rates, kv_bytes_per_elem(config.kv_dtypes, 32));
  if (!knee.ok()) return d;
  d.knee_tokens = *knee;
  const int64_t chunk = std::max<int64_t>(*knee, kMinDefaultChunk);
  const int64_t tokens = (config.max_seqs + chunk + 15) / 16 * 16;
  d.max_batch_tokens = static_cast<int32_t>(std::min<int64_t>(tokens, 1 << 16));
  return d;
}

bool is_loopback_host(const std::string& host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

}  // namespace

int cmd_serve(int argc, char** argv, int first) {
  ArgParser args("serve",
                 "lumen serve -m MODEL [--host 127.0.0.1] [--port 8080] [-t N] [--kv-memory 2GiB] [--api-key KEY] "
                 "[--max-seqs N] [--max-batch-tokens N] [--max-queue N] [-c CTX]",
                 serve_option_specs());
  int rc = 0;
  if (!parse_or_report(args, argc, argv, first, rc)) return rc;
  auto options = serve_options_from_args(args);
  if (!options.ok()) {
    std::fprintf(stderr, "error: %s\n", options.message().c_str());
    return 2;
  }
  ServeOptions& o = *options;
  fit_descriptor_limit(&o.server);
  if (!o.cpus.empty()) {
    // Before any thread starts: the engine's pool and the HTTP threads inherit the mask.
    if (Status st = pin_to_cpus(o.cpus); !st.ok()) {
      std::fprintf(stderr, "error: --cpus: %s\n", st.message().c_str());
      return 2;
    }
    if (o.engine.n_threads <= 0) o.engine.n_threads = static_cast<int32_t>(o.cpus.size());
    std::fprintf(stderr, "lumen serve: pinned to CPUs %s (%d compute threads); %s\n", format_cpu_list(o.cpus).c_str(),
                 o.engine.n_threads, place_memory_near(o.cpus).c_str());
  }
  if (o.server.api_key.empty() &&
      std::find(o.server.cors_origins.begin(), o.server.cors_origins.end(), "*") != o.server.cors_origins.end())
    std::fprintf(stderr, "lumen serve: warning: --cors-origin '*' without --api-key: any web page can use this server\n");
  if (!is_loopback_host(o.server.host) && o.server.api_key.empty())
    std::fprintf(stderr, "lumen serve: warning: listening on %s without --api-key: anyone who can reach it can use it\n",
                 o.server.host.c_str());

  // SIGINT / SIGTERM are taken by sigwait below: block them before any thread starts, so
  // every thread inherits the mask. A client that hangs up must not kill the process.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  auto server = server::HttpServer::start(o.server);
  if (!server.ok()) {
    std::fprintf(stderr, "error: %s\n", server.message().c_str());
    return 1;
  }
  std::fprintf(stderr, "lumen serve: listening on http://%s:%d (loading the model; /health says 503 until ready)\n",
               o.server.host.c_str(), (*server)->port());

  std::atomic<bool> load_failed{false};
  std::atomic<bool> loaded{false};
  std::thread loader([&] {
    const double t0 = now_ms();
    engine::EngineConfig config = o.engine;
    BatchDefault batch_default;
    if (config.max_batch_tokens == 0) {
      batch_default = default_max_batch_tokens(*args.get("--model"), config);
      config.max_batch_tokens = batch_default.max_batch_tokens;
    }
    std::unique_ptr<engine::Engine> eng = load_engine_or_report(args, config);
    if (!eng) {
      load_failed = true;
      kill(getpid(), SIGTERM);  // wakes the sigwait below
      return;
    }
    if (o.server.embeddings && o.server.pooling == engine::Pooling::kNone) {
      auto pooling = engine::model_pooling(eng->hparams());
      if (!pooling.ok()) {
        std::fprintf(stderr, "error: --embeddings: %s\n", pooling.message().c_str());
        load_failed = true;
        kill(getpid(), SIGTERM);
        return;
      }
      std::fprintf(stderr, "lumen serve: /v1/embeddings on, %s pooling (the model's%s)\n", engine::pooling_name(*pooling),
                   eng->hparams().pooling_type < 0 ? ": none named, last token for a decoder LLM" : "");
    }
    const engine::EngineConfig& c = eng->config();
    std::fprintf(stderr, "lumen serve: ready in %.0f ms: n_ctx %d, max-seqs %d, max-batch-tokens %d, %d threads, kernels %s\n",
                 now_ms() - t0, c.n_ctx, c.max_seqs, c.max_batch_tokens, c.n_threads,
                 std::string(eng->kernel_name()).c_str());
    if (batch_default.knee_tokens > 0)
      std::fprintf(stderr, "lumen serve: max-batch-tokens %d = max-seqs %d + prompt chunk max(prefill knee %lld, %d), "
                   "rounded to 16 (set --max-batch-tokens to override)\n",
                   c.max_batch_tokens, c.max_seqs, static_cast<long long>(batch_default.knee_tokens), kMinDefaultChunk);
    (*server)->attach_engine(engine::AsyncEngine::start(std::move(eng), o.async));
    loaded = true;
  });
  int sig = 0;
  sigwait(&stop_signals, &sig);
  if (load_failed) {
    loader.join();
    (*server)->stop();
    return 1;
  }
  std::fprintf(stderr, "lumen serve: %s: draining (readiness 503, new requests 503; running requests get up to %.1f s; "
               "a second signal exits at once)\n", sig == SIGINT ? "SIGINT" : "SIGTERM", o.drain_timeout_ms / 1e3);
  // A second signal ends the process at once, whatever the drain is waiting for.
  std::thread([stop_signals] {
    int again = 0;
    sigwait(&stop_signals, &again);
    std::fprintf(stderr, "lumen serve: second %s: exiting now\n", again == SIGINT ? "SIGINT" : "SIGTERM");
    _exit(128 + again);
  }).detach();
  const double t0 = now_ms();
  const bool all_done = (*server)->drain(std::chrono::milliseconds(o.drain_timeout_ms));
  std::fprintf(stderr, "lumen serve: drained in %.0f ms (%s)\n", now_ms() - t0,
               all_done ? "every request finished" : "requests still running at the deadline were ended");
  if (!loaded) {  // still loading: nothing to finish, and the load is not worth waiting for
    std::fprintf(stderr, "lumen serve: exiting while the model loads\n");
    std::fflush(stderr);
    _exit(0);
  }
  loader.join();
  return 0;
}

}  // namespace lumen::cli
