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

SchedulerOutput Scheduler::schedule(std::vector<SchedSeq*>& running, std::deque<SchedSeq*>& waiting,
                                    kv::BlockPool& pool) const {
  SchedulerOutput out;
  int32_t budget = config_.max_batch_tokens;
  std::stable_sort(running.begin(), running.end(), runs_before);
  schedule_running(running, waiting, pool, budget, out);
  admit_waiting(running, waiting, pool, budget, out);
  return out;
}

void Scheduler::reset_for_recompute(SchedSeq& seq, kv::BlockPool& pool) {
  seq.blocks.release_all(pool);
  seq.n_tokens_computed = 0;
  seq.n_cached_tokens = 0;
  seq.block_hashes.clear();
}

bool Scheduler::grow(SchedSeq& seq, int32_t n, kv::BlockPool& pool, SchedulerOutput& out) const {
  const int32_t bs = config_.block_size;
  // The block that receives position n_tokens_computed may be shared (forked siblings):
  // writing into it would corrupt the others' cache, so take a private copy first.
  const int64_t tail_idx = seq.n_tokens_computed / bs;
  std::optional<int32_t> cow;
  if (seq.n_tokens_computed % bs != 0 && tail_idx < seq.blocks.n_blocks()) {
    const int32_t shared = seq.blocks.ids()[tail_idx];
    if (pool.ref_cnt(shared) > 1) {
      cow = pool.allocate();
      if (!cow) return false;
    }
  }
  const int64_t n_needed = (seq.n_tokens_computed + n + bs - 1) / bs - seq.blocks.n_blocks();
  if (n_needed > pool.n_free()) {
    if (cow) pool.release(*cow);
    return false;
  }
  if (cow) {
    const int32_t shared = seq.blocks.ids()[tail_idx];
    out.copies.push_back({shared, *cow});
    seq.blocks.replace(static_cast<int32_t>(tail_idx), *cow);
    pool.release(shared);
  }
  const bool ok = seq.blocks.reserve(pool, seq.n_tokens_computed + n, bs);
  LUMEN_CHECK(ok);  // counted above
  return true;
}

void Scheduler::schedule_running(std::vector<SchedSeq*>& running, std::deque<SchedSeq*>& waiting,
                                 kv::BlockPool& pool, int32_t& budget, SchedulerOutput& out) const {
  std::vector<char> scheduled(running.size(), 0);
  std::vector<char> preempted(running.size(), 0);
  // Pass 0: sequences one token behind (decode), so long prompts never stall them.
  // Pass 1: sequences further behind (prompt chunks, recompute after preemption).
  for (int pass = 0; pass < 2; ++pass) {
    for (size_t i = 0; i < running.size() && budget > 0; ++i) {
      SchedSeq* s = running[i];
      if (scheduled[i] || preempted[i]) continue;
      const int64_t behind = s->n_tokens_target() - s->n_tokens_computed;
      if (behind <= 0 || (pass == 0) != (behind == 1)) continue;
      const int32_t n = static_cast<int32_t>(std::min<int64_t>(behind, budget));
      bool ok = grow(*s, n, pool, out);
      while (!ok) {
        // Preempt the lowest-priority sequence below this one that is not scheduled this
        // step; if there is none, this one waits (it is the lowest that can give way).
        size_t victim = i;
        for (size_t j = running.size(); j-- > i + 1;) {
          if (!scheduled[j] && !preempted[j]) {
            victim = j;
            break;
          }
        }
        reset_for_recompute(*running[victim], pool);
        preempted[victim] = 1;
        out.preempted.push_back(running[victim]->seq_id);
        if (victim == i) break;
        ok = grow(*s, n, pool, out);
      }
      if (!ok) continue;
      scheduled[i] = 1;
      out.chunks.push_back({s->seq_id, s->n_tokens_computed, n, n == behind});
      out.n_tokens += n;
      budget -= n;
    }
  }
  // Preempted sequences go back to waiting; everything else stays running.
  std::vector<SchedSeq*> kept;
  kept.reserve(running.size());
  for (size_t i = 0; i < running.size(); ++i) {
    if (preempted[i]) {
      insert_waiting(waiting, running[i]);
    } else {
      kept.push_back(running[i]);
    }
  }
  running.swap(kept);
}

void Scheduler::acquire_prefix(SchedSeq& seq, kv::BlockPool& pool) const {
  if (!config_.enable_prefix_cache || seq.n_tokens_computed != 0 || seq.blocks.n_blocks() != 0) return;
  const int32_t bs = config_.block_size;
  uint64_t parent = seq.root_hash;
  // Whole blocks only, and never every token: the last token must be computed to give
  // the logits the next token is sampled from (and a cached block is never written).
  const int64_t n_max_blocks = (seq.n_tokens_target() - 1) / bs;
  for (int64_t i = 0; i < n_max_blocks; ++i) {
    std::span<const int32_t> toks = seq.tokens.subspan(i * bs, bs);
    const uint64_t h = kv::block_hash(parent, toks);
    std::optional<int32_t> hit = pool.lookup(h, parent, toks);
    if (!hit) break;
    pool.acquire_cached(*hit);
    seq.blocks.push_back(*hit);
    seq.block_hashes.push_back(h);
    parent = h;
  }
  seq.n_tokens_computed = int64_t{seq.blocks.n_blocks()} * bs;
  seq.n_cached_tokens = seq.n_tokens_computed;
}

void Scheduler::admit_waiting(std::vector<SchedSeq*>& running, std::deque<SchedSeq*>& waiting,
                              kv::BlockPool& pool, int32_t& budget, SchedulerOutput& out) const {
  // Keep a few blocks in reserve when others are running, so that a new admission does
  // not immediately force a preemption on the next decode step.
  const int32_t watermark = std::max(1, pool.n_blocks() / 100);
  int32_t slots = used_slots(running);
  while (!waiting.empty() && budget > 0) {
    SchedSeq* s = waiting.front();
    if (slots + s->n_slots > config_.max_seqs) break;
    acquire_prefix(*s, pool);
    const int64_t behind = s->n_tokens_target() - s->n_tokens_computed;
    const int32_t n = static_cast<int32_t>(std::min<int64_t>(behind, budget));
    const int64_t n_new_blocks =
        (s->n_tokens_computed + n + config_.block_size - 1) / config_.block_size - s->blocks.n_blocks();
    const bool room = running.empty() || pool.n_free() - n_new_blocks >= watermark;
    if (n <= 0 || !room || !grow(*s, n, pool, out)) {
      reset_for_recompute(*s, pool);  // give back the prefix hits; try again next step
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

void Scheduler::cache_full_blocks(SchedSeq& seq, kv::BlockPool& pool) const {
  if (!config_.enable_prefix_cache) return;
  const int32_t bs = config_.block_size;
  const int64_t n_full = seq.n_tokens_computed / bs;
  while (static_cast<int64_t>(seq.block_hashes.size()) < n_full) {
    const size_t i = seq.block_hashes.size();
    const uint64_t parent = i == 0 ? seq.root_hash : seq.block_hashes[i - 1];
    std::span<const int32_t> toks = seq.tokens.subspan(i * bs, bs);
    const uint64_t h = kv::block_hash(parent, toks);
    pool.cache_full_block(seq.blocks.ids()[i], h, parent, toks);
    seq.block_hashes.push_back(h);
  }
}

}  // namespace lumen::engine
