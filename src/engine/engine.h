// The engine: requests in, tokens out, one step at a time. `lumen run`, `lumen chat`,
// `lumen perplexity` and (later) `lumen serve` all drive this same object: there is one
// code path through the model, not a demo path and a serving path.
//
//   add_request() -> waiting -> running -> Scheduler::schedule() -> ForwardBatch ->
//   Model::forward() -> sample -> append token -> detokenize + stop strings -> events
//
// Single-threaded by contract: one thread calls add_request/step/cancel. The server will
// put a queue in front of it; compute parallelism is inside forward() via the ThreadPool.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/progress.h"
#include "base/status.h"
#include "base/thread_pool.h"
#include "engine/context_shift.h"
#include "engine/model_runner.h"
#include "engine/output_processor.h"
#include "engine/request.h"
#include "engine/scheduler.h"
#include "engine/sequence.h"
#include "kernels/ops.h"
#include "kv/kv_manager.h"
#include "model/model.h"
#include "sample/sampler.h"
#include "spec/adaptive.h"
#include "spec/proposer.h"
#include "spec/step_costs.h"
#include "tokenizer/tokenizer.h"

namespace lumen::engine {

// llama.cpp's -fa values.
enum class FlashAttn : uint8_t { kOff, kOn, kAuto };

// Whether attention runs as flash attention for this mode and these cache types: kOn and
// kOff as given (kOff with a type only flash attention reads is an error naming the
// flags), kAuto chosen from measurements (engine.cc).
Result<bool> resolve_flash_attn(FlashAttn mode, KvDTypes types);
// An error naming --rotate-k when the rotation is asked for with a K type it cannot help.
Status check_rotate_k(bool rotate_k, KvDTypes types);

struct EngineConfig {
  int n_threads = 0;               // 0: all cores
  int32_t n_ctx = 0;               // per-sequence context; 0: min(trained context, 4096)
  int32_t max_batch_tokens = 512;  // tokens per forward step (prefill chunk size)
  int32_t max_seqs = 1;            // sequences running at once
  int32_t block_size = 16;         // KV block size in tokens
  int64_t kv_memory_bytes = 0;     // 0: enough for max_seqs full contexts
  KvDTypes kv_dtypes = {};         // K and V cache types (kernels::kv_cache_supports)
  // Flash attention (kernels::flash_attention): on, off, or auto (create() resolves it to
  // on or off: on for a cache type that needs it, see resolve_flash_attn).
  FlashAttn flash_attn = FlashAttn::kAuto;
  // A Hadamard rotation of q and k before K is cached (model::ModelLimits::rotate_qk):
  // less quantization error in a q8_0 / q4_0 K cache. Needs a quantized K type.
  bool rotate_k = false;
  // Multi-head latent attention: steps of at least this many tokens of a sequence run in
  // the expanded form (model::ModelLimits::mla_expand_tokens); 0: the measured default,
  // < 0: never. Non-zero for a model without latent attention is an error.
  int32_t mla_expand_tokens = 0;
  int32_t max_logit_rows = 0;      // 0: max_seqs (set to max_batch_tokens for prompt logprobs)
  bool use_reference_kernels = false;
  // Copy the matrices at load into the kernels' row-interleaved layout (kernel_table.h):
  // decode streams them at close to full memory bandwidth. Off: the kernels read the
  // mmapped file as it is (load is faster; the file's pages are shared between processes).
  bool interleave_weights = true;
  // model::ModelLimits::refresh_page_cache_for_huge_pages (--refresh-pages).
  bool refresh_page_cache = false;
  // Where the interleaved copies are cached as a file (mmapped on later loads; see
  // model/interleaved_cache.h). Empty: they are packed into memory at every load.
  std::string interleave_cache_dir = "";
  // Told while the interleaved copies are packed (a first load writing the cache file);
  // null: nobody is watching. Must outlive create().
  Progress* load_progress = nullptr;
  // There is no "deterministic" switch: a request's logits are the same bits whatever runs
  // beside it, on any number of threads, with or without the prefix cache (the kernels are
  // batch invariant; tests/batch_invariance_test.cc). One exception: a latent-attention
  // model (deepseek2) with mla_expand_tokens > 0 (the default) computes a step of that many
  // tokens in the expanded form and a shorter one absorbed, so a token's bits depend on the
  // size of the step it came in; each form alone is invariant: --mla-expand off restores it.
  bool enable_prefix_cache = true;
  // Room for embedding requests (GenerationParams::embed): [max_batch_tokens][n_embd]
  // hidden-state rows per step. Off: they are refused.
  bool enable_embeddings = false;
  // Speculative decoding (spec/): off unless a proposer is chosen.
  spec::SpecConfig spec = {};
  // How requests that ask for a context shift shift (context_shift.h).
  ContextShiftMode context_shift_mode = ContextShiftMode::kReRope;
};

// Counters and gauges for /metrics (a consistent snapshot).
struct EngineMetrics {
  // gauges
  int32_t n_running = 0;
  int32_t n_waiting = 0;
  int32_t kv_blocks_used = 0;     // all groups
  int32_t kv_blocks_total = 0;
  std::vector<kv::KvGroupUsage> kv_groups;  // [n_groups] blocks, bytes per token, window
  uint64_t kv_seq_bytes_max = 0;  // most KV bytes one live sequence holds (all groups)
  uint64_t kv_seq_bytes_sum = 0;  // KV bytes of all live sequences (shared blocks count for each)
  int32_t n_kv_seqs = 0;          // live sequences holding blocks
  // counters since start
  uint64_t prompt_tokens = 0;
  uint64_t generated_tokens = 0;
  uint64_t cached_tokens = 0;
  uint64_t preemptions = 0;
  uint64_t context_shifts = 0;    // completions that filled the context and shifted (run, chat)
  double context_shift_ms = 0;    // spent on them: moving rows (re-RoPE) or recomputing the rest
  uint64_t requests_finished = 0;
  uint64_t steps = 0;
  // speculative decoding (vLLM's spec_decode names where they exist)
  uint64_t spec_num_drafts = 0;           // verify chunks (sequences x steps that speculated)
  uint64_t spec_num_draft_tokens = 0;     // proposed tokens verified
  uint64_t spec_num_accepted_tokens = 0;  // of those, accepted
  std::vector<uint64_t> spec_accepted_per_pos;  // [draft_max] verifies that accepted position j
};

// The pooling a model's metadata asks for (<arch>.pooling_type), kLast for a decoder LLM
// that names none; an error for one lumen does not do (rank).
Result<Pooling> model_pooling(const model::HParams& hp);
// "mean" | "cls" | "last" (a --pooling value); the error names the value.
Result<Pooling> parse_pooling(std::string_view name);

class Engine {
 public:
  ~Engine();
  // The model runner and output processor hold references into the engine: not movable.
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Opens the model (any container), its tokenizer, sizes every buffer. `proposer`: the
  // speculative proposer when config.spec.kind is kCustom (and only then).
  static Result<std::unique_ptr<Engine>> create(const std::string& model_path, const EngineConfig& config,
                                                std::unique_ptr<spec::Proposer> proposer = nullptr);

  const model::HParams& hparams() const { return model_.hparams(); }
  const model::Model& model() const { return model_; }
  const tok::Tokenizer& tokenizer() const { return tokenizer_; }
  const EngineConfig& config() const { return config_; }
  std::string_view kernel_name() const;
  double load_ms() const { return load_ms_; }
  // What loading did with the interleaved copies (which cache file, whether it wrote it).
  const model::Model::InterleaveReport& interleave_report() const { return interleave_report_; }

  // Checks a request against the engine's limits without queueing it. Thread-safe (reads
  // only immutable configuration). Errors name the field (e.g. prompt too long).
  Status validate(const Request& request) const;
  // Validates and queues a request under `id` (0: the engine picks one).
  Result<RequestId> add_request(Request request, RequestId id = 0);
  // Runs one forward step (if there is work) and returns what happened to each request,
  // in order; a request's last event (request_finished) comes after its others. The events
  // are valid until the next step() (their buffers are reused: a caller that keeps one
  // moves it out).
  std::span<RequestEvent> step();
  bool has_work() const { return !waiting_.empty() || !running_.empty(); }
  // Stops a request (all its completions) and frees its blocks at once.
  void cancel(RequestId id);
  // Timings of a finished request (kept until the next add_request with the same id).
  std::optional<RequestTimings> timings(RequestId id) const;

  // Analysis hooks (lumen imatrix, perplexity --kl-divergence); both run on the engine
  // thread inside step() and must not call back into the engine.
  //   the model's named taps (model.h): intermediate activations of every forward pass
  void set_model_tap(model::TapFn tap) { model_.set_tap(std::move(tap)); }
  //   the logits of every prompt position of a request that asks for prompt_logprobs, as
  //   they are computed: `pos` is the position whose logits predict prompt token pos + 1
  void set_prompt_logits_observer(OutputProcessor::PromptLogitsFn fn) {
    processor_->set_prompt_logits_observer(std::move(fn));
  }

  int32_t kv_blocks_in_use() const { return kv_.n_used_blocks(); }
  int32_t kv_blocks_total() const { return kv_.n_blocks(); }
  const kv::KvManager& kv() const { return kv_; }
  int32_t n_waiting() const { return static_cast<int32_t>(waiting_.size()); }
  // The verify cost measured at start when speculating (empty otherwise): forward ms by
  // tokens in the step, each with a logits row (spec/step_costs.h).
  const spec::StepCosts& step_costs() const { return step_costs_; }
  EngineMetrics metrics() const;
  // The same, into *out (reusing its buffers: the engine loop refreshes it every step).
  void metrics(EngineMetrics* out) const;
  // The KV cache's invariants, pools and every sequence's tables (tests; also checked
  // when the engine goes idle in debug builds).
  std::string check_invariants() const;

 private:
  Engine(model::Model model, tok::Tokenizer tokenizer);

  Sequence* find_running(uint64_t seq_id);
  void fork_completions(Sequence& parent);
  // Context shift (context_shift.h) of a completion whose tokens outgrew the context: drops
  // the oldest half after its n_keep tokens and sets its KV back to what stays valid.
  void shift_context(Sequence& seq);
  // Speculation, around the scheduler: proposals appended to caught-up sequences before
  // it plans, trimmed to what it scheduled after, verified and rolled back after forward.
  void init_spec(Sequence& seq) const;
  // Times forward passes of n tokens of one scratch sequence (n logits rows each) for the
  // n in `n_tokens` (ascending), the best of n_reps each. Empty if the KV cache cannot
  // hold the largest.
  spec::StepCosts measure_step_costs(std::span<const int32_t> n_tokens, int n_reps);
  void propose_drafts();
  void trim_drafts(const SchedulerOutput& plan);
  void verify_chunk(Sequence& seq, const ScheduledChunk& c, const StepLogits& logits, size_t i, RequestEvent& ev);
  void finish(Sequence& seq, FinishReason reason, RequestEvent& ev);
  void release_finished();
  RequestEvent& new_event();

  EngineConfig config_;
  model::Model model_;
  tok::Tokenizer tokenizer_;
  const kernels::KernelTable* kernels_ = nullptr;
  model::Model::InterleaveReport interleave_report_;
  std::unique_ptr<ThreadPool> pool_threads_;
  kv::KvManager kv_;
  Scheduler scheduler_{SchedulerConfig{}};
  std::unique_ptr<ModelRunner> runner_;
  std::unique_ptr<OutputProcessor> processor_;
  RequestId next_id_ = 1;
  uint64_t next_seq_id_ = 1;
  uint64_t next_arrival_ = 1;
  std::map<RequestId, std::unique_ptr<RequestState>> requests_;  // live requests
  std::map<uint64_t, std::unique_ptr<Sequence>> seqs_;            // live sequences by seq id
  std::deque<SchedSeq*> waiting_;    // scheduler views, (priority, arrival) order
  std::vector<SchedSeq*> running_;
  std::string model_id_;
  std::map<RequestId, RequestTimings> finished_timings_;
  EngineMetrics counters_;
  double load_ms_ = 0;

  // Per-step buffers, sized at creation (no per-token allocation).
  SchedulerOutput plan_;                 // this step's plan
  std::vector<RunnerSeq> runner_seqs_;   // [<= max_seqs] what the runner needs of each chunk
  std::vector<RequestEvent> events_;     // [max_seqs + 1] reused event slots
  std::unique_ptr<spec::Proposer> proposer_;  // null: no speculation
  std::vector<spec::ProposeSeq> propose_seqs_;  // [<= max_seqs] this step's proposal requests
  std::vector<Sequence*> drafted_;       // [<= max_seqs] sequences holding proposals this step
  std::vector<int32_t> draft_k_;         // [<= max_seqs] k each candidate would propose
  spec::StepCosts step_costs_;           // measured at start (spec.measure_cost)
  kv::KvMove shift_move_;                // a re-RoPE context shift's old tables
  std::vector<std::span<const int32_t>> shift_src_, shift_dst_;  // [n_groups] its tables
  double propose_ms_per_pos_ = 0;        // proposer time per proposed position (decayed mean)
  size_t n_events_ = 0;                  // events_ written this step
};

}  // namespace lumen::engine
