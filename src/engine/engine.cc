#include "engine/engine.h"

#include <algorithm>
#include <cstdio>
#include <thread>

#include "base/check.h"
#include "base/log.h"
#include "base/timer.h"
#include "gguf/model_file.h"
#include "kernels/ops.h"
#include "spec/draft_model.h"
#include "spec/ngram.h"

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

const char* pooling_name(Pooling pooling) {
  switch (pooling) {
    case Pooling::kNone: return "none";
    case Pooling::kMean: return "mean";
    case Pooling::kCls: return "cls";
    case Pooling::kLast: return "last";
  }
  return "?";
}

// GGUF's pooling types (llama.cpp's enum llama_pooling_type): 0 none, 1 mean, 2 cls,
// 3 last, 4 rank. A decoder LLM names none: its last token has seen the whole text, so
// lumen pools that (llama.cpp at c392e5094 takes "none" then, whose per-token output its
// /v1/embeddings refuses; --pooling last there gives what lumen gives by default).
Result<Pooling> model_pooling(const model::HParams& hp) {
  switch (hp.pooling_type) {
    case -1:
    case 0:
    case 3: return Pooling::kLast;
    case 1: return Pooling::kMean;
    case 2: return Pooling::kCls;
    default:
      return error("embeddings: the model's pooling type " + std::to_string(hp.pooling_type) +
                   " (rank: a reranker's classification head) is not supported; give --pooling mean|cls|last");
  }
}

Result<Pooling> parse_pooling(std::string_view name) {
  if (name == "mean") return Pooling::kMean;
  if (name == "cls") return Pooling::kCls;
  if (name == "last") return Pooling::kLast;
  return error("'" + std::string(name.substr(0, 40)) + "' is not one of mean, cls, last");
}

Engine::Engine(model::Model model, tok::Tokenizer tokenizer)
    : model_(std::move(model)), tokenizer_(std::move(tokenizer)) {}
Engine::~Engine() = default;

std::string_view Engine::kernel_name() const { return kernels::kernel_table_name(*kernels_); }

Result<bool> resolve_flash_attn(FlashAttn mode, KvDTypes types) {
  for (DType t : {types.k, types.v})
    if (!kernels::kv_cache_supports(t))
      return error("KV cache type '" + std::string(dtype_name(t)) + "' is not supported (" +
                   kernels::kv_cache_type_names() + ")");
  const bool needs_flash = kernels::kv_type_needs_flash(types.k) || kernels::kv_type_needs_flash(types.v);
  switch (mode) {
    case FlashAttn::kOn: return true;
    case FlashAttn::kOff:
      if (needs_flash)
        return error("-fa off: a " + std::string(dtype_name(kernels::kv_type_needs_flash(types.k) ? types.k : types.v)) +
                     " KV cache (--kv-type / -ctk / -ctv) is read by flash attention only; use -fa on or auto");
      return false;
    case FlashAttn::kAuto: break;
  }
  return needs_flash;
}

Status check_rotate_k(bool rotate_k, KvDTypes types) {
  if (rotate_k && (types.k == DType::kF16 || types.k == DType::kF32 || types.k == DType::kBF16))
    return error("--rotate-k: a " + std::string(dtype_name(types.k)) +
                 " K cache has nothing to gain from the rotation; it is for a quantized K cache (-ctk q8_0 or q4_0)");
  return {};
}

Result<std::unique_ptr<Engine>> Engine::create(const std::string& model_path, const EngineConfig& config_in,
                                               std::unique_ptr<spec::Proposer> proposer) {
  const double t0 = now_ms();
  EngineConfig config = config_in;
  if (config.n_threads <= 0) config.n_threads = std::max(1u, std::thread::hardware_concurrency());
  if (config.max_batch_tokens <= 0) return error("--batch-size must be positive");
  if (config.max_seqs <= 0) return error("--max-seqs must be positive");
  if (config.block_size <= 0 || config.block_size > 1024) return error("--block-size must be in [1, 1024]");

  LUMEN_ASSIGN_OR_RETURN(const bool flash, resolve_flash_attn(config.flash_attn, config.kv_dtypes));
  config.flash_attn = flash ? FlashAttn::kOn : FlashAttn::kOff;
  LUMEN_TRY(check_rotate_k(config.rotate_k, config.kv_dtypes));

  LUMEN_ASSIGN_OR_RETURN(gguf::ModelFile file, gguf::open_model(model_path));
  LUMEN_ASSIGN_OR_RETURN(tok::Tokenizer tokenizer, tok::Tokenizer::from_model_file(file));
  LUMEN_ASSIGN_OR_RETURN(model::HParams hp, model::read_hparams(file));
  if (tokenizer.n_vocab() > hp.n_vocab)
    return error("model: tokenizer has " + std::to_string(tokenizer.n_vocab()) +
                 " tokens but the embedding matrix only " + std::to_string(hp.n_vocab) + " rows");
  if (config.n_ctx <= 0) config.n_ctx = std::min(hp.n_ctx_train, 4096);
  if (config.n_ctx > (1 << 20)) return error("-c/--ctx-size " + std::to_string(config.n_ctx) + " is too large");
  if (config.max_logit_rows <= 0) config.max_logit_rows = config.max_seqs;
  LUMEN_TRY(spec::validate(config.spec));
  if ((config.spec.kind == spec::ProposerKind::kCustom) != (proposer != nullptr))
    return error("engine: a custom proposer goes with spec.kind = kCustom");
  const bool auto_draft_max = config.spec.draft_max == 0;
  if (auto_draft_max) config.spec.draft_max = config.spec.measure_cost ? spec::kAutoDraftMax : 8;
  if (config.spec.kind != spec::ProposerKind::kNone) {
    // A verify chunk asks for 1 + k rows.
    config.max_logit_rows = std::max(config.max_logit_rows, config.max_seqs * (1 + config.spec.draft_max));
    if (config.spec.max_step_tokens <= 0) config.spec.max_step_tokens = 64;
  }
  config.max_logit_rows = std::min(config.max_logit_rows, config.max_batch_tokens);

  model::ModelLimits limits;
  limits.max_batch_tokens = config.max_batch_tokens;
  limits.max_logit_rows = config.max_logit_rows;
  limits.max_ctx = config.n_ctx;
  limits.n_threads = config.n_threads;
  limits.max_embd_rows = config.enable_embeddings ? config.max_batch_tokens : 0;
  limits.flash_attn = flash;
  limits.rotate_qk = config.rotate_k;
  limits.refresh_page_cache_for_huge_pages = config.refresh_page_cache;
  limits.mla_expand_tokens = config.mla_expand_tokens;
  if (config.mla_expand_tokens != 0 && !hp.is_mla())
    return error("--mla-expand: '" + hp.arch_key + "' has no multi-head latent attention");
  LUMEN_ASSIGN_OR_RETURN(model::Model model, model::Model::load(std::move(file), limits));
  if (model.weights_huge_fraction() >= 0)
    LUMEN_LOG_INFO("engine: --refresh-pages: %d%% of the file's weights on 2 MiB pages",
                   static_cast<int>(100 * model.weights_huge_fraction() + 0.5));
  // A latent-attention cache has no V rows: a V type other than K's (and not the default)
  // would be a flag that does nothing.
  if (model.kv_layout().k_only && config.kv_dtypes.v != config.kv_dtypes.k && config.kv_dtypes.v != DType::kF16)
    return error("-ctv " + std::string(dtype_name(config.kv_dtypes.v)) + ": the latent-attention cache of '" +
                 hp.arch_key + "' holds no V rows; its type is K's (-ctk / --kv-type)");

  std::unique_ptr<Engine> e(new Engine(std::move(model), std::move(tokenizer)));
  e->config_ = config;
  e->kernels_ = config.use_reference_kernels ? &kernels::reference_kernel_table()
                                             : &kernels::best_kernel_table();
  e->pool_threads_ = std::make_unique<ThreadPool>(config.n_threads);
  if (config.interleave_weights) {
    const double t_il = now_ms();
    const model::Model::InterleaveReport r =
        e->model_.interleave_weights(*e->kernels_, *e->pool_threads_, config.interleave_cache_dir, config.load_progress);
    if (!r.cache_error.empty()) LUMEN_LOG_WARN("engine: interleaved weights: %s", r.cache_error.c_str());
    e->interleave_report_ = r;
    e->config_.load_progress = nullptr;  // only for create(); the caller's object may go
    if (r.n_bytes > 0) {
      std::string where = r.cache_path.empty() ? "in memory" : (r.cache_built ? "cache written: " : "cache: ") + r.cache_path;
      if (!r.cache_path.empty()) {
        char probe[96] = "";
        if (r.cache_read_gbps > 0)
          std::snprintf(probe, sizeof(probe), ", read at %.1f GB/s against %.1f in memory", r.cache_read_gbps,
                        r.memory_read_gbps);
        where += ", " + std::to_string(static_cast<int>(100 * r.cache_huge_fraction + 0.5)) + "% on 2 MiB pages" + probe +
                 (r.cache_copied_to_memory ? ": read into memory" : "");
      }
      LUMEN_LOG_INFO("engine: %.1f MiB of weights interleaved for the %s kernels in %.0f ms (%s)", r.n_bytes / 1048576.0,
                     std::string(kernels::kernel_table_name(*e->kernels_)).c_str(), now_ms() - t_il, where.c_str());
    }

  }

  // The KV cache by layer group, as the model lays it out (model/kv_layout.h).
  kv::KvManagerConfig kc = kv::kv_config_for_layout(e->model_.kv_layout());
  kc.block_size = config.block_size;
  kc.dtypes = config.kv_dtypes;
  kc.n_ctx = config.n_ctx;
  kc.max_seqs = config.max_seqs;
  kc.max_batch_tokens = config.max_batch_tokens;
  kc.memory_bytes = config.kv_memory_bytes;
  kc.enable_prefix_cache = config.enable_prefix_cache;
  LUMEN_ASSIGN_OR_RETURN(e->kv_, kv::KvManager::create(kc));
  e->scheduler_ = Scheduler(SchedulerConfig{config.max_batch_tokens, config.max_seqs});
  for (int32_t g = 0; g < e->kv_.n_groups(); ++g) {
    const kv::KvGroupUsage u = e->kv_.usage(g);
    LUMEN_LOG_INFO("engine: kv group %d: %s, %d layers, %d blocks x %d tokens, %.1f MiB (%.1f KiB per token)", g,
                   u.window == 0 ? "full attention" : ("sliding window " + std::to_string(u.window)).c_str(),
                   u.n_slots, u.n_blocks, config.block_size, u.block_bytes * static_cast<double>(u.n_blocks) / 1048576.0,
                   u.block_bytes / 1024.0 / config.block_size);
  }
  // The prefix-cache namespace starts with the model's identity: two models never share.
  const gguf::ModelFile& mf = e->model_.file();
  e->model_id_ = std::string(mf.get_string("general.name").value_or("")) + "|" +
                 std::string(model::arch_name(hp.arch)) + "|" + std::to_string(hp.n_layer) + "x" +
                 std::to_string(hp.n_embd) + "|" + std::to_string(mf.data_bytes()) + "|" + mf.path();
  e->runner_ = std::make_unique<ModelRunner>(e->model_, *e->kernels_, *e->pool_threads_, e->kv_,
                                             config.max_batch_tokens, config.max_seqs);
  e->processor_ = std::make_unique<OutputProcessor>(e->tokenizer_, config.n_ctx, config.max_seqs, hp.n_vocab);
  if (config.spec.kind != spec::ProposerKind::kNone && config.spec.measure_cost) {
    // 1 .. 1 + draft_max tokens (a verify), then up to the step knee (verifies beside
    // other sequences' decodes).
    std::vector<int32_t> ns;
    for (int32_t n = 1; n <= 1 + config.spec.draft_max; ++n) ns.push_back(n);
    const int32_t n_top = std::min({config.spec.max_step_tokens, config.max_logit_rows, config.max_batch_tokens});
    if (config.max_seqs > 1)
      for (int32_t n = ns.back() * 3 / 2; n <= n_top; n = n * 3 / 2) ns.push_back(n);
    std::erase_if(ns, [&](int32_t n) { return n > n_top; });
    const double t_cost = now_ms();
    if (config.spec.given_costs.empty()) {
      e->step_costs_ = e->measure_step_costs(ns, 2);
    } else {
      for (const auto& [n, ms] : config.spec.given_costs) e->step_costs_.add(n, ms);
    }
    if (e->step_costs_.empty()) {
      LUMEN_LOG_WARN("engine: the KV cache cannot hold %d tokens: speculation without a verify cost", ns.back());
    } else {
      if (auto_draft_max) {
        // The largest k that can still pay: all proposals accepted.
        config.spec.draft_max = std::max(config.spec.draft_min,
                                         spec::best_k(e->step_costs_, 1, 1, 1.0, config.spec.draft_max));
        e->config_.spec.draft_max = config.spec.draft_max;
      }
      const spec::StepCosts& sc = e->step_costs_;
      LUMEN_LOG_INFO("engine: verify cost measured in %.0f ms: 1 token %.2f ms, 9 tokens x%.2f, 17 tokens x%.2f; "
                     "draft-max %d%s",
                     now_ms() - t_cost, sc.ms(1), sc.ms(9) / sc.ms(1), sc.ms(17) / sc.ms(1), config.spec.draft_max,
                     auto_draft_max ? " (chosen)" : "");
    }
  }
  switch (config.spec.kind) {
    case spec::ProposerKind::kNone: break;
    case spec::ProposerKind::kNgram:
      e->proposer_ = std::make_unique<spec::NgramProposer>(config.spec.ngram_min, config.spec.ngram_max);
      break;
    case spec::ProposerKind::kDraft: {
      spec::DraftModelConfig dc;
      dc.path = config.spec.draft_model;
      dc.max_seqs = config.max_seqs;
      dc.draft_max = config.spec.draft_max;
      dc.n_ctx = config.n_ctx;
      dc.max_batch_tokens = config.max_batch_tokens;
      dc.block_size = config.block_size;
      dc.kv_dtypes = config.kv_dtypes;
      dc.flash_attn = config.flash_attn == FlashAttn::kOn;
      dc.rotate_k = config.rotate_k;
      dc.n_threads = config.n_threads;
      dc.interleave_weights = config.interleave_weights;
      dc.interleave_cache_dir = config.interleave_cache_dir;
      auto draft = spec::DraftModelProposer::create(dc, e->tokenizer_, hp.n_vocab, *e->kernels_, *e->pool_threads_);
      if (!draft.ok()) return error(draft.message());
      e->proposer_ = std::move(draft).value();
      break;
    }
    case spec::ProposerKind::kCustom:
      e->proposer_ = std::move(proposer);
      break;
  }

  e->propose_seqs_.reserve(config.max_seqs);
  e->drafted_.reserve(config.max_seqs);
  e->draft_k_.reserve(config.max_seqs);
  e->counters_.spec_accepted_per_pos.assign(config.spec.kind == spec::ProposerKind::kNone ? 0 : config.spec.draft_max, 0);
  e->runner_seqs_.reserve(config.max_seqs);
  // Events: at most one per running completion per step, plus an admission failure.
  e->events_.resize(static_cast<size_t>(config.max_seqs) + 1);
  e->plan_.chunks.reserve(config.max_seqs);
  e->plan_.admitted.reserve(config.max_seqs);
  e->plan_.preempted.reserve(config.max_seqs);
  e->plan_.copies.reserve(static_cast<size_t>(config.max_seqs) * e->kv_.n_groups() * 2);
  e->running_.reserve(config.max_seqs);
  e->shift_src_.reserve(e->kv_.n_groups());
  e->shift_dst_.reserve(e->kv_.n_groups());
  e->load_ms_ = now_ms() - t0;
  LUMEN_LOG_INFO("engine: %s, %d layers, n_ctx %d, kv %s/%s %.1f MiB in %d group(s), flash attention %s, "
                 "kernels %s, %d threads",
                 std::string(model::arch_name(hp.arch)).c_str(), hp.n_layer, config.n_ctx,
                 std::string(dtype_name(kc.dtypes.k)).c_str(), std::string(dtype_name(kc.dtypes.v)).c_str(),
                 e->kv_.total_bytes() / 1048576.0, e->kv_.n_groups(),
                 flash ? "on" : "off", std::string(e->kernel_name()).c_str(), config.n_threads);
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
  if (p.n_keep < 0) return error("n_keep: must be >= 0, got " + std::to_string(p.n_keep));
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
  if (p.embed != Pooling::kNone) {
    if (!config_.enable_embeddings) return error("embeddings: the engine was created without embeddings (--embeddings)");
    if (p.max_tokens != 0 || p.n != 1 || p.grammar || p.logprobs >= 0 || p.prompt_logprobs || p.top_logits > 0)
      return error("embeddings: an embedding request generates nothing (max_tokens 0, n 1, no grammar or logprobs)");
  }
  if (p.grammar && p.grammar->vocab().n_vocab() != n_vocab)
    return error("grammar: compiled for a vocabulary of " + std::to_string(p.grammar->vocab().n_vocab()) +
                 " tokens, the model has " + std::to_string(n_vocab));
  return Status();
}

EngineMetrics Engine::metrics() const {
  EngineMetrics m;
  metrics(&m);
  return m;
}

void Engine::metrics(EngineMetrics* out) const {
  std::vector<kv::KvGroupUsage> groups = std::move(out->kv_groups);
  *out = counters_;
  out->generated_tokens = processor_->n_generated_tokens();
  out->n_running = static_cast<int32_t>(running_.size());
  out->n_waiting = static_cast<int32_t>(waiting_.size());
  out->kv_blocks_used = kv_.n_used_blocks();
  out->kv_blocks_total = kv_.n_blocks();
  groups.resize(kv_.n_groups());
  for (int32_t g = 0; g < kv_.n_groups(); ++g) groups[g] = kv_.usage(g);
  out->kv_groups = std::move(groups);
  for (const auto& [sid, seq] : seqs_) {
    const uint64_t bytes = kv_.bytes_held(seq->sched.kv);
    if (bytes == 0) continue;
    out->kv_seq_bytes_max = std::max(out->kv_seq_bytes_max, bytes);
    out->kv_seq_bytes_sum += bytes;
    out->n_kv_seqs++;
  }
}

Result<RequestId> Engine::add_request(Request request, RequestId id_in) {
  LUMEN_TRY(validate(request));
  if (id_in != 0 && requests_.count(id_in)) return error("request id " + std::to_string(id_in) + " is in use");
  const RequestId id = id_in != 0 ? id_in : next_id_++;
  if (id >= next_id_) next_id_ = id + 1;
  const int32_t n_vocab = model_.hparams().n_vocab;

  auto req = std::make_unique<RequestState>();
  req->id = id;
  req->params = std::move(request.params);
  req->n_prompt = static_cast<int32_t>(request.prompt_ids.size());
  req->n_live = 1;
  req->usage.prompt_tokens = req->n_prompt;
  req->timings.arrival_ms = now_ms();
  req->timings.n_prompt = req->n_prompt;

  auto seq = std::make_unique<Sequence>(req.get(), 0, req->params.sampling, tokenizer_, n_vocab, req->params.stop,
                                        req->params.grammar, req->params.keep_special);
  init_spec(*seq);
  seq->tokens = std::move(request.prompt_ids);
  seq->tokens.reserve(config_.n_ctx + 1);
  for (int32_t t : seq->tokens) seq->sampler.accept(t);
  SchedSeq& ss = seq->sched;
  ss.seq_id = next_seq_id_++;
  ss.priority = req->params.priority;
  ss.arrival = next_arrival_++;
  ss.n_slots = req->params.n;
  ss.tokens = seq->tokens;
  if (req->params.embed != Pooling::kNone) {
    ss.prefix_lookup = false;  // pooling reads every prompt position's hidden state
    seq->embd_sum.assign(static_cast<size_t>(model_.hparams().n_embd), 0.0);
  }
  kv_.init_seq(ss.kv, kv::namespace_hash(model_id_, req->params.cache_salt));
  req->seq_ids.push_back(ss.seq_id);

  waiting_.insert(std::upper_bound(waiting_.begin(), waiting_.end(), &ss, runs_before), &ss);
  seqs_.emplace(ss.seq_id, std::move(seq));
  requests_.emplace(id, std::move(req));
  return id;
}

Sequence* Engine::find_running(uint64_t seq_id) {
  auto it = seqs_.find(seq_id);
  LUMEN_CHECK_MSG(it != seqs_.end(), "scheduled sequence is not live");
  return it->second.get();
}

std::optional<RequestTimings> Engine::timings(RequestId id) const {
  auto it = finished_timings_.find(id);
  if (it == finished_timings_.end()) return std::nullopt;
  return it->second;
}

std::string Engine::check_invariants() const {
  std::string s = kv_.check_invariants();
  if (!s.empty()) return s;
  for (const auto& [id, seq] : seqs_) {
    s = kv_.check_seq(seq->sched.kv, seq->sched.n_tokens_computed);
    if (!s.empty()) return "sequence " + std::to_string(id) + ": " + s;
  }
  if (!has_work() && kv_.n_used_blocks() != 0)
    return "idle engine still holds " + std::to_string(kv_.n_used_blocks()) + " blocks";
  return "";
}

void Engine::cancel(RequestId id) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return;
  processor_->begin_step();
  for (uint64_t sid : it->second->seq_ids) {
    auto s = seqs_.find(sid);
    if (s == seqs_.end() || s->second->finished) continue;
    RequestEvent ev;  // the caller (AsyncEngine) sends its own final event
    finish(*s->second, FinishReason::kCancelled, ev);
  }
  release_finished();
}

void Engine::finish(Sequence& seq, FinishReason reason, RequestEvent& ev) {
  processor_->finish(seq, reason, ev);
  kv_.release_all(seq.sched.kv);
}

// Removes finished sequences from the scheduler's lists and retires finished requests.
void Engine::release_finished() {
  for (RequestState* req : processor_->finished_requests()) {
    finished_timings_[req->id] = req->timings;
    if (finished_timings_.size() > 4096) finished_timings_.erase(finished_timings_.begin());
    counters_.requests_finished++;
  }
  processor_->begin_step();
  // Finished completions give their KV blocks back (full ones stay in the prefix cache).
  for (auto& [sid, seq] : seqs_) {
    if (!seq->finished) continue;
    kv_.release_all(seq->sched.kv);
    if (proposer_) proposer_->release(sid);
  }
  auto done = [&](SchedSeq* s) { return seqs_.at(s->seq_id)->finished; };
  std::erase_if(running_, done);
  std::erase_if(waiting_, done);
  for (auto it = seqs_.begin(); it != seqs_.end();) {
    if (it->second->finished) {
      it = seqs_.erase(it);
    } else {
      ++it;
    }
  }
  for (auto it = requests_.begin(); it != requests_.end();) {
    if (it->second->n_live == 0) {
      it = requests_.erase(it);
    } else {
      ++it;
    }
  }
}

// n > 1: the other completions start from the parent's state after the prompt. They share
// every prompt block (reference counts); the partly filled last block is copied on the
// first write (the scheduler's copy-on-write).
void Engine::fork_completions(Sequence& parent) {
  RequestState& req = *parent.req;
  req.forked = true;
  parent.sched.n_slots = 1;
  const int32_t n_vocab = model_.hparams().n_vocab;
  for (int32_t i = 1; i < req.params.n; ++i) {
    sample::SamplingParams sp = req.params.sampling;
    sp.seed = sp.seed + static_cast<uint64_t>(i);  // distinct, reproducible streams
    auto child = std::make_unique<Sequence>(&req, i, sp, tokenizer_, n_vocab, req.params.stop, req.params.grammar,
                                              req.params.keep_special);
    init_spec(*child);
    child->tokens.reserve(config_.n_ctx + 1);
    child->tokens = parent.tokens;
    for (int32_t t : child->tokens) child->sampler.accept(t);
    SchedSeq& cs = child->sched;
    cs.seq_id = next_seq_id_++;
    cs.priority = parent.sched.priority;
    cs.arrival = parent.sched.arrival;
    cs.n_slots = 1;
    cs.tokens = child->tokens;
    cs.n_tokens_computed = parent.sched.n_tokens_computed;
    kv_.fork(parent.sched.kv, parent.sched.n_tokens_computed, cs.kv);
    req.seq_ids.push_back(cs.seq_id);
    req.n_live++;
    running_.push_back(&cs);
    seqs_.emplace(cs.seq_id, std::move(child));
  }
}

spec::StepCosts Engine::measure_step_costs(std::span<const int32_t> n_tokens, int n_reps) {
  spec::StepCosts costs;
  if (n_tokens.empty()) return costs;
  const int32_t n_max = n_tokens.back();
  kv::SeqKv scratch;
  kv_.init_seq(scratch, 0);
  if (!kv_.allocate_slots(scratch, 0, n_max, 0, nullptr)) return costs;
  const int32_t n_vocab = model_.hparams().n_vocab;
  std::vector<int32_t> tokens(static_cast<size_t>(n_max)), rows(static_cast<size_t>(n_max));
  for (int32_t i = 0; i < n_max; ++i) {
    tokens[static_cast<size_t>(i)] = static_cast<int32_t>((7919ll * (i + 1)) % n_vocab);
    rows[static_cast<size_t>(i)] = i;
  }
  std::vector<std::span<const int32_t>> tables;
  for (const kv::BlockTable& t : scratch.tables) tables.push_back(t.ids());
  auto run = [&](int32_t n) {
    const model::ForwardSeq fs{0, n, 0, tables};
    const model::ForwardBatch batch{std::span(tokens).first(n), std::span(&fs, 1), std::span(rows).first(n)};
    const double t0 = now_ms();
    model_.forward(*kernels_, *pool_threads_, batch, kv_.views());
    return now_ms() - t0;
  };
  run(1);  // warm-up
  for (int32_t n : n_tokens) {
    double best = run(n);
    for (int r = 1; r < n_reps; ++r) best = std::min(best, run(n));
    costs.add(n, std::max(best, 1e-6));
  }
  kv_.release_all(scratch);
  return costs;
}

void Engine::init_spec(Sequence& seq) const {
  if (!proposer_) return;
  seq.draft.resize(static_cast<size_t>(config_.spec.draft_max));
  if (proposer_->samples())
    seq.draft_probs.resize(static_cast<size_t>(config_.spec.draft_max) * model_.hparams().n_vocab);
  seq.spec_k = spec::AdaptiveK(config_.spec.draft_max);
}

// Before the scheduler plans: every running sequence that has caught up (one committed
// token to compute: a decode) and may speculate asks the proposer for up to k tokens, and
// the proposals go at the end of its tokens (SchedSeq::n_spec counts them) for the
// scheduler to budget as catch-up tokens. The step's proposals stop at
// spec.max_step_tokens: past the knee a verify token is no longer nearly free.
void Engine::propose_drafts() {
  drafted_.clear();
  propose_seqs_.clear();
  if (!proposer_) return;
  int64_t step_tokens = 0;  // committed tokens this step will have (at most the budget)
  int32_t used_slots = 0;
  for (const SchedSeq* s : running_) {
    step_tokens += s->n_tokens_target() - s->n_tokens_computed;
    used_slots += s->n_slots;
  }
  // An admission (when a slot is free) brings its prompt.
  if (!waiting_.empty() && used_slots < config_.max_seqs)
    step_tokens += waiting_.front()->n_tokens_target() - waiting_.front()->n_tokens_computed;
  int64_t room = std::min<int64_t>(config_.spec.max_step_tokens, config_.max_batch_tokens) - step_tokens;
  if (room < config_.spec.draft_min) return;
  // The candidates and the k each would propose by its own acceptance (AdaptiveK).
  double acceptance_sum = 0;
  draft_k_.clear();
  for (SchedSeq* s : running_) {
    Sequence& seq = *seqs_.at(s->seq_id);
    const RequestState& req = *seq.req;
    LUMEN_DCHECK(s->n_spec == 0);
    if (seq.finished || !req.params.speculative || s->n_slots != 1 || seq.n_generated == 0) continue;
    if (s->n_tokens_target() - s->n_tokens_computed != 1) continue;
    int64_t k = seq.spec_k.next_k();
    // No further than the tokens still wanted (the step emits up to k + 1) and the context.
    k = std::min<int64_t>({k, req.params.max_tokens - seq.n_generated - 1,
                           config_.n_ctx - static_cast<int64_t>(seq.tokens.size())});
    if (k < config_.spec.draft_min) continue;
    drafted_.push_back(&seq);
    draft_k_.push_back(static_cast<int32_t>(k));
    acceptance_sum += seq.spec_k.acceptance();
  }
  if (drafted_.empty()) return;
  // What the measured verify cost allows this step at the candidates' mean acceptance
  // (step_costs.h): 0 when the step is already compute-bound.
  const auto n_cand = static_cast<int32_t>(drafted_.size());
  const int32_t k_step = spec::best_k(step_costs_, static_cast<int32_t>(std::max<int64_t>(1, step_tokens)), n_cand,
                                      acceptance_sum / n_cand, config_.spec.draft_max, propose_ms_per_pos_);
  size_t n_kept = 0;
  for (size_t i = 0; i < drafted_.size(); ++i) {
    if (room < config_.spec.draft_min) break;
    Sequence& seq = *drafted_[i];
    if (k_step == 0) seq.spec_k.idle();
    const int64_t k = std::min<int64_t>({draft_k_[i], k_step, room});
    if (k < config_.spec.draft_min) continue;
    spec::ProposeSeq p;
    p.seq_id = seq.sched.seq_id;
    p.tokens = seq.tokens;
    p.max_n = static_cast<int32_t>(k);
    p.sampling = &seq.req->params.sampling;
    p.out_tokens = seq.draft;
    p.out_probs = seq.draft_probs;
    propose_seqs_.push_back(p);
    drafted_[n_kept++] = &seq;
    room -= k;
  }
  drafted_.resize(n_kept);
  if (propose_seqs_.empty()) {
    // The proposal cost is only measured when proposing: let a high reading (a draft
    // model catching up on a prompt) fade, so that speculation is tried again.
    propose_ms_per_pos_ *= 0.98;
    return;
  }
  // What one proposed position costs (a draft model runs one forward step per position).
  int32_t n_pos = 0;
  for (const spec::ProposeSeq& p : propose_seqs_) n_pos = std::max(n_pos, p.max_n);
  const double t_propose = now_ms();
  proposer_->propose(propose_seqs_);
  const double ms_per_pos = (now_ms() - t_propose) / n_pos;
  propose_ms_per_pos_ = propose_ms_per_pos_ == 0 ? ms_per_pos : 0.8 * propose_ms_per_pos_ + 0.2 * ms_per_pos;
  for (size_t i = 0; i < propose_seqs_.size(); ++i) {
    const spec::ProposeSeq& p = propose_seqs_[i];
    Sequence& seq = *drafted_[i];
    if (p.n_out < config_.spec.draft_min) continue;
    seq.tokens.insert(seq.tokens.end(), seq.draft.begin(), seq.draft.begin() + p.n_out);  // within n_ctx
    seq.sched.tokens = seq.tokens;
    seq.sched.n_spec = p.n_out;
    seq.draft_probs_valid = p.probs_valid;
  }
}

// After the scheduler planned: each sequence keeps the proposals its chunk took (the
// budget may cut them short; a preempted one has none left), the rest leave its tokens.
void Engine::trim_drafts(const SchedulerOutput& plan) {
  for (Sequence* seq : drafted_) {
    SchedSeq& s = seq->sched;
    int32_t keep = 0;
    for (const ScheduledChunk& c : plan.chunks)
      if (c.seq_id == s.seq_id) keep = c.n_spec;
    const auto n_committed = static_cast<size_t>(s.n_tokens_committed());
    seq->tokens.resize(n_committed + static_cast<size_t>(keep));
    s.tokens = seq->tokens;
    s.n_spec = keep;
  }
}

// After forward, for a chunk that verified proposals:
//
//   committed: t0 .. tn-1 | proposed: d0 d1 d2       chunk = tn-1 d0 d1 d2 (4 positions,
//                                                    4 rows: each decides the next token)
//   verify:    d0 accepted, d1 accepted, d2 rejected -> x drawn from the residual there
//   tokens:    t0 .. tn-1 d0 d1 x                    (x is next step's input)
//   KV:        slots of tn-1 d0 d1 stay; d2's slot is truncated (its K/V came from a
//              token that is not in the sequence); blocks that became full enter the
//              prefix cache only now, holding accepted tokens only
void Engine::verify_chunk(Sequence& seq, const ScheduledChunk& c, const StepLogits& logits, size_t i,
                          RequestEvent& ev) {
  const int64_t n_before = c.pos0 + 1;  // committed tokens; the last was this step's input
  seq.tokens.resize(static_cast<size_t>(n_before));  // proposals stay in seq.draft
  seq.sched.tokens = seq.tokens;
  seq.sched.n_spec = 0;
  const int32_t n_accepted = processor_->process_spec_chunk(seq, c, logits, i, ev);
  kv_.truncate(seq.sched.kv, n_before + n_accepted);
  Scheduler::on_computed(seq.sched, 1 + n_accepted, kv_);
  seq.spec_k.update(c.n_spec, n_accepted);
  counters_.spec_num_drafts++;
  counters_.spec_num_draft_tokens += static_cast<uint64_t>(c.n_spec);
  counters_.spec_num_accepted_tokens += static_cast<uint64_t>(n_accepted);
  for (int32_t j = 0; j < n_accepted; ++j) counters_.spec_accepted_per_pos[static_cast<size_t>(j)]++;
}

RequestEvent& Engine::new_event() {
  LUMEN_CHECK(n_events_ < events_.size());  // sized for every completion + one
  RequestEvent& ev = events_[n_events_++];
  ev.clear();
  return ev;
}

// One step: the scheduler plans (plain data), the model runner computes the logits rows,
// the scheduler's bookkeeping advances each sequence's KV, the output processor turns
// rows into tokens and events, and finished completions give their blocks back.
std::span<RequestEvent> Engine::step() {
  n_events_ = 0;
  processor_->begin_step();
  if (!has_work()) return {};
  for (SchedSeq* s : running_) {  // completions that filled the context last step and go on
    Sequence& seq = *seqs_.at(s->seq_id);
    if (!seq.finished && static_cast<int64_t>(seq.tokens.size()) > config_.n_ctx) shift_context(seq);
  }
  propose_drafts();
  scheduler_.schedule(running_, waiting_, kv_, plan_);
  trim_drafts(plan_);
  const SchedulerOutput& plan = plan_;
  counters_.preemptions += plan.preempted.size();
  for (uint64_t sid : plan.preempted) {
    Sequence& s = *find_running(sid);
    if (proposer_) proposer_->release(sid);
    s.prompt_logprobs.clear();  // recomputed from scratch
    s.prompt_argmax.clear();
    std::fill(s.embd_sum.begin(), s.embd_sum.end(), 0.0);
    s.n_embd_pooled = 0;
  }
  for (uint64_t sid : plan.admitted) {
    Sequence& s = *find_running(sid);
    RequestState& req = *s.req;
    if (req.timings.first_scheduled_ms == 0) {
      req.timings.first_scheduled_ms = now_ms();
      req.usage.cached_tokens = static_cast<int32_t>(s.sched.n_cached_tokens);
      counters_.prompt_tokens += req.n_prompt;
      counters_.cached_tokens += s.sched.n_cached_tokens;
    }
  }
  if (plan.chunks.empty()) {
    if (running_.empty() && !waiting_.empty() && kv_.n_used_blocks() == 0) {
      // Not even the first chunk of the best waiting request fits in an empty cache.
      Sequence& s = *find_running(waiting_.front()->seq_id);
      RequestEvent& ev = new_event();
      ev.error = "KV cache too small for this request (increase --kv-memory)";
      finish(s, FinishReason::kError, ev);
      processor_->complete_requests(std::span(events_).first(n_events_));
      release_finished();
    }
    return std::span(events_).first(n_events_);
  }
  counters_.steps++;

  runner_seqs_.clear();
  for (const ScheduledChunk& c : plan.chunks) {
    const Sequence& seq = *find_running(c.seq_id);
    const GenerationParams& p = seq.req->params;
    runner_seqs_.push_back(
        {seq.tokens, seq.sched.kv.tables, seq.req->n_prompt, LogitRows{p.prompt_logprobs, 1 + c.n_spec, p.embed}});
  }
  const StepLogits logits = runner_->run(plan, runner_seqs_);

  for (size_t i = 0; i < plan.chunks.size(); ++i) {
    const ScheduledChunk& c = plan.chunks[i];
    Sequence& seq = *find_running(c.seq_id);
    RequestState& req = *seq.req;
    if (c.catches_up && seq.n_generated < req.params.max_tokens) seq.spec.target_steps++;
    if (c.n_spec > 0) {
      verify_chunk(seq, c, logits, i, new_event());
      continue;
    }
    Scheduler::on_computed(seq.sched, c.n_tokens, kv_);
    if (seq.shift_t0_ms > 0 && c.catches_up) {  // a context shift's recompute is done
      const double ms = now_ms() - seq.shift_t0_ms;
      counters_.context_shift_ms += ms;
      seq.shift_t0_ms = 0;
      LUMEN_LOG_INFO("engine: context shift of request %llu: recomputed the rest (%lld tokens in the cache) in %.2f ms",
                     static_cast<unsigned long long>(req.id), static_cast<long long>(seq.sched.n_tokens_computed), ms);
    }
    // n > 1: when the prompt is done, the other completions fork from this one and sample
    // their first tokens from the same row.
    const bool fork = c.catches_up && req.params.n > 1 && !req.forked && seq.n_generated < req.params.max_tokens;
    if (fork) fork_completions(seq);
    RequestEvent& ev = new_event();
    processor_->process_chunk(seq, c, logits, i, ev);
    if (fork) {
      for (uint64_t sid : req.seq_ids) {
        Sequence& child = *seqs_.at(sid);
        if (&child != &seq) processor_->sample_first(child, logits.last_row(i), new_event());
      }
    }
  }
  // Drop the events with nothing to tell (a prompt chunk), keeping order; the dropped
  // slots keep their buffers for later steps.
  size_t n = 0;
  for (size_t i = 0; i < n_events_; ++i) {
    const RequestEvent& ev = events_[i];
    if (!ev.finished && ev.new_token_ids.empty() && ev.text_delta.empty() && ev.prompt_logprobs.empty()) continue;
    if (n != i) std::swap(events_[n], events_[i]);
    ++n;
  }
  n_events_ = n;
  processor_->complete_requests(std::span(events_).first(n_events_));
  release_finished();
#ifndef NDEBUG
  if (!has_work()) {
    const std::string inv = check_invariants();
    LUMEN_CHECK_MSG(inv.empty(), inv.c_str());
  }
#endif
  return std::span(events_).first(n_events_);
}

}  // namespace lumen::engine
