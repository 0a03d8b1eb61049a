#include "base/read_probe.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "base/huge_buffer.h"

namespace lumen {
namespace {

TEST(ReadProbe, StreamSumAddsEveryWord) {
  // 3 lines and a bit over a prefetch distance, so the loop's tail and its prefetches past
  // the end are both exercised; the words are distinct so a skipped or repeated line shows.
  const size_t n_words = (8192 + 3 * 64) / 8;
  Result<HugeBuffer> buf = HugeBuffer::allocate(n_words * 8, "test");
  ASSERT_TRUE(buf.ok());
  uint64_t want = 0;
  for (size_t i = 0; i < n_words; ++i) {
    const uint64_t w = (i + 1) * 0x9E3779B97F4A7C15ull;
    std::memcpy(buf.value().data() + 8 * i, &w, 8);
    want += w;
  }
  EXPECT_EQ(stream_sum(buf.value().data(), n_words * 8), want);
  EXPECT_EQ(stream_sum(buf.value().data() + 64, 64), [&] {
    uint64_t s = 0;
    for (size_t i = 8; i < 16; ++i) s += (i + 1) * 0x9E3779B97F4A7C15ull;
    return s;
  }());
  EXPECT_EQ(stream_sum(buf.value().data(), 0), 0u);
}

TEST(ReadProbe, ReadChunksGivesARate) {
  ThreadPool pool(2);
  const size_t chunk = size_t{1} << 20;
  Result<HugeBuffer> buf = HugeBuffer::allocate(4 * chunk, "test");
  ASSERT_TRUE(buf.ok());
  std::vector<const std::byte*> chunks;
  for (int i = 0; i < 4; ++i) chunks.push_back(buf.value().data() + i * chunk);
  const double gbps = read_chunks_gbps(pool, chunks, chunk);
  EXPECT_GT(gbps, 0.01);  // 4 MiB in under 400 ms on any machine that runs the suite
  EXPECT_EQ(read_chunks_gbps(pool, {}, chunk), 0.0);
  EXPECT_EQ(read_chunks_gbps(pool, chunks, 0), 0.0);
}

TEST(ReadProbe, SlowMappingVerdict) {
  EXPECT_TRUE(mapping_reads_slow(15.0, 22.0));   // 0.68x: this host's slow page caches
  EXPECT_TRUE(mapping_reads_slow(19.7, 22.0));   // 0.895x
  EXPECT_FALSE(mapping_reads_slow(19.9, 22.0));  // 0.905x: within the noise
  EXPECT_FALSE(mapping_reads_slow(23.0, 22.0));
  EXPECT_FALSE(mapping_reads_slow(0.0, 22.0));   // not probed
  EXPECT_FALSE(mapping_reads_slow(15.0, 0.0));
}

}  // namespace
}  // namespace lumen
