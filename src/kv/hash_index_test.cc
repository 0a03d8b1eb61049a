#include "kv/hash_index.h"

#include <random>
#include <unordered_map>

#include <gtest/gtest.h>

namespace lumen::kv {
namespace {

// Random inserts and erases against std::unordered_map, with keys that collide on their
// low bits (long probe runs, wrap-around at the table's end) as well as random ones.
TEST(HashIndex, MatchesAReferenceMapUnderRandomOps) {
  for (bool clustered : {false, true}) {
    std::mt19937_64 rng(clustered ? 3 : 5);
    const int32_t n = 64;
    HashIndex idx(n);
    std::unordered_map<uint64_t, int32_t> ref;
    auto key = [&] { return clustered ? (rng() % 24) * 128 + 120 + rng() % 16 : rng() % 200; };
    for (int op = 0; op < 20000; ++op) {
      const uint64_t k = key();
      const bool present = ref.count(k) > 0;
      if (!present && static_cast<int32_t>(ref.size()) < n && rng() % 2) {
        const auto v = static_cast<int32_t>(rng() % 1000);
        idx.insert(k, v);
        ref[k] = v;
      } else if (present && rng() % 2) {
        EXPECT_FALSE(idx.erase(k, ref[k] + 1));  // another value: not erased
        EXPECT_TRUE(idx.erase(k, ref[k]));
        ref.erase(k);
      }
      ASSERT_EQ(idx.size(), static_cast<int32_t>(ref.size()));
      for (const auto& [rk, rv] : ref) ASSERT_EQ(idx.find(rk), rv) << "op " << op;
      const uint64_t probe = key();
      ASSERT_EQ(idx.find(probe).has_value(), ref.count(probe) > 0);
    }
  }
}

}  // namespace
}  // namespace lumen::kv
