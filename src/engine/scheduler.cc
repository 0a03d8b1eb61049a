#include "engine/scheduler.h"

#include <algorithm>

#include "base/check.h"

namespace lumen::engine {
namespace {

void insert_waiting(std::deque<SchedSeq*>& waiting, SchedSeq* s) {
  waiting.insert(std::upper_bound(waiting.begin(), waiting.end(), s, runs_before), s);
}

int32_t used_slots(const std::vector<SchedSeq*>& running) {
  int32_t n = 0;
  for (const SchedSeq* s : running) n += s->n_slots;
  return n;
}

}  // namespace

void SchedulerOutput::clear() {
  chunks.clear();
  admitted.clear();
  preempted.clear();
  copies.clear();
  n_tokens = 0;
}

Scheduler::Scheduler(const SchedulerConfig& config) : config_(config) {
  scheduled_.reserve(config.max_seqs);
  preempted_.reserve(config.max_seqs);
  kept_.reserve(config.max_seqs);
}

void Scheduler::schedule(std::vector<SchedSeq*>& running, std::deque<SchedSeq*>& waiting, kv::KvManager& kv,
                         SchedulerOutput& out) {
  out.clear();
  int32_t budget = config_.max_batch_tokens;
  // Stable insertion sort: running is short (<= max_seqs) and mostly sorted, and unlike
  // std::stable_sort it needs no temporary buffer.
  for (size_t i = 1; i < running.size(); ++i)
    for (size_t j = i; j > 0 && runs_before(running[j], running[j - 1]); --j) std::swap(running[j], running[j - 1]);
  schedule_running(running, waiting, kv, budget, out);
  admit_waiting(running, waiting, kv, budget, out);
}

void Scheduler::reset_for_recompute(SchedSeq& seq, kv::KvManager& kv) {
  kv.release_all(seq.kv);
  seq.tokens = seq.tokens.first(static_cast<size_t>(seq.n_tokens_committed()));
  seq.n_spec = 0;
  seq.n_tokens_computed = 0;
  seq.n_cached_tokens = 0;
}

void Scheduler::on_computed(SchedSeq& seq, int32_t n_tokens, kv::KvManager& kv) {
  seq.n_tokens_computed += n_tokens;
  kv.cache_full_blocks(seq.kv, seq.tokens, seq.n_tokens_computed);
  // The next query is at n_tokens_computed: nothing before its window is read again.
  kv.release_out_of_window(seq.kv, seq.n_tokens_computed);
}

void Scheduler::schedule_running(std::vector<SchedSeq*>& running, std::deque<SchedSeq*>& waiting,
                                 kv::KvManager& kv, int32_t& budget, SchedulerOutput& out) {
  scheduled_.assign(running.size(), 0);
  preempted_.assign(running.size(), 0);
  // Pass 0: sequences one token behind (decode), so long prompts never stall them.
  // Pass 1: sequences further behind (prompt chunks, recompute after preemption).
  for (int pass = 0; pass < 2; ++pass) {
    for (size_t i = 0; i < running.size() && budget > 0; ++i) {
      SchedSeq* s = running[i];
      if (scheduled_[i] || preempted_[i]) continue;
      // Proposed tokens ride behind the committed ones: a decode with k proposals is a
      // pass-0 chunk of 1 + k tokens, cut short (fewer proposals) if the budget ends.
      const int64_t behind = s->n_tokens_target() - s->n_tokens_computed;
      const int64_t behind_committed = behind - s->n_spec;
      if (behind_committed <= 0 || (pass == 0) != (behind_committed == 1)) continue;
      int32_t n = static_cast<int32_t>(std::min<int64_t>(behind, budget));
      bool ok = kv.allocate_slots(s->kv, s->n_tokens_computed, n, 0, &out.copies);
      if (!ok && n > behind_committed) {  // proposals never preempt anyone: drop them first
        n = static_cast<int32_t>(std::min<int64_t>(behind_committed, budget));
        ok = kv.allocate_slots(s->kv, s->n_tokens_computed, n, 0, &out.copies);
      }
      while (!ok) {
        // Preempt the lowest-priority sequence below this one that is not scheduled this
        // step; if there is none, this one waits (it is the lowest that can give way).
        size_t victim = i;
        for (size_t j = running.size(); j-- > i + 1;) {
          if (!scheduled_[j] && !preempted_[j]) {
            victim = j;
            break;
          }
        }
        reset_for_recompute(*running[victim], kv);
        preempted_[victim] = 1;
        out.preempted.push_back(running[victim]->seq_id);
        if (victim == i) break;
        ok = kv.allocate_slots(s->kv, s->n_tokens_computed, n, 0, &out.copies);
      }
      if (!ok) continue;
      scheduled_[i] = 1;
      const auto n_spec = static_cast<int32_t>(std::max<int64_t>(0, n - behind_committed));
      out.chunks.push_back({s->seq_id, s->n_tokens_computed, n, n >= behind_committed, n_spec});
      out.n_tokens += n;
      budget -= n;
    }
  }
  // Preempted sequences go back to waiting; everything else stays running.
  kept_.clear();
  for (size_t i = 0; i < running.size(); ++i) {
    if (preempted_[i]) {
      insert_waiting(waiting, running[i]);
    } else {
      kept_.push_back(running[i]);
    }
  }
  running.swap(kept_);
}

void Scheduler::admit_waiting(std::vector<SchedSeq*>& running, std::deque<SchedSeq*>& waiting,
                              kv::KvManager& kv, int32_t& budget, SchedulerOutput& out) const {
  int32_t slots = used_slots(running);
  while (!waiting.empty() && budget > 0) {
    SchedSeq* s = waiting.front();
    if (slots + s->n_slots > config_.max_seqs) break;
    LUMEN_DCHECK(s->n_spec == 0);  // waiting sequences have no proposals (reset drops them)
    if (s->n_tokens_computed == 0 && s->prefix_lookup) {
      s->n_tokens_computed = kv.acquire_prefix(s->kv, s->tokens);
      s->n_cached_tokens = s->n_tokens_computed;
    }
    const int64_t behind = s->n_tokens_target() - s->n_tokens_computed;
    const int32_t n = static_cast<int32_t>(std::min<int64_t>(behind, budget));
    // Keep each group's watermark free when others are running, so that a new admission
    // does not immediately force a preemption on the next decode step.
    const bool room = kv.can_allocate(s->kv, s->n_tokens_computed, n, 0, /*keep_watermark=*/!running.empty());
    if (n <= 0 || !room || !kv.allocate_slots(s->kv, s->n_tokens_computed, n, 0, &out.copies)) {
      reset_for_recompute(*s, kv);  // give back the prefix hits; try again next step
      break;
    }
    waiting.pop_front();
    running.push_back(s);
    slots += s->n_slots;
    out.admitted.push_back(s->seq_id);
    out.chunks.push_back({s->seq_id, s->n_tokens_computed, n, n == behind});
    out.n_tokens += n;
    budget -= n;
  }
}

}  // namespace lumen::engine
