#include "engine/scheduler.h"

#include <algorithm>

namespace lumen::engine {

SchedulerOutput Scheduler::schedule(std::vector<SchedSeq*>& running, kv::BlockPool& pool) const {
  SchedulerOutput out;
  int32_t budget = config_.max_batch_tokens;
  // Decode tokens first (sequences that are caught up but for their last sampled token),
  // so that long prompts never stall the sequences that are already generating.
  for (int pass = 0; pass < 2 && budget > 0; ++pass) {
    for (SchedSeq* s : running) {
      if (budget <= 0) break;
      const int64_t behind = s->n_tokens_target - s->n_tokens_computed;
      if (behind <= 0) continue;
      const bool is_decode = behind == 1;
      if ((pass == 0) != is_decode) continue;
      const int32_t n = static_cast<int32_t>(std::min<int64_t>(behind, budget));
      if (!s->blocks.reserve(pool, s->n_tokens_computed + n, config_.block_size)) continue;
      out.chunks.push_back({s->seq_id, s->n_tokens_computed, n, n == behind});
      out.n_tokens += n;
      budget -= n;
    }
  }
  return out;
}

}  // namespace lumen::engine
