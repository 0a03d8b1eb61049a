// The scheduler: which tokens of which sequences run in the next forward step.
//
// It has no prefill or decode "modes": every sequence catches up. Each step, for each
// running sequence in priority order,
//
//   n_tokens_scheduled = min(n_tokens_target - n_tokens_computed, budget_left)
//
// where n_tokens_target = prompt + generated tokens. A new prompt is therefore prefilled
// in chunks as large as the token budget allows (chunked prefill), a sequence that has
// caught up schedules exactly one token (decode), and prefix-cache hits simply start a
// sequence with n_tokens_computed > 0. Output is plain data (ids, counts, positions,
// block ids): a step can be logged, replayed and tested without a model.
//
// One step, in order (each a small function with its own tests):
//   1. schedule_running(): decode tokens first, then prefill chunks, in priority order.
//      A sequence whose next blocks do not fit (in any KV group) preempts the
//      lowest-priority running sequence not yet scheduled this step (preemption by
//      recompute: its blocks are released — full ones stay in the prefix cache — and it
//      waits again), or itself.
//   2. admit_waiting(): while slots, budget and blocks allow, the best waiting sequence
//      looks its prompt up in the prefix cache (whole blocks; never the whole prompt, so
//      its last token is always computed) and starts with a first chunk. When others are
//      running, every KV group must keep its watermark free after the admission.
// After the forward pass, on_computed() advances each scheduled sequence: its new full
// blocks enter the prefix cache and sliding-window groups release what no later query
// can see.
//
// The KV cache manager (kv/kv_manager.h) does the block arithmetic per layer group; the
// scheduler only asks it whether n tokens fit and has them allocated. Copy-on-write copies
// it asks for are listed in the output for the model runner to perform before the forward
// pass.
//
// Single-threaded by contract (the engine thread). schedule() fills a caller-owned output
// whose buffers, and the scheduler's own, are sized at creation: planning a step
// allocates nothing.
#pragma once

#include <cstdint>
#include <deque>
#include <span>
#include <vector>

#include "kv/kv_manager.h"

namespace lumen::engine {

struct SchedSeq {
  uint64_t seq_id = 0;
  int32_t priority = 0;           // lower runs first
  uint64_t arrival = 0;           // FCFS among equal priorities
  int32_t n_slots = 1;            // running slots it takes (n for an unforked n>1 request)
  std::span<const int32_t> tokens;  // every known token (prompt + generated)
  int64_t n_tokens_computed = 0;  // tokens whose K/V are in the cache
  int64_t n_cached_tokens = 0;    // of those, taken from the prefix cache at admission
  bool prefix_lookup = true;      // false: admission never takes blocks from the prefix cache
  kv::SeqKv kv;                   // block tables and prefix hashes, per KV group
  // Proposed (speculative) tokens at the end of `tokens`, not yet verified. They are
  // scheduled like any other catch-up tokens, after the committed ones; a chunk may take
  // fewer of them than proposed (budget), and preemption drops them.
  int32_t n_spec = 0;

  int64_t n_tokens_target() const { return static_cast<int64_t>(tokens.size()); }
  int64_t n_tokens_committed() const { return n_tokens_target() - n_spec; }
};

struct ScheduledChunk {
  uint64_t seq_id = 0;
  int64_t pos0 = 0;        // == n_tokens_computed before the step
  int32_t n_tokens = 0;
  bool catches_up = false;  // after this chunk the sequence has computed all committed tokens
  int32_t n_spec = 0;       // of n_tokens, proposed tokens to verify (the chunk's last ones)
};

struct SchedulerOutput {
  std::vector<ScheduledChunk> chunks;
  std::vector<uint64_t> admitted;   // moved waiting -> running this step
  std::vector<uint64_t> preempted;  // moved running -> waiting (blocks released)
  std::vector<kv::BlockCopy> copies;  // copy-on-write, to do before the forward pass
  int32_t n_tokens = 0;               // sum of chunk sizes

  void clear();  // keeps the buffers
};

struct SchedulerConfig {
  int32_t max_batch_tokens = 512;  // token budget per step
  int32_t max_seqs = 8;            // running slots
};

class Scheduler {
 public:
  explicit Scheduler(const SchedulerConfig& config);

  // Plans one step into `out` (cleared first). `running` and `waiting` are updated in
  // place: admitted sequences move to running, preempted ones back to waiting (kept in
  // (priority, arrival) order). KV blocks are allocated (and released, on preemption)
  // through `kv`.
  void schedule(std::vector<SchedSeq*>& running, std::deque<SchedSeq*>& waiting, kv::KvManager& kv,
                SchedulerOutput& out);

  // After a step: n_tokens more of the sequence are computed. Registers its new full
  // blocks in the prefix cache and releases the blocks its sliding windows left behind.
  static void on_computed(SchedSeq& seq, int32_t n_tokens, kv::KvManager& kv);

  // Releases the sequence's blocks and resets it for recompute (dropping its proposals).
  static void reset_for_recompute(SchedSeq& seq, kv::KvManager& kv);

  const SchedulerConfig& config() const { return config_; }

 private:
  void schedule_running(std::vector<SchedSeq*>& running, std::deque<SchedSeq*>& waiting,
                        kv::KvManager& kv, int32_t& budget, SchedulerOutput& out);
  void admit_waiting(std::vector<SchedSeq*>& running, std::deque<SchedSeq*>& waiting,
                     kv::KvManager& kv, int32_t& budget, SchedulerOutput& out) const;

  SchedulerConfig config_;
  // schedule_running's work space, [max_seqs] (a running sequence takes >= 1 slot).
  std::vector<char> scheduled_, preempted_;
  std::vector<SchedSeq*> kept_;
};

// (priority, arrival) order: true if a runs before b.
inline bool runs_before(const SchedSeq* a, const SchedSeq* b) {
  return a->priority != b->priority ? a->priority < b->priority : a->arrival < b->arrival;
}

}  // namespace lumen::engine
