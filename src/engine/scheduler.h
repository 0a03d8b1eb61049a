// The scheduler: which tokens of which sequences run in the next forward step.
//
// It has no prefill or decode "modes": every sequence catches up. Each step, for each
// running sequence in order,
//
//   n_tokens_scheduled = min(n_tokens_target - n_tokens_computed, budget_left)
//
// where n_tokens_target = prompt + generated tokens. A new prompt is therefore prefilled
// in chunks as large as the token budget allows (chunked prefill), and a sequence that has
// caught up schedules exactly one token (decode). Output is plain data (ids, counts,
// positions): a step can be logged, replayed and tested without a model.
//
// Blocks: before a sequence is scheduled its block table is grown to cover the new tokens.
// Single-threaded by contract (the engine thread).
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

#include "kv/kv_cache.h"

namespace lumen::engine {

struct SchedSeq {
  uint64_t seq_id = 0;
  int64_t n_tokens_target = 0;    // tokens known: prompt + generated
  int64_t n_tokens_computed = 0;  // tokens whose K/V are in the cache
  kv::BlockTable blocks;
};

struct ScheduledChunk {
  uint64_t seq_id = 0;
  int64_t pos0 = 0;        // == n_tokens_computed before the step
  int32_t n_tokens = 0;
  bool catches_up = false;  // after this chunk the sequence has computed all known tokens
};

struct SchedulerOutput {
  std::vector<ScheduledChunk> chunks;
  int32_t n_tokens = 0;  // sum of chunk sizes
};

struct SchedulerConfig {
  int32_t max_batch_tokens = 512;  // token budget per step
  int32_t max_seqs = 8;            // running sequences at most
  int32_t block_size = 16;
};

class Scheduler {
 public:
  explicit Scheduler(const SchedulerConfig& config) : config_(config) {}

  // Plans one step over `running` (in priority order). Sequences that cannot get blocks
  // are skipped this step (preemption arrives with the serving scheduler).
  SchedulerOutput schedule(std::vector<SchedSeq*>& running, kv::BlockPool& pool) const;

  const SchedulerConfig& config() const { return config_; }

 private:
  SchedulerConfig config_;
};

}  // namespace lumen::engine
