// Engine::shift_context (context_shift.h).
#include "engine/context_shift.h"

#include "base/check.h"
#include "engine/engine.h"

namespace lumen::engine {

void Engine::shift_context(Sequence& seq) {
  const int64_t n_past = static_cast<int64_t>(seq.tokens.size()) - 1;  // the last one was just sampled
  const ContextShiftPlan plan = plan_context_shift(n_past, seq.req->params.n_keep);
  LUMEN_CHECK(plan.n_discard > 0 && seq.sched.n_spec == 0);  // OutputProcessor::can_shift_context
  const auto keep = static_cast<ptrdiff_t>(plan.n_keep);
  seq.tokens.erase(seq.tokens.begin() + keep, seq.tokens.begin() + keep + plan.n_discard);
  SchedSeq& s = seq.sched;
  s.tokens = seq.tokens;
  counters_.context_shifts++;
  if (proposer_) proposer_->release(s.seq_id);  // its view of the sequence is gone
  if (s.n_tokens_computed <= plan.n_keep) return;  // (a preempted completion holds none)
  bool all_full = true;
  for (int32_t g = 0; g < kv_.n_groups(); ++g) all_full = all_full && kv_.usage(g).window == 0;
  if (all_full) {
    kv_.truncate(s.kv, plan.n_keep);
    s.n_tokens_computed = plan.n_keep;
  } else {
    // A sliding group has released the blocks that a query just past n_keep would see:
    // start again from what the prefix cache holds of the new tokens (at least the kept
    // full blocks when it is on), as a preempted sequence does.
    kv_.release_all(s.kv);
    s.n_tokens_computed = kv_.acquire_prefix(s.kv, seq.tokens);
  }
}

}  // namespace lumen::engine
