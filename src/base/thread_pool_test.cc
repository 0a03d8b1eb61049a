#include "base/thread_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
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

// Jobs that come after the workers' spin budget has run out (they sleep) and jobs that come
// within it (they spin), mixed: every job still runs on every thread, and none waits long.
TEST(ThreadPool, JobsAfterSleepAndWithinSpinRunEverywhere) {
  ThreadPool pool(3);
  for (int rep = 0; rep < 20; ++rep) {
    if (rep % 2 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));  // >> the 50 us spin
    std::vector<std::atomic<int>> calls(3);
    const auto t0 = std::chrono::steady_clock::now();
    pool.run([&](int thread_idx, int) { calls[thread_idx].fetch_add(1); });
    const auto waited = std::chrono::steady_clock::now() - t0;
    for (int t = 0; t < 3; ++t) EXPECT_EQ(calls[t].load(), 1) << "rep=" << rep << " t=" << t;
    EXPECT_LT(waited, std::chrono::seconds(2)) << "rep=" << rep;  // a lost wake-up would hang
    std::atomic<int64_t> units{0};
    pool.for_ranges(3, 3000, 10, [&](int64_t b, int64_t e, int) { units.fetch_add(e - b); });
    EXPECT_EQ(units.load(), 3000) << "rep=" << rep;
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

TEST(ThreadPool, ForRangesCoversEveryUnitOnceInPiecesOfAtMostGrain) {
  for (int n : {1, 2, 3}) {
    ThreadPool pool(n);
    for (int64_t n_units : {1, 2, 7, 64, 1000}) {
      for (int64_t grain : {1, 3, 64}) {
        for (int rep = 0; rep < 20; ++rep) {
          std::vector<std::atomic<int>> hits(n_units);
          std::atomic<int> bad{0};
          pool.for_ranges(n, n_units, grain, [&](int64_t b, int64_t e, int thread_idx) {
            if (b < 0 || e > n_units || b >= e || (n > 1 && n_units > grain && e - b > grain)) bad.fetch_add(1);
            if (thread_idx < 0 || thread_idx >= n) bad.fetch_add(1);
            for (int64_t u = std::max<int64_t>(b, 0); u < std::min(e, n_units); ++u) hits[u].fetch_add(1);
          });
          ASSERT_EQ(bad.load(), 0) << "n=" << n << " units=" << n_units << " grain=" << grain;
          for (int64_t u = 0; u < n_units; ++u)
            ASSERT_EQ(hits[u].load(), 1) << "n=" << n << " units=" << n_units << " grain=" << grain << " unit " << u;
        }
      }
    }
  }
}

TEST(ThreadPool, ForRangesWithMaxGrainCoversEveryUnitOnceInPiecesOfAtMostMaxGrain) {
  for (int n : {1, 2, 3}) {
    ThreadPool pool(n);
    for (int64_t n_units : {1, 2, 7, 64, 1000}) {
      for (int64_t grain : {1, 3, 64}) {
        for (int64_t max_grain : {grain, 4 * grain, 9 * grain}) {
          for (int rep = 0; rep < 10; ++rep) {
            std::vector<std::atomic<int>> hits(n_units);
            std::atomic<int> bad{0};
            pool.for_ranges(n, n_units, grain, max_grain, [&](int64_t b, int64_t e, int thread_idx) {
              if (b < 0 || e > n_units || b >= e || (n > 1 && n_units > grain && e - b > max_grain)) bad.fetch_add(1);
              if (thread_idx < 0 || thread_idx >= n) bad.fetch_add(1);
              for (int64_t u = std::max<int64_t>(b, 0); u < std::min(e, n_units); ++u) hits[u].fetch_add(1);
            });
            ASSERT_EQ(bad.load(), 0) << "n=" << n << " units=" << n_units << " grain=" << grain << " max " << max_grain;
            for (int64_t u = 0; u < n_units; ++u)
              ASSERT_EQ(hits[u].load(), 1) << "n=" << n << " units=" << n_units << " grain=" << grain << " unit " << u;
          }
        }
      }
    }
  }
}

// With a max_grain, a thread's claims from its own range are a quarter of what is left,
// clamped to [grain, max_grain]: big at the start of a long range, `grain` at its end.
TEST(ThreadPool, ForRangesClaimsAQuarterOfTheOwnRangeLeftWithinGrainAndMaxGrain) {
  ThreadPool pool(2);
  std::vector<std::pair<int64_t, int64_t>> caller_own;  // the caller's pieces of its range [0, 1000)
  std::atomic<bool> caller_own_done{false};
  std::atomic<int64_t> done{0};
  pool.for_ranges(2, 2000, 5, 40, [&](int64_t b, int64_t e, int thread_idx) {
    if (thread_idx == 0 && b < 1000) {
      caller_own.emplace_back(b, e);
      if (e == 1000) caller_own_done.store(true);
    } else if (thread_idx == 1 && b >= 1000) {
      // The worker holds its first piece until the caller has walked its whole range, so
      // that no steal cuts the caller's range short (bounded, should the caller never get there).
      const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(5);
      while (!caller_own_done.load() && std::chrono::steady_clock::now() < give_up) std::this_thread::yield();
    }
    done.fetch_add(e - b);
  });
  EXPECT_EQ(done.load(), 2000);
  std::vector<std::pair<int64_t, int64_t>> want;
  for (int64_t b = 0; b < 1000;) {
    const int64_t e = std::min<int64_t>(1000, b + std::clamp<int64_t>((1000 - b) / 4, 5, 40));
    want.emplace_back(b, e);
    b = e;
  }
  EXPECT_EQ(caller_own, want);
  EXPECT_EQ(want.front(), std::make_pair(int64_t{0}, int64_t{40}));  // 40 while 160 or more are left
  EXPECT_EQ(want.back(), std::make_pair(int64_t{997}, int64_t{1000}));
}

// Each thread starts on its own contiguous range and walks it forwards: with no stealing
// (a slow body on every thread keeps them level), thread t's pieces come in ascending order.
TEST(ThreadPool, ForRangesWalksOwnRangeForwards) {
  ThreadPool pool(2);
  std::vector<int64_t> last(2, -1);
  std::atomic<int> out_of_order{0}, pieces{0};
  pool.for_ranges(2, 200, 10, [&](int64_t b, int64_t, int thread_idx) {
    pieces.fetch_add(1);
    if (b < 100 && thread_idx == 0) {  // the caller's own range is [0, 100)
      if (b <= last[0]) out_of_order.fetch_add(1);
      last[0] = b;
    }
  });
  EXPECT_EQ(out_of_order.load(), 0);
  EXPECT_GE(pieces.load(), 20);
}

TEST(ThreadPool, ForRangesMixedWithOtherJobs) {
  ThreadPool pool(3);
  for (int rep = 0; rep < 2000; ++rep) {
    const int64_t n_units = 1 + rep % 53;
    std::atomic<int64_t> sum{0};
    pool.for_ranges(3, n_units, 1 + rep % 4, [&](int64_t b, int64_t e, int) {
      for (int64_t u = b; u < e; ++u) sum.fetch_add(u + 1);
    });
    ASSERT_EQ(sum.load(), n_units * (n_units + 1) / 2) << "rep " << rep;
    std::atomic<int64_t> chunks{0};
    pool.for_chunks(3, 5, [&](int64_t c, int) { chunks.fetch_add(c + 1); });
    ASSERT_EQ(chunks.load(), 15);
    std::atomic<int> seen{0};
    pool.run([&](int, int) { seen.fetch_add(1); });
    ASSERT_EQ(seen.load(), 3);
  }
}

// While the worker is stuck in its first piece, the caller finishes its own range and then
// steals the rest of the worker's from the back.
TEST(ThreadPool, ForRangesStealsAroundASlowThread) {
  ThreadPool pool(2);
  std::atomic<bool> stall_next_worker_piece{true};
  std::atomic<int64_t> done{0}, by_caller{0};
  pool.for_ranges(2, 1000, 5, [&](int64_t b, int64_t e, int thread_idx) {
    if (thread_idx == 1 && stall_next_worker_piece.exchange(false))
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (thread_idx == 0) by_caller.fetch_add(e - b);
    done.fetch_add(e - b);
  });
  EXPECT_EQ(done.load(), 1000);
  EXPECT_GE(by_caller.load(), 900);  // all but the worker's first piece or two
}

// ---- background jobs ----

struct BackgroundProbe {
  std::atomic<int>* calls;   // [thread_idx]: how often fn ran there
  std::atomic<int>* inside;  // workers in fn now
  std::atomic<int>* bad_ctx; // a call whose ctx was not the one it was started with
  int id;
  int copies[20];            // all == id
  bool until_stopped;        // run until stop(), else return at once
};

void background_probe(const BackgroundProbe& b, int thread_idx, const ThreadPool::BackgroundStop& stop) {
  b.inside->fetch_add(1);
  b.calls[thread_idx].fetch_add(1);
  for (int c : b.copies)
    if (c != b.id) b.bad_ctx->fetch_add(1);
  while (b.until_stopped && !stop()) std::this_thread::yield();
  b.inside->fetch_sub(1);
}

BackgroundProbe probe(std::atomic<int>* calls, std::atomic<int>* inside, std::atomic<int>* bad, int id, bool until) {
  BackgroundProbe b{calls, inside, bad, id, {}, until};
  std::fill(std::begin(b.copies), std::end(b.copies), id);
  return b;
}

// Runs once on each worker below n_active (never on the caller), and the next job of any
// kind (or end_background) returns only when no worker is left inside it.
TEST(ThreadPool, BackgroundRunsOnActiveWorkersUntilTheNextJob) {
  for (int n : {2, 3, 4}) {
    ThreadPool pool(n);
    for (int n_active : {1, 2, n}) {
      for (int rep = 0; rep < 50; ++rep) {
        std::vector<std::atomic<int>> calls(n);
        std::atomic<int> inside{0}, bad{0};
        pool.start_background(n_active, &background_probe, probe(calls.data(), &inside, &bad, rep, true));
        // Wait until every worker that should is inside (a sleeping one needs waking).
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        while (inside.load() < n_active - 1 && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
        ASSERT_EQ(inside.load(), n_active > 1 ? n_active - 1 : 0) << "n=" << n << " n_active=" << n_active;
        switch (rep % 4) {  // end it four ways
          case 0: pool.run([](int, int) {}); break;
          case 1: pool.for_chunks(n, 7, [](int64_t, int) {}); break;
          case 2: pool.for_ranges(n, 100, 3, [](int64_t, int64_t, int) {}); break;
          default: pool.end_background(); break;
        }
        EXPECT_EQ(inside.load(), 0) << "a worker still in the background job after the next job returned";
        EXPECT_EQ(calls[0].load(), 0) << "the caller ran a background job";
        for (int t = 1; t < n; ++t) EXPECT_EQ(calls[t].load(), t < n_active ? 1 : 0) << "n=" << n << " t=" << t;
        EXPECT_EQ(bad.load(), 0);
        if (rep % 8 == 7) std::this_thread::sleep_for(std::chrono::milliseconds(2));  // let the workers sleep
      }
    }
  }
}

// Background jobs back to back, some ended by the next one before a worker got to it: no
// call ever sees another job's context, none runs twice, and jobs in between still run.
TEST(ThreadPool, BackgroundJobsBackToBackNeverMixContexts) {
  ThreadPool pool(3);
  std::vector<std::atomic<int>> calls(3);
  std::atomic<int> inside{0}, bad{0};
  for (int rep = 0; rep < 2000; ++rep) {
    pool.start_background(3, &background_probe, probe(calls.data(), &inside, &bad, rep, rep % 3 == 0));
    if (rep % 5 == 0) {
      std::atomic<int> seen{0};
      pool.run([&](int, int) { seen.fetch_add(1); });
      ASSERT_EQ(seen.load(), 3);
      ASSERT_EQ(inside.load(), 0);
    }
  }
  pool.end_background();
  EXPECT_EQ(inside.load(), 0);
  EXPECT_EQ(bad.load(), 0);
  EXPECT_EQ(calls[0].load(), 0);
  EXPECT_LE(calls[1].load(), 2000);
}

// Destroying the pool ends a background job that would otherwise never return.
TEST(ThreadPool, DestructorEndsABackgroundJob) {
  std::vector<std::atomic<int>> calls(2);
  std::atomic<int> inside{0}, bad{0};
  {
    ThreadPool pool(2);
    pool.start_background(2, &background_probe, probe(calls.data(), &inside, &bad, 7, true));
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (inside.load() < 1 && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
    ASSERT_EQ(inside.load(), 1);
  }
  EXPECT_EQ(inside.load(), 0);
  EXPECT_EQ(calls[1].load(), 1);
}

}  // namespace
}  // namespace lumen
