// KvManager operations one by one, on small layouts with full and sliding groups.
#include "kv/kv_manager.h"

#include <algorithm>
#include <numeric>

#include <gtest/gtest.h>

namespace lumen::kv {
namespace {

KvManagerConfig config(std::vector<KvGroupSpec> groups, int32_t bs = 4, int32_t n_ctx = 64, int32_t max_seqs = 2,
                       int32_t max_batch = 8) {
  KvManagerConfig c;
  c.groups = std::move(groups);
  c.n_kv_head = 1;
  c.head_dim = 4;
  c.block_size = bs;
  c.dtypes = {DType::kF32, DType::kF32};
  c.n_ctx = n_ctx;
  c.max_seqs = max_seqs;
  c.max_batch_tokens = max_batch;
  return c;
}

std::vector<int32_t> iota(int n, int start = 0) {
  std::vector<int32_t> v(n);
  std::iota(v.begin(), v.end(), start);
  return v;
}

KvManager make(const KvManagerConfig& c) {
  auto m = KvManager::create(c);
  EXPECT_TRUE(m.ok()) << m.message();
  return std::move(m).value();
}

TEST(KvManagerPlan, SlidingGroupsGetWindowPlusChunkFullGroupsTheRest) {
  // Gemma-3-like: 1 global layer, 5 local layers with window 512; 32k context.
  KvManagerConfig c = config({{1, 0}, {5, 512}}, 16, 32768, 2, 256);
  const size_t row = 2 * 1 * 4 * 4;  // K+V bytes of one token of one layer
  auto plan = plan_kv_memory(c);
  ASSERT_TRUE(plan.ok()) << plan.message();
  // Per sequence: ceil((511 + 256) / 16) + 1 = 49; headroom one window each: ceil(511/16)+1 = 33.
  EXPECT_EQ((*plan)[1].n_blocks_per_seq, 49);
  EXPECT_EQ((*plan)[1].n_blocks, 2 * 49 + 2 * 33);
  EXPECT_EQ((*plan)[1].block_bytes, 5 * row * 16);
  EXPECT_EQ((*plan)[0].n_blocks, 2 * 2048);  // memory 0: max_seqs full contexts
  // Given memory: the full group gets what the sliding group leaves.
  const int64_t sliding = int64_t{164} * 5 * row * 16;
  c.memory_bytes = sliding + int64_t{3000} * row * 16;
  plan = plan_kv_memory(c);
  ASSERT_TRUE(plan.ok()) << plan.message();
  EXPECT_EQ((*plan)[0].n_blocks, 3000);
  EXPECT_EQ((*plan)[1].n_blocks, 164);
  // Too little for one full context beside the sliding blocks: the message says how much.
  c.memory_bytes = sliding + int64_t{2000} * row * 16;
  plan = plan_kv_memory(c);
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.message().find("at least"), std::string::npos) << plan.message();
  // Without the prefix cache, no headroom.
  c.memory_bytes = 0;
  c.enable_prefix_cache = false;
  EXPECT_EQ((*plan_kv_memory(c))[1].n_blocks, 2 * 49);
}

TEST(KvManagerPlan, AllSlidingTakesAllMemoryAndWindowBeyondContextIsAContext) {
  KvManagerConfig c = config({{2, 8}}, 4, 64, 2, 8);
  auto plan = plan_kv_memory(c);
  ASSERT_TRUE(plan.ok());
  const int32_t need = (*plan)[0].n_blocks;  // 2 * (ceil(15/4)+1) + 2 * (ceil(7/4)+1) = 10 + 6
  EXPECT_EQ(need, 16);
  c.memory_bytes = static_cast<int64_t>((*plan)[0].block_bytes) * 40;
  EXPECT_EQ((*plan_kv_memory(c))[0].n_blocks, 40);
  // A window wider than the context costs at most a context per sequence.
  c = config({{1, 0}, {1, 1000}}, 4, 64, 2, 8);
  EXPECT_EQ((*plan_kv_memory(c))[1].n_blocks_per_seq, 16);
}

TEST(KvManager, SlidingGroupReleasesBlocksOutsideTheWindow) {
  // The diagram of kv_manager.h: 40 tokens, block 16, window 16.
  KvManager m = make(config({{4, 0}, {22, 16}}, 16, 128, 1, 64));
  SeqKv s;
  m.init_seq(s, 1);
  std::vector<BlockCopy> copies;
  ASSERT_TRUE(m.allocate_slots(s, 0, 40, 0, &copies));
  EXPECT_TRUE(copies.empty());
  EXPECT_EQ(s.tables[0].n_live(), 3);
  EXPECT_EQ(s.tables[1].n_live(), 3);
  m.release_out_of_window(s, 40);  // the next query (40) sees 25..40: block 0 goes
  EXPECT_EQ(s.tables[0].n_live(), 3);
  ASSERT_EQ(s.tables[1].n_blocks(), 3);
  EXPECT_EQ(s.tables[1].ids()[0], -1);
  EXPECT_EQ(s.tables[1].n_live(), 2);
  EXPECT_EQ(m.pool(1).n_used(), 2);
  EXPECT_EQ(m.check_seq(s, 40), "");
  EXPECT_EQ(m.bytes_held(s), 3 * m.usage(0).block_bytes + 2 * m.usage(1).block_bytes);
  m.release_out_of_window(s, 47);  // 47 sees 32..47: block 1 (16..31) goes too
  EXPECT_EQ(s.tables[1].n_live(), 1);
  m.release_all(s);
  EXPECT_EQ(m.pool(0).n_used() + m.pool(1).n_used(), 0);
  EXPECT_EQ(m.check_invariants(), "");
}

// Issue 12, acceptance 3, in numbers: Gemma-3-1B's layout (26 layers: 4 global, 22 local
// with window 512; 1 kv head x 256 dims, f16) at a 32k context. A sequence prefilled to 32768
// tokens in 512-token chunks holds the global layers' K/V for every token and the local
// layers' for the last window only: 139 MiB, where 26 full layers would hold 832 MiB.
TEST(KvManager, Gemma3At32kHoldsGlobalLayersFullyAndLocalLayersTheirWindow) {
  KvManagerConfig c;
  c.groups = {{4, 0}, {22, 512}};
  c.n_kv_head = 1;
  c.head_dim = 256;
  c.block_size = 16;
  c.dtypes = {DType::kF16, DType::kF16};
  c.n_ctx = 32768;
  c.max_seqs = 1;
  c.max_batch_tokens = 512;
  KvManager m = make(c);
  const size_t row = 2 * 1 * 256 * 2;  // K and V of one token of one layer
  SeqKv s;
  m.init_seq(s, 1);
  std::vector<BlockCopy> copies;
  size_t most_local = 0;
  for (int64_t n = 0; n < 32768; n += 512) {
    ASSERT_TRUE(m.allocate_slots(s, n, 512, 0, &copies)) << n;
    m.release_out_of_window(s, n + 512);
    most_local = std::max<size_t>(most_local, s.tables[1].n_live());
    ASSERT_EQ(m.check_seq(s, n + 512), "");
  }
  EXPECT_EQ(m.bytes_held(s), 4 * row * 32768 + 22 * row * 512);  // 128 MiB + 11 MiB
  EXPECT_EQ(s.tables[1].n_live(), 32);                             // 512 / 16
  // The local group never held more than a window plus a chunk; its pool is that big.
  EXPECT_LE(most_local, size_t{(511 + 512 + 15) / 16 + 1});
  EXPECT_EQ(m.usage(1).n_blocks, (511 + 512 + 15) / 16 + 1 + (511 + 15) / 16 + 1);
  EXPECT_LT(m.total_bytes(), size_t{26} * row * 32768 / 4);
  m.release_all(s);
  EXPECT_EQ(m.check_invariants(), "");
}

TEST(KvManager, WindowSmallerThanABlock) {
  KvManager m = make(config({{1, 3}}, 4, 64, 1, 8));
  SeqKv s;
  m.init_seq(s, 1);
  std::vector<BlockCopy> copies;
  ASSERT_TRUE(m.allocate_slots(s, 0, 9, 0, &copies));  // blocks 0,1,2
  m.release_out_of_window(s, 9);  // 9 sees 7..9: blocks 0 (0-3) goes, block 1 (4-7) stays
  EXPECT_EQ(s.tables[0].first_live(), 1);
  m.release_out_of_window(s, 10);  // 10 sees 8..10
  EXPECT_EQ(s.tables[0].first_live(), 2);
  EXPECT_EQ(m.check_seq(s, 10), "");
  m.release_all(s);
}

TEST(KvManager, AllocateIsAllOrNothingOverGroups) {
  KvManagerConfig c = config({{1, 0}, {1, 4}}, 4, 16, 1, 4);
  c.memory_bytes = 0;
  KvManager m = make(c);
  // Full group: 4 blocks (one context of 16); sliding: 1 * (ceil(7/4)+1) + (ceil(3/4)+1) = 3 + 2.
  ASSERT_EQ(m.usage(0).n_blocks, 4);
  ASSERT_EQ(m.usage(1).n_blocks, 5);
  SeqKv a, b;
  m.init_seq(a, 1);
  m.init_seq(b, 1);
  std::vector<BlockCopy> copies;
  ASSERT_TRUE(m.allocate_slots(a, 0, 12, 0, &copies));  // 3 + 3 blocks
  EXPECT_FALSE(m.can_allocate(b, 0, 8, 0, false));        // full group has 1 left
  EXPECT_FALSE(m.allocate_slots(b, 0, 8, 0, &copies));
  EXPECT_EQ(b.tables[0].n_blocks() + b.tables[1].n_blocks(), 0);
  EXPECT_EQ(m.pool(1).n_used(), 3);  // nothing taken from the sliding group either
  EXPECT_TRUE(m.allocate_slots(b, 0, 4, 0, &copies));
  // Lookahead counts: slots past the new tokens.
  EXPECT_FALSE(m.can_allocate(b, 4, 1, 4, false));
  m.release_all(a);
  m.release_all(b);
  EXPECT_EQ(m.check_invariants(), "");
}

TEST(KvManager, ForkSharesAndCopiesTheTailOnWrite) {
  KvManager m = make(config({{1, 0}, {1, 8}}));
  SeqKv p, c;
  m.init_seq(p, 1);
  std::vector<BlockCopy> copies;
  ASSERT_TRUE(m.allocate_slots(p, 0, 6, 0, &copies));  // blocks 0 (full), 1 (2 of 4 slots)
  m.fork(p, 6, c);
  EXPECT_EQ(m.pool(0).ref_cnt(p.tables[0].ids()[1]), 2);
  ASSERT_TRUE(m.allocate_slots(c, 6, 1, 0, &copies));
  ASSERT_EQ(copies.size(), 2u);  // each group's shared tail, copied
  EXPECT_EQ(copies[0].group, 0);
  EXPECT_EQ(copies[0].src_block, p.tables[0].ids()[1]);
  EXPECT_EQ(copies[0].dst_block, c.tables[0].ids()[1]);
  EXPECT_EQ(copies[1].group, 1);
  EXPECT_NE(c.tables[1].ids()[1], p.tables[1].ids()[1]);
  EXPECT_EQ(c.tables[0].ids()[0], p.tables[0].ids()[0]);  // full blocks stay shared
  m.copy_blocks(copies);
  EXPECT_EQ(m.check_seq(p, 6), "");
  EXPECT_EQ(m.check_seq(c, 7), "");
  m.release_all(p);
  m.release_all(c);
  EXPECT_EQ(m.check_invariants(), "");
}

TEST(KvManager, PrefixHitNeedsFullPrefixAndWhatTheWindowSees) {
  KvManager m = make(config({{1, 0}, {1, 6}}, 4, 64, 2, 16));
  const std::vector<int32_t> toks = iota(21);
  SeqKv a;
  m.init_seq(a, 7);
  std::vector<BlockCopy> copies;
  ASSERT_TRUE(m.allocate_slots(a, 0, 21, 0, &copies));
  m.cache_full_blocks(a, toks, 21);  // blocks 0..4 full
  SeqKv b;
  m.init_seq(b, 7);
  // 21 tokens: at most 5 blocks (the last token is computed). Query at 20 sees 15..20.
  EXPECT_EQ(m.lookup_prefix(b, toks), 5);
  SeqKv other_ns;
  m.init_seq(other_ns, 8);
  EXPECT_EQ(m.lookup_prefix(other_ns, toks), 0);  // another namespace shares nothing
  // The sliding group releases blocks 0..2 of a (positions < 14): a's are the only copies,
  // they stay in the prefix cache as evictable blocks, so the hit survives.
  m.release_out_of_window(a, 20);
  EXPECT_EQ(a.tables[1].first_live(), 3);
  EXPECT_EQ(m.lookup_prefix(b, toks), 5);
  EXPECT_EQ(m.acquire_prefix(b, toks), 20);
  // b's sliding table holds only what a query at 20 sees: blocks 3 (12..15) and 4.
  EXPECT_EQ(b.tables[1].first_live(), 3);
  EXPECT_EQ(b.tables[0].n_live(), 5);
  EXPECT_EQ(m.check_seq(b, 20), "");
  m.release_all(b);
  m.release_all(a);
  EXPECT_EQ(m.check_invariants(), "");
}

TEST(KvManager, PrefixHitShrinksUntilTheSlidingGroupAgrees) {
  // The full group keeps blocks 0..4 of the prefix cached while the sliding group loses
  // block 3 to eviction: a query at 20 (k = 5) would need sliding blocks 3 and 4, one at 16
  // (k = 4) blocks 2 and 3, one at 12 (k = 3) blocks 1 and 2: the hit is 3 blocks.
  KvManager m = make(config({{1, 0}, {1, 6}}, 4, 64, 2, 16));
  ASSERT_EQ(m.usage(0).n_blocks, 32);
  ASSERT_EQ(m.usage(1).n_blocks, 20);  // 2 * (ceil(21/4)+1) + 2 * (ceil(5/4)+1)
  const std::vector<int32_t> toks = iota(21);
  std::vector<BlockCopy> copies;
  SeqKv a;
  m.init_seq(a, 7);
  ASSERT_TRUE(m.allocate_slots(a, 0, 21, 0, &copies));
  m.cache_full_blocks(a, toks, 21);
  m.release_all(a);  // both groups' LRU: 0 1 2 3 4 (oldest first)
  // A shorter prompt's hit touches sliding blocks 1, 2 (and full 0..2): LRU 0 3 4 1 2.
  SeqKv d;
  m.init_seq(d, 7);
  ASSERT_EQ(m.acquire_prefix(d, std::span(toks).first(13)), 12);
  EXPECT_EQ(d.tables[1].first_live(), 1);
  m.release_all(d);
  // Another namespace takes 18 blocks: the full group has free blocks enough, the sliding
  // group (15 free) evicts its three least recently used: 0, 3, 4.
  SeqKv hog;
  m.init_seq(hog, 9);
  ASSERT_TRUE(m.allocate_slots(hog, 0, 18 * 4, 0, &copies));
  EXPECT_EQ(m.pool(0).n_cached(), 5);
  EXPECT_EQ(m.pool(1).n_cached(), 2);
  SeqKv b;
  m.init_seq(b, 7);
  EXPECT_EQ(m.lookup_prefix(b, toks), 3);
  EXPECT_EQ(m.acquire_prefix(b, toks), 12);
  EXPECT_EQ(m.check_seq(b, 12), "");
  m.release_all(b);
  m.release_all(hog);
  EXPECT_EQ(m.check_invariants(), "");
}

TEST(KvManager, TruncateFreesBlocksBeyondAndRewritesAPrivateTail) {
  KvManager m = make(config({{1, 0}}));
  const std::vector<int32_t> toks = iota(12);
  SeqKv a;
  m.init_seq(a, 1);
  std::vector<BlockCopy> copies;
  ASSERT_TRUE(m.allocate_slots(a, 0, 12, 0, &copies));
  m.cache_full_blocks(a, toks, 12);
  EXPECT_EQ(m.pool(0).n_cached(), 3);
  m.truncate(a, 6);  // keeps blocks 0 and 1 (1 partly): 2 leaves, 1 leaves the index
  EXPECT_EQ(a.tables[0].n_blocks(), 2);
  EXPECT_EQ(a.hashes[0].size(), 1u);
  EXPECT_FALSE(m.pool(0).is_cached(a.tables[0].ids()[1]));
  EXPECT_EQ(m.pool(0).n_used(), 2);
  // Writing at 6 needs no copy: the tail is private and uncached.
  ASSERT_TRUE(m.allocate_slots(a, 6, 1, 0, &copies));
  EXPECT_TRUE(copies.empty());
  // Block 1 left the index, so another sequence's hit stops after block 0 (block 2 is
  // still cached, evictable, but its parent is gone from the chain).
  SeqKv b;
  m.init_seq(b, 1);
  EXPECT_EQ(m.acquire_prefix(b, toks), 4);
  m.release_all(a);
  m.release_all(b);
  EXPECT_EQ(m.check_invariants(), "");
}

TEST(KvManager, TruncatedSharedCachedTailIsCopiedOnWrite) {
  KvManager m = make(config({{1, 0}}));
  const std::vector<int32_t> toks = iota(13);
  SeqKv a, b;
  m.init_seq(a, 1);
  m.init_seq(b, 1);
  std::vector<BlockCopy> copies;
  ASSERT_TRUE(m.allocate_slots(a, 0, 13, 0, &copies));
  m.cache_full_blocks(a, toks, 13);
  ASSERT_EQ(m.acquire_prefix(b, toks), 12);  // shares blocks 0..2
  m.truncate(b, 10);                          // b rolls back into shared, cached block 2
  EXPECT_TRUE(m.pool(0).is_cached(b.tables[0].ids()[2]));
  ASSERT_TRUE(m.allocate_slots(b, 10, 1, 0, &copies));
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].src_block, a.tables[0].ids()[2]);
  EXPECT_NE(b.tables[0].ids()[2], a.tables[0].ids()[2]);
  m.release_all(a);
  m.release_all(b);
  EXPECT_EQ(m.check_invariants(), "");
}

}  // namespace
}  // namespace lumen::kv
