#include "base/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace lumen {
namespace {

TEST(ThreadPool, RunCallsEveryThreadOnce) {
  for (int n : {1, 2, 3, 5}) {
    ThreadPool pool(n);
    for (int rep = 0; rep < 200; ++rep) {
      std::vector<std::atomic<int>> calls(n);
      pool.run([&](int thread_idx, int n_threads) {
        EXPECT_EQ(n_threads, n);
        calls[thread_idx].fetch_add(1);
      });
      for (int t = 0; t < n; ++t) EXPECT_EQ(calls[t].load(), 1) << "n=" << n << " t=" << t;
    }
  }
}

TEST(ThreadPool, RunOnUsesOnlyActiveThreads) {
  ThreadPool pool(4);
  for (int n_active = 1; n_active <= 4; ++n_active) {
    std::vector<std::atomic<int>> calls(4);
    pool.run_on(n_active, [&](int thread_idx, int n) {
      EXPECT_EQ(n, n_active);
      calls[thread_idx].fetch_add(1);
    });
    for (int t = 0; t < 4; ++t) EXPECT_EQ(calls[t].load(), t < n_active ? 1 : 0);
  }
}

TEST(ThreadPool, ForChunksRunsEachChunkOnce) {
  for (int n : {1, 2, 3}) {
    ThreadPool pool(n);
    for (int64_t n_chunks : {1, 2, 7, 64, 1000}) {
      for (int rep = 0; rep < 50; ++rep) {
        std::vector<std::atomic<int>> hits(n_chunks);
        std::atomic<int> bad_thread{0};
        pool.for_chunks(n, n_chunks, [&](int64_t c, int thread_idx) {
          hits[c].fetch_add(1);
          if (thread_idx < 0 || thread_idx >= n) bad_thread.fetch_add(1);
        });
        for (int64_t c = 0; c < n_chunks; ++c) ASSERT_EQ(hits[c].load(), 1) << "n=" << n << " chunk " << c;
        EXPECT_EQ(bad_thread.load(), 0);
      }
    }
  }
}

// Jobs of both kinds back to back, as a forward pass issues them: no chunk is lost or run
// twice across job boundaries, and strict jobs still reach every thread.
TEST(ThreadPool, MixedJobsBackToBack) {
  ThreadPool pool(3);
  int64_t total = 0;
  for (int rep = 0; rep < 2000; ++rep) {
    std::atomic<int64_t> sum{0};
    const int64_t n_chunks = 1 + rep % 37;
    pool.for_chunks(3, n_chunks, [&](int64_t c, int) { sum.fetch_add(c + 1); });
    ASSERT_EQ(sum.load(), n_chunks * (n_chunks + 1) / 2);
    std::atomic<int> seen{0};
    pool.run([&](int, int) { seen.fetch_add(1); });
    ASSERT_EQ(seen.load(), 3);
    total += sum.load();
  }
  EXPECT_GT(total, 0);
}

// Dynamic balancing: while a worker is stuck in one chunk (preempted, say), the caller
// takes all the others; the call returns once every chunk, the stuck one included, is done.
TEST(ThreadPool, ForChunksBalancesAroundASlowThread) {
  ThreadPool pool(2);
  std::atomic<bool> stall_next_worker_chunk{true};
  std::atomic<int> done{0}, by_caller{0};
  pool.for_chunks(2, 100, [&](int64_t, int thread_idx) {
    if (thread_idx == 1 && stall_next_worker_chunk.exchange(false))
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (thread_idx == 0) by_caller.fetch_add(1);
    done.fetch_add(1);
  });
  EXPECT_EQ(done.load(), 100);
  EXPECT_GE(by_caller.load(), 90);  // the worker was asleep in its first chunk
}

}  // namespace
}  // namespace lumen
