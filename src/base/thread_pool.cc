#include "base/thread_pool.h"

#include <immintrin.h>

#include <algorithm>
#include <chrono>

#include "base/check.h"

namespace lumen {
namespace {

// How long a worker spins (pause) after its last job before it sleeps, and the caller before
// it yields while it waits: ~50 us covers the gaps between the dispatches of one forward
// pass. A budget of time, not of pause instructions: a pause takes ~25 ns on Zen 4 but
// ~7 ns on the Cascade Lake host, where 2000 of them (the budget until session 30) let the
// worker fall asleep in the gap before qwen2.5-0.5b's attention output matmul, and each of
// those calls then waited ~10 us for its wake-up (44 us a call; 33 with the time budget).
// Spinning longer costs a busy machine CPU time it takes from our own threads:
// qwen2.5-0.5b q4_0 tg128, 2 threads, load average ~5 on 2 cores, Zen 4: 500 us -> 27-29
// tok/s, 50 us -> 33-38.
constexpr auto kSpinTime = std::chrono::microseconds(50);

// Calls done() between pauses until it returns true (-> true) or kSpinTime has passed (->
// false). The clock is read every 32 pauses.
template <typename Done>
bool spin_until(Done&& done) {
  const auto deadline = std::chrono::steady_clock::now() + kSpinTime;
  for (int i = 1;; ++i) {
    if (done()) return true;
    _mm_pause();
    if (i % 32 == 0 && std::chrono::steady_clock::now() >= deadline) return done();
  }
}

constexpr int kNextBits = 24;
constexpr int kCountBits = 22;
constexpr uint64_t kNextMask = (uint64_t{1} << kNextBits) - 1;
constexpr uint64_t kCountMask = (uint64_t{1} << kCountBits) - 1;
constexpr int kRangedShift = kNextBits + kCountBits;  // 46
constexpr int kStrictShift = kRangedShift + 1;        // 47
constexpr int kGenShift = kStrictShift + 1;           // 48

uint64_t gen_of(uint64_t w) { return w >> kGenShift; }
bool strict_of(uint64_t w) { return (w >> kStrictShift) & 1; }
bool ranged_of(uint64_t w) { return (w >> kRangedShift) & 1; }
int64_t count_of(uint64_t w) { return static_cast<int64_t>((w >> kNextBits) & kCountMask); }
int64_t next_of(uint64_t w) { return static_cast<int64_t>(w & kNextMask); }

// Range words: [generation 16 | begin 24 | end 24].
constexpr int kEndBits = 24;
constexpr uint64_t kUnitMask = (uint64_t{1} << kEndBits) - 1;
uint64_t range_word(uint64_t gen, int64_t begin, int64_t end) {
  return (gen << kGenShift) | (static_cast<uint64_t>(begin) << kEndBits) | static_cast<uint64_t>(end);
}
int64_t begin_of(uint64_t w) { return static_cast<int64_t>((w >> kEndBits) & kUnitMask); }
int64_t end_of(uint64_t w) { return static_cast<int64_t>(w & kUnitMask); }

}  // namespace

ThreadPool::ThreadPool(int n_threads)
    : n_threads_(n_threads < 1 ? 1 : n_threads), ranges_(std::make_unique<RangeSlot[]>(n_threads_)) {
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

void ThreadPool::dispatch(RawFn fn, void* ctx, int64_t n, Mode mode, int64_t n_units, int64_t grain,
                          int64_t max_grain) {
  LUMEN_CHECK(n > 0 && static_cast<uint64_t>(n) <= kCountMask && static_cast<uint64_t>(n) <= kNextMask);
  const bool strict = mode == Mode::kStrict, ranged = mode == Mode::kRanged;
  fn_.store(fn, std::memory_order_relaxed);
  ctx_.store(ctx, std::memory_order_relaxed);
  n_done_.store(0, std::memory_order_relaxed);
  const uint64_t gen = (gen_of(job_.load(std::memory_order_relaxed)) + 1) & 0xFFFF;
  const uint64_t word = (gen << kGenShift) | (uint64_t{strict} << kStrictShift) |
                        (uint64_t{ranged} << kRangedShift) | (static_cast<uint64_t>(n) << kNextBits);
  const int64_t n_wait = ranged ? n_units : n;
  if (ranged) {
    LUMEN_CHECK(n_units > 0 && static_cast<uint64_t>(n_units) <= kUnitMask);
    if (grain < 1) grain = 1;
    grain_.store(grain, std::memory_order_relaxed);
    max_grain_.store(std::max(grain, max_grain), std::memory_order_relaxed);
    // Near-equal contiguous ranges for the n active threads; the others start empty.
    for (int t = 0; t < n_threads_; ++t) {
      const int64_t b = t < n ? range_begin(n_units, static_cast<int>(n), t) : n_units;
      const int64_t e = t < n ? range_begin(n_units, static_cast<int>(n), t + 1) : n_units;
      ranges_[t].word.store(range_word(gen, b, e), std::memory_order_relaxed);
    }
  }
  // seq_cst store, then the n_sleeping_ load: a worker going to sleep increments
  // n_sleeping_ and then re-reads job_, so one of the two sides sees the other.
  job_.store(word, std::memory_order_seq_cst);
  if (n_sleeping_.load(std::memory_order_seq_cst) > 0) {
    std::lock_guard<std::mutex> lock(mu_);
    cv_.notify_all();
  }
  if (strict) {
    fn(ctx, n, 0, 0);
    n_done_.fetch_add(1, std::memory_order_acq_rel);
  } else if (ranged) {
    work_on_ranges(gen, 0);
  } else {
    work_on_chunks(word, 0);
  }
  // Spin briefly (the others usually finish within microseconds), then yield so that an
  // oversubscribed machine can run the thread we are waiting for.
  auto all_done = [&] { return n_done_.load(std::memory_order_acquire) == n_wait; };
  if (!spin_until(all_done))
    while (!all_done()) std::this_thread::yield();
  // The new job word stopped a background job; wait until its workers are out of it.
  if (bg_posted_) wait_background_out();
}

void ThreadPool::wait_background_out() {
  auto out = [&] { return bg_running_.load(std::memory_order_seq_cst) == 0; };
  if (!spin_until(out))
    while (!out()) std::this_thread::yield();
  bg_posted_ = false;
}

void ThreadPool::post_background(RawBackgroundFn fn, int n_active) {
  bg_fn_ = fn;
  const uint64_t gen = (gen_of(job_.load(std::memory_order_relaxed)) + 1) & 0xFFFF;
  const uint64_t word = (gen << kGenShift) | (uint64_t{1} << kStrictShift) | (uint64_t{1} << kRangedShift) |
                        (static_cast<uint64_t>(n_active) << kNextBits);
  bg_posted_ = true;
  job_.store(word, std::memory_order_seq_cst);  // publishes bg_fn_ / bg_blob_ too
  if (n_sleeping_.load(std::memory_order_seq_cst) > 0) {
    std::lock_guard<std::mutex> lock(mu_);
    cv_.notify_all();
  }
}

void ThreadPool::end_background() {
  if (!bg_posted_) return;
  // A job of no work (strict, 0 threads) under a new generation: a worker still in the
  // background function sees its stop turn true, and one that has yet to enter it skips it.
  const uint64_t gen = (gen_of(job_.load(std::memory_order_relaxed)) + 1) & 0xFFFF;
  job_.store((gen << kGenShift) | (uint64_t{1} << kStrictShift), std::memory_order_seq_cst);
  wait_background_out();
}

void ThreadPool::run_background(uint64_t word, int thread_idx) {
  // Counted in before the job is checked to be current, and the caller publishes a new word
  // before it waits for the count to drop (both seq_cst): either this worker sees the new
  // word and skips, or the caller sees it counted and waits for it.
  bg_running_.fetch_add(1, std::memory_order_seq_cst);
  if (job_.load(std::memory_order_seq_cst) == word) bg_fn_(bg_blob_, thread_idx, BackgroundStop(&job_, word));
  bg_running_.fetch_sub(1, std::memory_order_seq_cst);
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
    fn(ctx, next_of(word), 0, thread_idx);
    n_done_.fetch_add(1, std::memory_order_acq_rel);
    ++word;
  }
}

void ThreadPool::work_on_ranges(uint64_t gen, int thread_idx) {
  // Claims [begin, begin + grain) of slot `v` (own) or [end - grain, end) (steal); false when
  // the slot is empty or belongs to another job.
  auto claim = [&](int v, bool front, int64_t* b, int64_t* e) {
    uint64_t w = ranges_[v].word.load(std::memory_order_acquire);
    for (;;) {
      if (gen_of(w) != gen || begin_of(w) >= end_of(w)) return false;
      const int64_t grain = grain_.load(std::memory_order_relaxed);
      *b = begin_of(w);
      *e = end_of(w);
      if (front) {
        const int64_t claim = std::clamp((*e - *b) / 4, grain, max_grain_.load(std::memory_order_relaxed));
        *e = std::min(*e, *b + claim);
      } else {
        *b = std::max(*b, *e - grain);
      }
      const uint64_t next = front ? range_word(gen, *e, end_of(w)) : range_word(gen, begin_of(w), *b);
      if (ranges_[v].word.compare_exchange_weak(w, next, std::memory_order_acq_rel, std::memory_order_acquire))
        return true;
    }
  };
  // The units this thread ran are counted once, when it leaves: n_done_ is shared, and
  // moving its cache line between the cores for every piece showed (qwen2.5-0.5b q4_0
  // decode, alternating runs: 16 KiB pieces 8-19% slower than 256 KiB ones when counted
  // per piece, 3% when counted once).
  int64_t done = 0;
  auto run = [&](int64_t b, int64_t e) {
    fn_.load(std::memory_order_relaxed)(ctx_.load(std::memory_order_relaxed), b, e, thread_idx);
    done += e - b;
  };
  int64_t b = 0, e = 0;
  while (claim(thread_idx, /*front=*/true, &b, &e)) run(b, e);
  for (;;) {
    // The fullest other range: stealing there leaves its owner the most to do alone.
    int victim = -1;
    int64_t most = 0;
    for (int v = 0; v < n_threads_; ++v) {
      const uint64_t w = ranges_[v].word.load(std::memory_order_acquire);
      if (v == thread_idx || gen_of(w) != gen) continue;
      if (end_of(w) - begin_of(w) > most) most = end_of(w) - begin_of(w), victim = v;
    }
    if (victim < 0) break;
    if (claim(victim, /*front=*/false, &b, &e)) run(b, e);
  }
  if (done > 0) n_done_.fetch_add(done, std::memory_order_acq_rel);
}

void ThreadPool::worker_loop(int thread_idx) {
  // Generation 0 is the constructor's: a job published before this thread got going is
  // still seen as new.
  uint64_t seen_gen = 0;
  for (;;) {
    uint64_t word = 0;
    if (!spin_until([&] {
          word = job_.load(std::memory_order_acquire);
          return gen_of(word) != seen_gen;
        })) {
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
    if (strict_of(word) && ranged_of(word)) {
      if (thread_idx < count_of(word)) run_background(word, thread_idx);
    } else if (strict_of(word)) {
      const int64_t n_active = count_of(word);
      if (thread_idx < n_active) {
        // The caller waits for every strict participant, so fn_/ctx_ are this job's.
        fn_.load(std::memory_order_relaxed)(ctx_.load(std::memory_order_relaxed), n_active, 0, thread_idx);
        n_done_.fetch_add(1, std::memory_order_acq_rel);
      }
    } else if (ranged_of(word)) {
      if (thread_idx < count_of(word)) work_on_ranges(gen_of(word), thread_idx);
    } else {
      work_on_chunks(word, thread_idx);
    }
  }
}

}  // namespace lumen
