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
//      A sequence whose next block does not fit preempts the lowest-priority running
//      sequence not yet scheduled this step (preemption by recompute: its blocks are
//      released — full ones stay in the prefix cache — and it waits again), or itself.
//   2. admit_waiting(): while slots, budget and blocks allow, the best waiting sequence
//      looks its prompt up in the prefix cache (whole blocks; never the whole prompt, so
//      its last token is always computed) and starts with a first chunk.
//
// Copy-on-write: a sequence about to write into a block it shares (forked n>1 siblings
// share their prompt's last, partial block) gets a private copy first; the copy is listed
// in the output for the model runner to perform before the forward pass.
//
// Single-threaded by contract (the engine thread).
#pragma once

#include <cstdint>
#include <deque>
#include <span>
#include <vector>

#include "kv/kv_cache.h"

namespace lumen::engine {

struct SchedSeq {
  uint64_t seq_id = 0;
  int32_t priority = 0;           // lower runs first
  uint64_t arrival = 0;           // FCFS among equal priorities
  int32_t n_slots = 1;            // running slots it takes (n for an unforked n>1 request)
  std::span<const int32_t> tokens;  // every known token (prompt + generated)
  int64_t n_tokens_computed = 0;  // tokens whose K/V are in the cache
  int64_t n_cached_tokens = 0;    // of those, taken from the prefix cache at admission
  uint64_t root_hash = 0;         // prefix-cache namespace (model id + cache_salt)
  std::vector<uint64_t> block_hashes;  // hash chain of the full computed blocks
  kv::BlockTable blocks;

  int64_t n_tokens_target() const { return static_cast<int64_t>(tokens.size()); }
};

struct ScheduledChunk {
  uint64_t seq_id = 0;
  int64_t pos0 = 0;        // == n_tokens_computed before the step
  int32_t n_tokens = 0;
  bool catches_up = false;  // after this chunk the sequence has computed all known tokens
};

struct BlockCopy {
  int32_t src_block = 0;
  int32_t dst_block = 0;
};

struct SchedulerOutput {
  std::vector<ScheduledChunk> chunks;
  std::vector<uint64_t> admitted;   // moved waiting -> running this step
  std::vector<uint64_t> preempted;  // moved running -> waiting (blocks released)
  std::vector<BlockCopy> copies;    // copy-on-write, to do before the forward pass
  int32_t n_tokens = 0;             // sum of chunk sizes
};

struct SchedulerConfig {
  int32_t max_batch_tokens = 512;  // token budget per step
  int32_t max_seqs = 8;            // running slots
  int32_t block_size = 16;
  bool enable_prefix_cache = true;
};

class Scheduler {
 public:
  explicit Scheduler(const SchedulerConfig& config) : config_(config) {}

  // Plans one step. `running` and `waiting` are updated in place: admitted sequences move
  // to running, preempted ones back to waiting (kept in (priority, arrival) order).
  SchedulerOutput schedule(std::vector<SchedSeq*>& running, std::deque<SchedSeq*>& waiting,
                           kv::BlockPool& pool) const;

  // After a step: registers the sequence's newly completed full blocks in the prefix cache.
  void cache_full_blocks(SchedSeq& seq, kv::BlockPool& pool) const;

  // Releases the sequence's blocks and resets it for recompute.
  static void reset_for_recompute(SchedSeq& seq, kv::BlockPool& pool);

  const SchedulerConfig& config() const { return config_; }

 private:
  void schedule_running(std::vector<SchedSeq*>& running, std::deque<SchedSeq*>& waiting,
                        kv::BlockPool& pool, int32_t& budget, SchedulerOutput& out) const;
  void admit_waiting(std::vector<SchedSeq*>& running, std::deque<SchedSeq*>& waiting,
                     kv::BlockPool& pool, int32_t& budget, SchedulerOutput& out) const;
  // Makes room for n more tokens: copy-on-write of a shared tail block, then new blocks.
  // All or nothing: false leaves the sequence and the pool as they were.
  bool grow(SchedSeq& seq, int32_t n, kv::BlockPool& pool, SchedulerOutput& out) const;
  // Prefix-cache lookup for a sequence with nothing computed.
  void acquire_prefix(SchedSeq& seq, kv::BlockPool& pool) const;

  SchedulerConfig config_;
};

// (priority, arrival) order: true if a runs before b.
inline bool runs_before(const SchedSeq* a, const SchedSeq* b) {
  return a->priority != b->priority ? a->priority < b->priority : a->arrival < b->arrival;
}

}  // namespace lumen::engine
