#include "base/thread_pool.h"

#include <immintrin.h>

#include "base/check.h"

namespace lumen {
namespace {

// Spin iterations (pause: ~25 ns on Zen 4) before a worker sleeps or the caller yields:
// ~50 us, which covers the gaps between the dispatches of one forward pass. Spinning
// longer costs a busy machine CPU time it takes from our own threads: qwen2.5-0.5b q4_0
// tg128, 2 threads, load average ~5 on 2 cores: 20000 -> 27-29 tok/s, 2000 -> 33-38.
constexpr int kSpinIterations = 2000;

constexpr int kNextBits = 24;
constexpr int kCountBits = 23;
constexpr uint64_t kNextMask = (uint64_t{1} << kNextBits) - 1;
constexpr uint64_t kCountMask = (uint64_t{1} << kCountBits) - 1;
constexpr int kStrictShift = kNextBits + kCountBits;  // 47
constexpr int kGenShift = kStrictShift + 1;           // 48

uint64_t gen_of(uint64_t w) { return w >> kGenShift; }
bool strict_of(uint64_t w) { return (w >> kStrictShift) & 1; }
int64_t count_of(uint64_t w) { return static_cast<int64_t>((w >> kNextBits) & kCountMask); }
int64_t next_of(uint64_t w) { return static_cast<int64_t>(w & kNextMask); }

}  // namespace

ThreadPool::ThreadPool(int n_threads) : n_threads_(n_threads < 1 ? 1 : n_threads) {
  workers_.reserve(n_threads_ - 1);
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true);
    job_.fetch_add(uint64_t{1} << kGenShift);
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::dispatch(RawFn fn, void* ctx, int64_t n, bool strict) {
  LUMEN_CHECK(n > 0 && static_cast<uint64_t>(n) <= kCountMask && static_cast<uint64_t>(n) <= kNextMask);
  fn_.store(fn, std::memory_order_relaxed);
  ctx_.store(ctx, std::memory_order_relaxed);
  n_done_.store(0, std::memory_order_relaxed);
  const uint64_t gen = gen_of(job_.load(std::memory_order_relaxed)) + 1;
  const uint64_t word = (gen << kGenShift) | (uint64_t{strict} << kStrictShift) |
                        (static_cast<uint64_t>(n) << kNextBits);
  // seq_cst store, then the n_sleeping_ load: a worker going to sleep increments
  // n_sleeping_ and then re-reads job_, so one of the two sides sees the other.
  job_.store(word, std::memory_order_seq_cst);
  if (n_sleeping_.load(std::memory_order_seq_cst) > 0) {
    std::lock_guard<std::mutex> lock(mu_);
    cv_.notify_all();
  }
  if (strict) {
    fn(ctx, n, 0);
    n_done_.fetch_add(1, std::memory_order_acq_rel);
  } else {
    work_on_chunks(word, 0);
  }
  // Spin briefly (the others usually finish within microseconds), then yield so that an
  // oversubscribed machine can run the thread we are waiting for.
  for (int spin = 0; n_done_.load(std::memory_order_acquire) != n; ++spin) {
    if (spin < kSpinIterations) {
      _mm_pause();
    } else {
      std::this_thread::yield();
    }
  }
}

void ThreadPool::work_on_chunks(uint64_t word, int thread_idx) {
  const uint64_t gen = gen_of(word);
  for (;;) {
    if (next_of(word) >= count_of(word)) return;
    if (!job_.compare_exchange_weak(word, word + 1, std::memory_order_acq_rel,
                                    std::memory_order_acquire)) {
      // `word` now holds the current value: the same job with another chunk taken, or a
      // new job, which is not ours to touch from here (the worker loop will see it).
      if (gen_of(word) != gen) return;
      continue;
    }
    const RawFn fn = fn_.load(std::memory_order_relaxed);
    void* ctx = ctx_.load(std::memory_order_relaxed);
    fn(ctx, next_of(word), thread_idx);
    n_done_.fetch_add(1, std::memory_order_acq_rel);
    ++word;
  }
}

void ThreadPool::worker_loop(int thread_idx) {
  // Generation 0 is the constructor's: a job published before this thread got going is
  // still seen as new.
  uint64_t seen_gen = 0;
  for (;;) {
    uint64_t word = job_.load(std::memory_order_acquire);
    for (int spin = 0; gen_of(word) == seen_gen && spin < kSpinIterations; ++spin) {
      _mm_pause();
      word = job_.load(std::memory_order_acquire);
    }
    if (gen_of(word) == seen_gen) {
      std::unique_lock<std::mutex> lock(mu_);
      n_sleeping_.fetch_add(1, std::memory_order_seq_cst);
      cv_.wait(lock, [&] {
        word = job_.load(std::memory_order_seq_cst);
        return gen_of(word) != seen_gen;
      });
      n_sleeping_.fetch_sub(1, std::memory_order_relaxed);
    }
    seen_gen = gen_of(word);
    if (stop_.load()) return;
    if (strict_of(word)) {
      const int64_t n_active = count_of(word);
      if (thread_idx < n_active) {
        // The caller waits for every strict participant, so fn_/ctx_ are this job's.
        fn_.load(std::memory_order_relaxed)(ctx_.load(std::memory_order_relaxed), n_active, thread_idx);
        n_done_.fetch_add(1, std::memory_order_acq_rel);
      }
    } else {
      work_on_chunks(word, thread_idx);
    }
  }
}

}  // namespace lumen
