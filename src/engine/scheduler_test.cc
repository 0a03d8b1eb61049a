// Scheduler tests on plain data: no model, no tensors — token lists, block pools and the
// plans the scheduler makes.
#include "engine/scheduler.h"

#include <map>
#include <random>

#include <gtest/gtest.h>

namespace lumen::engine {
namespace {

constexpr int32_t kBs = 4;

struct Harness {
  explicit Harness(int32_t n_blocks, int32_t budget = 16, int32_t max_seqs = 4)
      : pool(n_blocks, kBs), sched(SchedulerConfig{budget, max_seqs, kBs, true}) {}

  SchedSeq* add(std::vector<int32_t> tokens, int32_t priority = 0) {
    auto& toks = token_store[next_id];
    toks = std::move(tokens);
    toks.reserve(1024);
    auto s = std::make_unique<SchedSeq>();
    s->seq_id = next_id++;
    s->priority = priority;
    s->arrival = s->seq_id;
    s->tokens = toks;
    s->root_hash = kv::namespace_hash("m", "");
    SchedSeq* p = s.get();
    seqs.push_back(std::move(s));
    waiting.insert(std::upper_bound(waiting.begin(), waiting.end(), p, runs_before), p);
    return p;
  }
  // Runs a step: marks scheduled tokens computed, caches full blocks, and appends a
  // "sampled" token to every sequence that caught up.
  SchedulerOutput step() {
    SchedulerOutput out = sched.schedule(running, waiting, pool);
    for (const ScheduledChunk& c : out.chunks) {
      SchedSeq* s = find(c.seq_id);
      EXPECT_EQ(c.pos0, s->n_tokens_computed);
      s->n_tokens_computed += c.n_tokens;
      EXPECT_GE(s->blocks.capacity_tokens(kBs), s->n_tokens_computed);
      sched.cache_full_blocks(*s, pool);
      if (c.catches_up) {
        auto& toks = token_store[s->seq_id];
        toks.push_back(1000 + static_cast<int32_t>(toks.size()));
        s->tokens = toks;
      }
    }
    EXPECT_EQ(pool.check_invariants(), "");
    return out;
  }
  SchedSeq* find(uint64_t id) {
    for (auto& s : seqs)
      if (s->seq_id == id) return s.get();
    return nullptr;
  }
  void finish(SchedSeq* s) {
    s->blocks.release_all(pool);
    std::erase(running, s);
    std::erase(waiting, s);
  }

  kv::BlockPool pool;
  Scheduler sched;
  std::vector<SchedSeq*> running;
  std::deque<SchedSeq*> waiting;
  std::vector<std::unique_ptr<SchedSeq>> seqs;
  std::map<uint64_t, std::vector<int32_t>> token_store;
  uint64_t next_id = 1;
};

std::vector<int32_t> iota_tokens(int n, int start = 0) {
  std::vector<int32_t> v(n);
  for (int i = 0; i < n; ++i) v[i] = start + i;
  return v;
}

TEST(Scheduler, ChunkedPrefillThenDecode) {
  Harness h(64, /*budget=*/8);
  SchedSeq* s = h.add(iota_tokens(20));
  SchedulerOutput o = h.step();
  ASSERT_EQ(o.chunks.size(), 1u);
  EXPECT_EQ(o.chunks[0].n_tokens, 8);
  EXPECT_FALSE(o.chunks[0].catches_up);
  h.step();
  o = h.step();
  EXPECT_EQ(o.chunks[0].n_tokens, 4);  // 20 = 8 + 8 + 4
  EXPECT_TRUE(o.chunks[0].catches_up);
  o = h.step();  // decode: exactly one token
  EXPECT_EQ(o.chunks[0].n_tokens, 1);
  EXPECT_EQ(s->n_tokens_computed, 21);
}

TEST(Scheduler, DecodesGoBeforePrefillChunks) {
  Harness h(64, /*budget=*/8);
  SchedSeq* a = h.add(iota_tokens(3));
  h.step();  // a prefilled, now decoding
  SchedSeq* b = h.add(iota_tokens(30, 100));
  SchedulerOutput o = h.step();
  ASSERT_EQ(o.chunks.size(), 2u);
  EXPECT_EQ(o.chunks[0].seq_id, a->seq_id);
  EXPECT_EQ(o.chunks[0].n_tokens, 1);
  EXPECT_EQ(o.chunks[1].seq_id, b->seq_id);
  EXPECT_EQ(o.chunks[1].n_tokens, 7);  // the rest of the budget
}

TEST(Scheduler, PrefixHitSkipsCachedBlocksButNeverTheLastToken) {
  Harness h(64, /*budget=*/64);
  SchedSeq* a = h.add(iota_tokens(12));
  h.step();
  h.finish(a);  // its 3 full blocks stay cached (evictable)
  SchedSeq* b = h.add(iota_tokens(12));  // the same prompt, fully cached
  SchedulerOutput o = h.step();
  ASSERT_EQ(o.chunks.size(), 1u);
  EXPECT_EQ(b->n_cached_tokens, 8);  // 2 blocks: the last block is recomputed
  EXPECT_EQ(o.chunks[0].pos0, 8);
  EXPECT_EQ(o.chunks[0].n_tokens, 4);
  SchedSeq* c = h.add([] { auto v = iota_tokens(10); v.push_back(77); return v; }());
  h.step();
  EXPECT_EQ(c->n_cached_tokens, 8);  // shares the first two blocks with b
  EXPECT_EQ(c->blocks.ids()[0], b->blocks.ids()[0]);
  EXPECT_EQ(h.pool.ref_cnt(b->blocks.ids()[0]), 2);
}

TEST(Scheduler, CacheSaltSeparatesNamespaces) {
  Harness h(64, 64);
  SchedSeq* a = h.add(iota_tokens(12));
  h.step();
  SchedSeq* b = h.add(iota_tokens(12));
  b->root_hash = kv::namespace_hash("m", "tenant-2");
  h.step();
  EXPECT_EQ(a->n_cached_tokens, 0);
  EXPECT_EQ(b->n_cached_tokens, 0);
}

TEST(Scheduler, PreemptsLowestPriorityWhenBlocksRunOut) {
  Harness h(/*n_blocks=*/6, /*budget=*/64, /*max_seqs=*/4);
  SchedSeq* hi = h.add(iota_tokens(8), /*priority=*/0);
  SchedSeq* lo = h.add(iota_tokens(12, 50), /*priority=*/5);
  h.step();  // hi: 2 blocks + lo: 3 blocks = 5 of 6
  ASSERT_EQ(h.running.size(), 2u);
  // Decode until the pool runs dry: hi needs a 3rd block at token 9, lo a 4th at 13.
  bool saw_preemption = false;
  for (int i = 0; i < 8 && !saw_preemption; ++i) {
    SchedulerOutput o = h.step();
    for (uint64_t id : o.preempted) {
      EXPECT_EQ(id, lo->seq_id);
      saw_preemption = true;
    }
  }
  EXPECT_TRUE(saw_preemption);
  EXPECT_EQ(lo->n_tokens_computed, 0);
  EXPECT_EQ(lo->blocks.n_blocks(), 0);
  ASSERT_FALSE(h.waiting.empty());
  EXPECT_EQ(h.waiting.front(), lo);
  // Once hi finishes, lo is readmitted and recomputes (its full blocks from the cache).
  h.finish(hi);
  SchedulerOutput o = h.step();
  ASSERT_EQ(o.admitted.size(), 1u);
  EXPECT_EQ(o.admitted[0], lo->seq_id);
  EXPECT_GT(lo->n_cached_tokens, 0);
}

TEST(Scheduler, SharedTailBlockIsCopiedBeforeWrite) {
  Harness h(16, 16);
  SchedSeq* a = h.add(iota_tokens(6));
  h.step();  // 6 computed + 1 sampled; block 1 half full
  // Fork b from a (what the engine does for n > 1).
  auto& toks = h.token_store[100];
  toks = h.token_store[a->seq_id];
  auto child = std::make_unique<SchedSeq>();
  child->seq_id = 100;
  child->arrival = a->arrival;
  child->tokens = toks;
  child->n_tokens_computed = a->n_tokens_computed;
  child->root_hash = a->root_hash;
  child->block_hashes = a->block_hashes;
  for (int32_t b : a->blocks.ids()) {
    h.pool.add_ref(b);
    child->blocks.push_back(b);
  }
  SchedSeq* c = child.get();
  h.seqs.push_back(std::move(child));
  h.running.push_back(c);
  const int32_t shared_tail = a->blocks.ids()[1];
  SchedulerOutput o = h.step();
  ASSERT_EQ(o.copies.size(), 1u);  // the first writer copies; the last one writes in place
  EXPECT_EQ(o.copies[0].src_block, shared_tail);
  EXPECT_NE(a->blocks.ids()[1], c->blocks.ids()[1]);
  EXPECT_EQ(a->blocks.ids()[0], c->blocks.ids()[0]);  // the full block stays shared
  EXPECT_EQ(h.pool.ref_cnt(a->blocks.ids()[0]), 2);
}

TEST(Scheduler, RespectsSeqSlotsAndBudget) {
  Harness h(64, /*budget=*/10, /*max_seqs=*/2);
  h.add(iota_tokens(4));
  h.add(iota_tokens(4, 10));
  SchedSeq* third = h.add(iota_tokens(4, 20));
  SchedulerOutput o = h.step();
  EXPECT_EQ(o.admitted.size(), 2u);
  EXPECT_EQ(h.waiting.front(), third);
  EXPECT_LE(o.n_tokens, 10);
}

TEST(Scheduler, PriorityOrdersAdmission) {
  Harness h(64, 64, /*max_seqs=*/1);
  h.add(iota_tokens(4), /*priority=*/3);
  SchedSeq* urgent = h.add(iota_tokens(4, 10), /*priority=*/-1);
  SchedulerOutput o = h.step();
  ASSERT_EQ(o.admitted.size(), 1u);
  EXPECT_EQ(o.admitted[0], urgent->seq_id);
}

// Random admissions, prefix hits, chunked prefill, decode, preemption and finishing:
// invariants hold after every step and every block comes back at the end.
TEST(Scheduler, RandomWorkloadKeepsInvariants) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 10; ++trial) {
    Harness h(20, 12, 4);
    for (int stepi = 0; stepi < 300; ++stepi) {
      if (rng() % 3 == 0) {
        std::vector<int32_t> t(1 + rng() % 14);
        for (auto& x : t) x = rng() % 3;  // small vocabulary: prefixes repeat
        h.add(t, static_cast<int32_t>(rng() % 3));
      }
      h.step();
      if (!h.running.empty() && rng() % 4 == 0) h.finish(h.running[rng() % h.running.size()]);
      for (SchedSeq* s : h.running)
        for (int32_t b : s->blocks.ids()) ASSERT_GE(h.pool.ref_cnt(b), 1);
      for (SchedSeq* s : h.waiting) ASSERT_EQ(s->n_tokens_computed, 0);
    }
    for (SchedSeq* s : std::vector<SchedSeq*>(h.running)) h.finish(s);
    for (SchedSeq* s : std::vector<SchedSeq*>(h.waiting.begin(), h.waiting.end())) h.finish(s);
    EXPECT_EQ(h.pool.n_used(), 0);
    EXPECT_EQ(h.pool.check_invariants(), "");
  }
}

}  // namespace
}  // namespace lumen::engine
