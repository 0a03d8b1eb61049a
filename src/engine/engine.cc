#include "engine/engine.h"

#include <algorithm>
#include <thread>

#include "base/check.h"
#include "base/log.h"
#include "base/timer.h"
#include "gguf/model_file.h"

namespace lumen::engine {

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::kNone: return "none";
    case FinishReason::kEos: return "eos";
    case FinishReason::kLength: return "length";
    case FinishReason::kStop: return "stop";
    case FinishReason::kContextFull: return "context_full";
    case FinishReason::kCancelled: return "cancelled";
    case FinishReason::kError: return "error";
  }
  return "?";
}

namespace {

// FNV-1a over the bytes of the logits: lets a benchmark prove it computed the same thing.
uint64_t hash_floats(std::span<const float> values) {
  uint64_t h = 1469598103934665603ull;
  const auto* p = reinterpret_cast<const unsigned char*>(values.data());
  for (size_t i = 0; i < values.size_bytes(); ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

}  // namespace

struct Engine::Sequence {
  Sequence(RequestId id_, Request req, const tok::Tokenizer& tokenizer, int32_t n_vocab,
           int32_t n_ctx)
      : id(id_),
        params(std::move(req.params)),
        tokens(std::move(req.prompt_ids)),
        n_prompt(static_cast<int32_t>(tokens.size())),
        sampler(params.sampling, n_vocab),
        detok(tokenizer),
        stop(params.stop) {
    tokens.reserve(n_ctx + 1);
    sched.seq_id = id;
    sched.n_tokens_target = n_prompt;
  }

  RequestId id;
  GenerationParams params;
  std::vector<int32_t> tokens;  // prompt + generated
  int32_t n_prompt;
  int32_t n_generated = 0;
  SchedSeq sched;
  sample::Sampler sampler;
  tok::StreamingDetokenizer detok;
  StopMatcher stop;
  RequestTimings timings;
  std::vector<double> prompt_logprobs;
  std::vector<int32_t> prompt_argmax;
  bool finished = false;
};

Engine::Engine(model::Model model, tok::Tokenizer tokenizer)
    : model_(std::move(model)), tokenizer_(std::move(tokenizer)) {}
Engine::~Engine() = default;
Engine::Engine(Engine&&) noexcept = default;
Engine& Engine::operator=(Engine&&) noexcept = default;

std::string_view Engine::kernel_name() const { return kernels::kernel_table_name(*kernels_); }

Result<std::unique_ptr<Engine>> Engine::create(const std::string& model_path,
                                               const EngineConfig& config_in) {
  const double t0 = now_ms();
  EngineConfig config = config_in;
  if (config.n_threads <= 0) config.n_threads = std::max(1u, std::thread::hardware_concurrency());
  if (config.max_batch_tokens <= 0) return error("--batch-size must be positive");
  if (config.max_seqs <= 0) return error("--max-seqs must be positive");
  if (config.block_size <= 0 || config.block_size > 1024) return error("--block-size must be in [1, 1024]");

  LUMEN_ASSIGN_OR_RETURN(gguf::ModelFile file, gguf::open_model(model_path));
  LUMEN_ASSIGN_OR_RETURN(tok::Tokenizer tokenizer, tok::Tokenizer::from_model_file(file));
  LUMEN_ASSIGN_OR_RETURN(model::HParams hp, model::read_hparams(file));
  if (tokenizer.n_vocab() > hp.n_vocab)
    return error("model: tokenizer has " + std::to_string(tokenizer.n_vocab()) +
                 " tokens but the embedding matrix only " + std::to_string(hp.n_vocab) + " rows");
  if (config.n_ctx <= 0) config.n_ctx = std::min(hp.n_ctx_train, 4096);
  if (config.n_ctx > (1 << 20)) return error("-c/--ctx-size " + std::to_string(config.n_ctx) + " is too large");
  if (config.max_logit_rows <= 0) config.max_logit_rows = config.max_seqs;
  config.max_logit_rows = std::min(config.max_logit_rows, config.max_batch_tokens);

  model::ModelLimits limits;
  limits.max_batch_tokens = config.max_batch_tokens;
  limits.max_logit_rows = config.max_logit_rows;
  limits.max_ctx = config.n_ctx;
  limits.n_threads = config.n_threads;
  LUMEN_ASSIGN_OR_RETURN(model::Model model, model::Model::load(std::move(file), limits));

  std::unique_ptr<Engine> e(new Engine(std::move(model), std::move(tokenizer)));
  e->config_ = config;
  e->kernels_ = config.use_reference_kernels ? &kernels::reference_kernel_table()
                                             : &kernels::best_kernel_table();
  e->pool_threads_ = std::make_unique<ThreadPool>(config.n_threads);

  kv::KvCacheConfig kc;
  kc.n_layer = hp.n_layer;
  kc.n_kv_head = hp.n_kv_head;
  kc.head_dim = hp.head_dim;
  kc.block_size = config.block_size;
  kc.dtype = config.kv_dtype;
  const int64_t blocks_per_seq = (config.n_ctx + config.block_size - 1) / config.block_size;
  const size_t block_bytes = kc.bytes_per_token() * config.block_size;
  int64_t n_blocks = blocks_per_seq * config.max_seqs;
  if (config.kv_memory_bytes > 0) {
    n_blocks = config.kv_memory_bytes / static_cast<int64_t>(block_bytes);
    if (n_blocks < blocks_per_seq)
      return error("--kv-memory " + std::to_string(config.kv_memory_bytes) +
                   " bytes cannot hold one full context of " + std::to_string(config.n_ctx) +
                   " tokens; increase it to at least " +
                   std::to_string(blocks_per_seq * block_bytes) + " bytes or lower -c");
  }
  if (n_blocks > (int64_t{1} << 30)) return error("KV cache too large");
  kc.n_blocks = static_cast<int32_t>(n_blocks);
  LUMEN_ASSIGN_OR_RETURN(e->kv_, kv::KvStorage::allocate(kc));
  e->pool_ = kv::BlockPool(kc.n_blocks);
  e->scheduler_ = Scheduler(SchedulerConfig{config.max_batch_tokens, config.max_seqs, config.block_size});
  e->batch_tokens_.reserve(config.max_batch_tokens);
  e->batch_seqs_.reserve(config.max_seqs);
  e->batch_logit_rows_.reserve(config.max_batch_tokens);
  e->running_.reserve(config.max_seqs);
  e->load_ms_ = now_ms() - t0;
  LUMEN_LOG_INFO("engine: %s, %d layers, n_ctx %d, kv %s %d blocks x %d tokens, kernels %s, %d threads",
                 std::string(model::arch_name(hp.arch)).c_str(), hp.n_layer, config.n_ctx,
                 std::string(dtype_name(kc.dtype)).c_str(), kc.n_blocks, kc.block_size,
                 std::string(e->kernel_name()).c_str(), config.n_threads);
  return e;
}

Status Engine::validate(const Request& request) const {
  const int32_t n_vocab = model_.hparams().n_vocab;
  const GenerationParams& p = request.params;
  if (request.prompt_ids.empty()) return error("prompt: empty (no tokens to condition on)");
  if (static_cast<int64_t>(request.prompt_ids.size()) > config_.n_ctx)
    return error("prompt: " + std::to_string(request.prompt_ids.size()) +
                 " tokens do not fit the context of " + std::to_string(config_.n_ctx) + " tokens");
  for (int32_t id : request.prompt_ids)
    if (id < 0 || id >= n_vocab) return error("prompt: token id " + std::to_string(id) + " out of range");
  if (p.max_tokens < 0) return error("max_tokens: must be >= 0, got " + std::to_string(p.max_tokens));
  if (p.top_logits < 0 || p.top_logits > n_vocab) return error("top_logits: out of range");
  if (p.prompt_logprobs && config_.max_logit_rows < config_.max_batch_tokens)
    return error("prompt_logprobs: engine was created without room for prompt logits");
  const sample::SamplingParams& s = p.sampling;
  if (!(s.temperature >= 0)) return error("temperature: must be >= 0");
  if (!(s.top_p > 0 && s.top_p <= 1)) return error("top_p: must be in (0, 1]");
  if (!(s.min_p >= 0 && s.min_p <= 1)) return error("min_p: must be in [0, 1]");
  if (!(s.repeat_penalty > 0)) return error("repeat_penalty: must be > 0");
  if (p.stop.size() > 16) return error("stop: at most 16 stop strings");
  for (const std::string& st : p.stop)
    if (st.size() > 256) return error("stop: a stop string is longer than 256 bytes");
  if (p.n < 1 || p.n > config_.max_seqs)
    return error("n: must be in [1, " + std::to_string(config_.max_seqs) + "] (--max-seqs), got " +
                 std::to_string(p.n));
  if (p.logprobs < -1 || p.logprobs > 20) return error("logprobs: must be in [0, 20]");
  if (p.cache_salt.size() > 256) return error("cache_salt: longer than 256 bytes");
  return Status();
}

EngineMetrics Engine::metrics() const {
  EngineMetrics m = counters_;
  m.n_running = static_cast<int32_t>(running_.size());
  m.n_waiting = static_cast<int32_t>(waiting_.size());
  m.kv_blocks_used = pool_.n_used();
  m.kv_blocks_total = pool_.n_blocks();
  return m;
}

Result<RequestId> Engine::add_request(Request request, RequestId id_in) {
  LUMEN_TRY(validate(request));
  const int32_t n_vocab = model_.hparams().n_vocab;
  const RequestId id = id_in != 0 ? id_in : next_id_++;
  if (id_in >= next_id_) next_id_ = id_in + 1;
  auto seq = std::make_unique<Sequence>(id, std::move(request), tokenizer_, n_vocab, config_.n_ctx);
  for (int32_t t : seq->tokens) seq->sampler.accept(t);
  seq->timings.arrival_ms = now_ms();
  seq->timings.n_prompt = seq->n_prompt;
  waiting_.push_back(std::move(seq));
  return id;
}

void Engine::admit_waiting() {
  while (!waiting_.empty() && static_cast<int32_t>(running_.size()) < config_.max_seqs) {
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
  }
}

void Engine::cancel(RequestId id) {
  for (auto it = waiting_.begin(); it != waiting_.end(); ++it) {
    if ((*it)->id == id) {
      waiting_.erase(it);
      return;
    }
  }
  for (auto it = running_.begin(); it != running_.end(); ++it) {
    if ((*it)->id == id) {
      RequestEvent ev;
      finish(**it, FinishReason::kCancelled, ev);
      running_.erase(it);
      return;
    }
  }
}

std::optional<RequestTimings> Engine::timings(RequestId id) const {
  auto it = finished_timings_.find(id);
  if (it == finished_timings_.end()) return std::nullopt;
  return it->second;
}

void Engine::finish(Sequence& seq, FinishReason reason, RequestEvent& ev) {
  if (reason != FinishReason::kStop && reason != FinishReason::kCancelled) {
    ev.text_delta += seq.stop.push(seq.detok.flush());
    ev.text_delta += seq.stop.flush();
  }
  ev.finished = true;
  ev.finish_reason = reason;
  seq.finished = true;
  seq.timings.finish_ms = now_ms();
  seq.timings.n_generated = seq.n_generated;
  if (seq.timings.first_token_ms == 0) seq.timings.first_token_ms = seq.timings.finish_ms;
  finished_timings_[seq.id] = seq.timings;
  seq.sched.blocks.release_all(pool_);
}

void Engine::process_new_token(Sequence& seq, int32_t token_id, std::span<const float> logits,
                               RequestEvent& ev) {
  if (seq.n_generated == 0) {
    seq.timings.first_token_ms = now_ms();
    if (seq.params.hash_logits) ev.logits_hash = hash_floats(logits);
  }
  seq.n_generated++;
  seq.tokens.push_back(token_id);
  seq.sched.n_tokens_target = static_cast<int64_t>(seq.tokens.size());
  seq.sampler.accept(token_id);
  ev.new_token_ids.push_back(token_id);
  if (seq.params.top_logits > 0) {
    const int32_t k = seq.params.top_logits;
    std::vector<std::pair<int32_t, float>> top;
    top.reserve(logits.size());
    for (int32_t i = 0; i < static_cast<int32_t>(logits.size()); ++i) top.emplace_back(i, logits[i]);
    auto cmp = [](const auto& a, const auto& b) {
      return a.second > b.second || (a.second == b.second && a.first < b.first);
    };
    std::partial_sort(top.begin(), top.begin() + k, top.end(), cmp);
    top.resize(k);
    ev.top.push_back(std::move(top));
  }
  const bool is_eog = tokenizer_.is_eog(token_id);
  if (is_eog && !seq.params.ignore_eos) {
    finish(seq, FinishReason::kEos, ev);
    return;
  }
  ev.text_delta += seq.stop.push(seq.detok.push(token_id));
  if (seq.stop.stopped()) {
    finish(seq, FinishReason::kStop, ev);
  } else if (seq.n_generated >= seq.params.max_tokens) {
    finish(seq, FinishReason::kLength, ev);
  } else if (static_cast<int64_t>(seq.tokens.size()) > config_.n_ctx) {
    finish(seq, FinishReason::kContextFull, ev);  // the next token would not fit
  }
}

std::vector<RequestEvent> Engine::step() {
  std::vector<RequestEvent> events;
  admit_waiting();
  if (running_.empty()) return events;

  std::vector<SchedSeq*> sched_seqs;
  sched_seqs.reserve(running_.size());
  for (auto& s : running_) sched_seqs.push_back(&s->sched);
  const SchedulerOutput plan = scheduler_.schedule(sched_seqs, pool_);

  if (plan.chunks.empty()) {
    // Nothing fits: without preemption (serving issue) the oldest request fails cleanly.
    RequestEvent ev;
    ev.request_id = running_.front()->id;
    ev.error = "KV cache is full";
    finish(*running_.front(), FinishReason::kError, ev);
    events.push_back(std::move(ev));
    running_.erase(running_.begin());
    return events;
  }

  auto find_seq = [&](uint64_t id) -> Sequence& {
    for (auto& s : running_)
      if (s->id == id) return *s;
    LUMEN_CHECK_MSG(false, "scheduled sequence is not running");
    __builtin_unreachable();
  };

  batch_tokens_.clear();
  batch_seqs_.clear();
  batch_logit_rows_.clear();
  for (const ScheduledChunk& c : plan.chunks) {
    Sequence& seq = find_seq(c.seq_id);
    const int32_t begin = static_cast<int32_t>(batch_tokens_.size());
    batch_tokens_.insert(batch_tokens_.end(), seq.tokens.begin() + c.pos0,
                         seq.tokens.begin() + c.pos0 + c.n_tokens);
    batch_seqs_.push_back({begin, c.n_tokens, c.pos0, seq.sched.blocks.ids()});
    if (seq.params.prompt_logprobs && c.pos0 < seq.n_prompt) {
      for (int32_t i = 0; i < c.n_tokens; ++i) batch_logit_rows_.push_back(begin + i);
    } else if (c.catches_up) {
      batch_logit_rows_.push_back(begin + c.n_tokens - 1);
    }
  }
  model::ForwardBatch batch{batch_tokens_, batch_seqs_, batch_logit_rows_};
  const std::span<const float> logits = model_.forward(*kernels_, *pool_threads_, batch, kv_.view());
  const int32_t n_vocab = model_.hparams().n_vocab;

  size_t row = 0;
  for (const ScheduledChunk& c : plan.chunks) {
    Sequence& seq = find_seq(c.seq_id);
    RequestEvent ev;
    ev.request_id = seq.id;
    seq.sched.n_tokens_computed += c.n_tokens;
    std::span<const float> last;
    if (seq.params.prompt_logprobs && c.pos0 < seq.n_prompt) {
      for (int32_t i = 0; i < c.n_tokens; ++i, ++row) {
        const int64_t p = c.pos0 + i;
        std::span<const float> r = logits.subspan(row * n_vocab, n_vocab);
        if (p + 1 < seq.n_prompt) {
          seq.prompt_logprobs.push_back(sample::log_softmax_at(r, seq.tokens[p + 1]));
          seq.prompt_argmax.push_back(sample::argmax(r));
        }
        last = r;
      }
    } else if (c.catches_up) {
      last = logits.subspan(row * n_vocab, n_vocab);
      ++row;
    }
    if (c.catches_up) {
      if (seq.params.prompt_logprobs && seq.sched.n_tokens_computed == seq.n_prompt) {
        ev.prompt_logprobs = std::move(seq.prompt_logprobs);
        ev.prompt_argmax = std::move(seq.prompt_argmax);
      }
      if (seq.n_generated >= seq.params.max_tokens) {
        finish(seq, FinishReason::kLength, ev);
      } else {
        const int32_t id = seq.sampler.sample(last);
        process_new_token(seq, id, last, ev);
      }
    }
    if (ev.finished || !ev.new_token_ids.empty() || !ev.text_delta.empty() ||
        !ev.prompt_logprobs.empty())
      events.push_back(std::move(ev));
  }
  std::erase_if(running_, [](const std::unique_ptr<Sequence>& s) { return s->finished; });
  return events;
}

}  // namespace lumen::engine
