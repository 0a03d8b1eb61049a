// Property tests of the block pool's prefix cache: random mixes of admission with prefix
// hits, chunked prefill, preemption (release everything), forking (shared references)
// and finishing, with check_invariants() after every operation.
#include "kv/block_pool.h"

#include <map>
#include <random>

#include <gtest/gtest.h>

#include "kv/kv_cache.h"

namespace lumen::kv {
namespace {

constexpr int32_t kBlockSize = 4;

TEST(KvPrefixCache, HashChainDependsOnNamespaceAndPrefix) {
  const int32_t a[] = {1, 2, 3, 4};
  const int32_t b[] = {1, 2, 3, 5};
  const uint64_t root = namespace_hash("model", "");
  EXPECT_NE(block_hash(root, a), block_hash(root, b));
  EXPECT_NE(block_hash(root, a), block_hash(namespace_hash("model", "tenant-1"), a));
  EXPECT_NE(namespace_hash("ab", "c"), namespace_hash("a", "bc"));
  EXPECT_NE(block_hash(block_hash(root, a), a), block_hash(root, a));
  EXPECT_EQ(block_hash(root, a), block_hash(root, a));
}

TEST(KvPrefixCache, HitAfterReleaseThenEvictedUnderPressure) {
  BlockPool pool(3, kBlockSize);
  const int32_t toks[] = {7, 8, 9, 10};
  const uint64_t root = namespace_hash("m", "");
  const uint64_t h = block_hash(root, toks);
  int32_t b = *pool.allocate();
  pool.cache_full_block(b, h, root, toks);
  EXPECT_EQ(pool.lookup(h, root, toks), b);
  pool.release(b);  // evictable: still findable
  EXPECT_EQ(pool.n_free(), 3);
  EXPECT_EQ(pool.lookup(h, root, toks), b);
  pool.acquire_cached(b);
  EXPECT_EQ(pool.ref_cnt(b), 1);
  EXPECT_EQ(pool.check_invariants(), "");
  pool.release(b);
  // Allocating every block evicts the cached one last (free blocks go first).
  auto x = pool.allocate(), y = pool.allocate();
  EXPECT_TRUE(pool.lookup(h, root, toks).has_value());
  auto z = pool.allocate();
  ASSERT_TRUE(x && y && z);
  EXPECT_FALSE(pool.lookup(h, root, toks).has_value());
  EXPECT_FALSE(pool.allocate().has_value());
  EXPECT_EQ(pool.check_invariants(), "");
}

TEST(KvPrefixCache, LookupVerifiesTokensAndParent) {
  BlockPool pool(2, kBlockSize);
  const int32_t toks[] = {1, 2, 3, 4};
  const int32_t other[] = {1, 2, 3, 9};
  int32_t b = *pool.allocate();
  pool.cache_full_block(b, 42, 7, toks);
  EXPECT_EQ(pool.lookup(42, 7, toks), b);
  EXPECT_FALSE(pool.lookup(42, 7, other).has_value());  // a forged collision is rejected
  EXPECT_FALSE(pool.lookup(42, 8, toks).has_value());
}

// A simulated engine: sequences with token streams over a small vocabulary (so prefixes
// repeat), admitted with prefix lookup, grown in random chunks, caching full blocks,
// preempted, forked and finished at random.
TEST(KvPrefixCache, RandomOperationsKeepInvariants) {
  std::mt19937 rng(1234);
  for (int trial = 0; trial < 20; ++trial) {
    BlockPool pool(24, kBlockSize);
    struct Seq {
      std::vector<int32_t> tokens;
      int64_t n_computed = 0;
      BlockTable table;
      std::vector<uint64_t> hashes;  // chain of full, cached-or-not blocks
      uint64_t root = 0;
    };
    std::map<int, Seq> seqs;
    int next = 0;
    auto cache_full = [&](Seq& s) {
      const int64_t n_full = s.n_computed / kBlockSize;
      while (static_cast<int64_t>(s.hashes.size()) < n_full) {
        const size_t i = s.hashes.size();
        const uint64_t parent = i == 0 ? s.root : s.hashes[i - 1];
        std::span<const int32_t> toks(s.tokens.data() + i * kBlockSize, kBlockSize);
        const uint64_t h = block_hash(parent, toks);
        pool.cache_full_block(s.table.ids()[i], h, parent, toks);
        s.hashes.push_back(h);
      }
    };
    for (int op = 0; op < 600; ++op) {
      const int kind = rng() % 6;
      if (kind == 0 || seqs.empty()) {  // admit with prefix lookup
        Seq s;
        s.root = namespace_hash("m", rng() % 4 == 0 ? "salt" : "");
        const int len = 1 + rng() % 20;
        for (int i = 0; i < len; ++i) s.tokens.push_back(rng() % 3);
        uint64_t parent = s.root;
        int64_t hit_tokens = 0;
        for (size_t i = 0; (i + 1) * kBlockSize < s.tokens.size(); ++i) {  // keep >= 1 token to compute
          std::span<const int32_t> toks(s.tokens.data() + i * kBlockSize, kBlockSize);
          const uint64_t h = block_hash(parent, toks);
          auto hit = pool.lookup(h, parent, toks);
          if (!hit) break;
          pool.acquire_cached(*hit);
          s.table.push_back(*hit);
          s.hashes.push_back(h);
          parent = h;
          hit_tokens += kBlockSize;
        }
        s.n_computed = hit_tokens;
        seqs.emplace(next++, std::move(s));
      } else {
        auto it = seqs.begin();
        std::advance(it, rng() % seqs.size());
        Seq& s = it->second;
        if (kind <= 2) {  // compute a chunk (or decode one token)
          if (s.n_computed == static_cast<int64_t>(s.tokens.size())) s.tokens.push_back(rng() % 3);
          const int64_t want = std::min<int64_t>(s.tokens.size(), s.n_computed + 1 + rng() % 6);
          if (s.table.reserve(pool, want, kBlockSize)) {
            s.n_computed = want;
            cache_full(s);
          } else {  // preempt: release everything, recompute later
            s.table.release_all(pool);
            s.n_computed = 0;
            s.hashes.clear();
          }
        } else if (kind == 3) {  // finish
          s.table.release_all(pool);
          seqs.erase(it);
        } else if (kind == 4 && s.n_computed % kBlockSize == 0) {  // fork sharing all blocks
          Seq child;
          child.tokens = s.tokens;
          child.tokens.resize(s.n_computed);
          child.n_computed = s.n_computed;
          child.root = s.root;
          child.hashes = s.hashes;
          for (int32_t b : s.table.ids()) {
            pool.add_ref(b);
            child.table.push_back(b);
          }
          seqs.emplace(next++, std::move(child));
        } else {  // preempt explicitly
          s.table.release_all(pool);
          s.n_computed = 0;
          s.hashes.clear();
        }
      }
      const std::string inv = pool.check_invariants();
      ASSERT_EQ(inv, "") << "trial " << trial << " op " << op;
      // Every block in a live table is referenced.
      for (auto& [id, s] : seqs)
        for (int32_t b : s.table.ids()) ASSERT_GE(pool.ref_cnt(b), 1);
    }
    for (auto& [id, s] : seqs) s.table.release_all(pool);
    EXPECT_EQ(pool.n_used(), 0);
    EXPECT_EQ(pool.check_invariants(), "");
  }
}

}  // namespace
}  // namespace lumen::kv
