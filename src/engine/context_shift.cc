// Engine::shift_context (context_shift.h).
#include "engine/context_shift.h"

#include "base/check.h"
#include "base/log.h"
#include "base/timer.h"
#include "engine/engine.h"

namespace lumen::engine {

void Engine::shift_context(Sequence& seq) {
  const double t0 = now_ms();
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
  const int64_t n_end = n_past - plan.n_discard;
  if (config_.context_shift_mode == ContextShiftMode::kReRope && s.n_tokens_computed == n_past &&
      model_.can_move_kv(config_.kv_dtypes.k) && kv_.begin_move(s.kv, plan.n_keep, n_end, &shift_move_)) {
    shift_src_.clear();
    shift_dst_.clear();
    for (int32_t g = 0; g < kv_.n_groups(); ++g) {
      shift_src_.push_back(shift_move_.old_tables[g]);
      shift_dst_.push_back(s.kv.tables[g].ids());
    }
    // The kept rows of the block holding n_keep, then the rest, n_discard positions down.
    const int64_t kept_from = int64_t{shift_move_.first_block} * kv_.block_size();
    model_.move_kv(*kernels_, kv_.views(), shift_src_, shift_dst_, kept_from, kept_from, plan.n_keep - kept_from);
    model_.move_kv(*kernels_, kv_.views(), shift_src_, shift_dst_, plan.n_keep + plan.n_discard, plan.n_keep,
                   n_past - plan.n_keep - plan.n_discard);
    kv_.end_move(s.kv, n_end, &shift_move_);
    s.n_tokens_computed = n_end;
    const double ms = now_ms() - t0;
    counters_.context_shift_ms += ms;
    LUMEN_LOG_INFO("engine: context shift of request %llu: kept %lld, dropped %lld, moved %lld tokens (re-RoPE) in %.2f ms",
                   static_cast<unsigned long long>(seq.req->id), static_cast<long long>(plan.n_keep),
                   static_cast<long long>(plan.n_discard), static_cast<long long>(n_end - plan.n_keep), ms);
    return;
  }
  seq.shift_t0_ms = t0;  // the step that catches up reports the time
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
