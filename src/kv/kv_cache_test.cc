#include "kv/kv_cache.h"

#include <cstring>
#include <random>

#include <gtest/gtest.h>

namespace lumen::kv {
namespace {

TEST(KvCache, StorageLayoutMatchesView) {
  KvCacheConfig c{.n_slots = 2, .n_kv_head = 3, .head_dim = 8, .block_size = 4, .n_blocks = 5,
                  .dtypes = {DType::kF16, DType::kF16}};
  auto s = KvStorage::allocate(c);
  ASSERT_TRUE(s.ok()) << s.message();
  const KvStorageView& v = s->view();
  EXPECT_EQ(v.k_block_stride_bytes, size_t{3 * 4 * 8 * 2});
  EXPECT_EQ(v.v_block_stride_bytes, size_t{3 * 4 * 8 * 2});
  EXPECT_EQ(c.total_bytes(), v.slot_stride_bytes * 2);
  const int32_t table[] = {3, 1};
  PagedKvView l1 = v.layer_view(1, table);
  // pos 5 -> logical block 1 -> physical 1, slot 1; head 2
  EXPECT_EQ(l1.k_addr(5, 2), v.base + v.slot_stride_bytes + 1 * v.k_block_stride_bytes +
                                 (2 * 4 + 1) * 8 * 2);
  EXPECT_EQ(l1.v_addr(0, 0), v.base + v.slot_stride_bytes + v.v_offset_bytes + 3 * v.v_block_stride_bytes);
}

// K and V of different types: each has its own row size (the type table's), block stride
// and offsets; bytes per token count both.
TEST(KvCache, MixedTypesTakeTheirRowBytes) {
  KvCacheConfig c{.n_slots = 2, .n_kv_head = 3, .head_dim = 64, .block_size = 4, .n_blocks = 5,
                  .dtypes = {DType::kQ8_0, DType::kQ4_0}};
  auto s = KvStorage::allocate(c);
  ASSERT_TRUE(s.ok()) << s.message();
  const KvStorageView& v = s->view();
  EXPECT_EQ(v.k_block_stride_bytes, size_t{3 * 4 * 2 * 34});  // two 34-byte q8_0 blocks a row
  EXPECT_EQ(v.v_block_stride_bytes, size_t{3 * 4 * 2 * 18});  // two 18-byte q4_0 blocks a row
  EXPECT_EQ(c.bytes_per_token(), size_t{2 * 3 * (68 + 36)});
  EXPECT_EQ(c.total_bytes(), v.slot_stride_bytes * 2);
  const int32_t table[] = {3, 1};
  PagedKvView l1 = v.layer_view(1, table);
  EXPECT_EQ(l1.k_addr(5, 2), v.base + v.slot_stride_bytes + 1 * v.k_block_stride_bytes + (2 * 4 + 1) * 68);
  EXPECT_EQ(l1.v_addr(5, 2), v.base + v.slot_stride_bytes + v.v_offset_bytes + 1 * v.v_block_stride_bytes +
                                 (2 * 4 + 1) * 36);
  // Copy-on-write copies whole blocks of both.
  std::memset(l1.k_addr(4, 0), 0x5a, v.k_block_stride_bytes);
  std::memset(l1.v_addr(4, 0), 0xa5, v.v_block_stride_bytes);
  s->copy_block(1, 2);
  const int32_t table2[] = {2, 2};
  PagedKvView l2 = v.layer_view(1, table2);
  EXPECT_EQ(std::memcmp(l1.k_addr(4, 0), l2.k_addr(0, 0), v.k_block_stride_bytes), 0);
  EXPECT_EQ(std::memcmp(l1.v_addr(4, 0), l2.v_addr(0, 0), v.v_block_stride_bytes), 0);
}

TEST(KvCache, RejectsBadConfig) {
  KvCacheConfig c{.n_slots = 0, .n_kv_head = 1, .head_dim = 8, .block_size = 4, .n_blocks = 5, .dtypes = {}};
  EXPECT_FALSE(KvStorage::allocate(c).ok());
  c.n_slots = 1;
  c.dtypes.v = DType::kQ4_0;  // 8 is not a whole number of 32-element blocks
  EXPECT_FALSE(KvStorage::allocate(c).ok());
}

TEST(KvCache, BlockPoolRandomOpsKeepInvariants) {
  BlockPool pool(32, 4);
  std::mt19937 rng(42);
  std::vector<BlockTable> tables(6);
  std::vector<int64_t> lens(6, 0);
  for (int step = 0; step < 2000; ++step) {
    const int t = rng() % tables.size();
    if (rng() % 4 == 0) {
      tables[t].release_all(pool);
      lens[t] = 0;
    } else {
      const int64_t want = lens[t] + rng() % 20;
      const int32_t before = tables[t].n_blocks();
      if (tables[t].reserve(pool, want, 4)) {
        lens[t] = want;
        EXPECT_GE(tables[t].capacity_tokens(4), want);
      } else {
        EXPECT_EQ(tables[t].n_blocks(), before);  // all or nothing
      }
    }
    ASSERT_EQ(pool.check_invariants(), "") << "step " << step;
  }
  for (auto& t : tables) t.release_all(pool);
  EXPECT_EQ(pool.n_free(), 32);
  EXPECT_EQ(pool.check_invariants(), "");
}

TEST(KvCache, SharedBlocksReturnAtZeroRefs) {
  BlockPool pool(4, 4);
  auto b = pool.allocate();
  ASSERT_TRUE(b.has_value());
  pool.add_ref(*b);
  EXPECT_EQ(pool.ref_cnt(*b), 2);
  pool.release(*b);
  EXPECT_EQ(pool.n_free(), 3);
  pool.release(*b);
  EXPECT_EQ(pool.n_free(), 4);
  EXPECT_EQ(pool.check_invariants(), "");
}

}  // namespace
}  // namespace lumen::kv
