// A persistent pool of worker threads for compute parallelism (the only way compute code
// goes parallel). The calling thread takes part as thread 0, so ThreadPool(1) runs inline.
// Workers spin briefly after each job (decode steps come back-to-back), then sleep.
//
// Three kinds of job:
//   run / run_on   strict: fn(thread_idx, n) runs exactly once on each of n threads, and the
//                  caller waits for all of them (bandwidth and peak-rate probes need that).
//   for_chunks     dynamic: chunks 0..n_chunks-1 go to whichever thread claims them first,
//                  and the caller returns as soon as every chunk is done. It never waits for
//                  a worker that has not claimed a chunk, so a worker that is asleep or
//                  preempted (a busy machine) cannot stall a step: the caller does its share.
//   for_ranges     ranged: units 0..n_units-1 start as one contiguous range per thread; a
//                  thread takes `grain` units at a time from the front of its own range (or,
//                  given a max_grain, a quarter of what is left of it, between grain and
//                  max_grain units), and when that is empty, `grain` units at a time from the
//                  back of the fullest other range. Each thread streams one run of memory
//                  (what the prefetchers want), and the threads still finish within one
//                  claim (max_grain units) of each other, preempted or not.
//
// And one kind of work that the caller does not wait for:
//   start_background  fn(ctx, thread_idx, stop) on the workers 1 .. n_active-1 while the
//                  caller goes on with its own work (e.g. a worker reads the weights of the
//                  next matmul into its cache while the caller runs attention). The next
//                  dispatch ends it: fn polls `stop` and returns soon after it turns true,
//                  and the dispatch returns only when no worker is left in fn.
//
// Job state lives in one 64-bit word, so claiming a chunk is one compare-and-swap that also
// proves the job is still the one the worker thinks it is:
//
//   bits 63..48  generation (wraps; a stale claim fails unless the whole word matches, and
//                then the claim is valid for the current job anyway)
//   bit  47      strict
//   bit  46      ranged
//   bits 45..24  n: chunks (dynamic) or threads (strict, ranged)
//   bits 23..0   next chunk to claim (dynamic)
//
// A ranged job's ranges are one word per thread, [generation 16 | begin 24 | end 24], each
// on its own cache line: a claim is a compare-and-swap on it, which proves the generation
// the same way.
//
// The job's function and context are read only after a successful claim (or, in strict
// mode, after seeing the new generation): the caller cannot publish another job before every
// claimed chunk is done, so they cannot change underneath.
//
// A background job is a word with both the strict and the ranged bit set, n = its n_active.
//
// Thread-safety: run() / for_chunks() / start_background() must be called from one thread
// at a time.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace lumen {

class ThreadPool {
 public:
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int n_threads() const { return n_threads_; }

  // Calls fn(thread_idx, n_threads) once on every thread (including the caller) and
  // blocks until all have returned. No allocation.
  template <typename Fn>
  void run(Fn&& fn) {
    run_on(n_threads_, std::forward<Fn>(fn));
  }

  // Like run(), but only n_active threads (1 <= n_active <= n_threads()) get work, called
  // as fn(thread_idx, n_active). With n_active == 1 the caller runs it inline: no wake-up,
  // no synchronisation, which is what small work wants.
  template <typename Fn>
  void run_on(int n_active, Fn&& fn) {
    if (n_active <= 1 || n_threads_ == 1) {
      fn(0, 1);
      return;
    }
    if (n_active > n_threads_) n_active = n_threads_;
    using F = std::remove_reference_t<Fn>;
    dispatch(&invoke_strict<F>, static_cast<void*>(&fn), n_active, Mode::kStrict);
  }

  // Calls fn(chunk_idx, thread_idx) for every chunk_idx in [0, n_chunks), each exactly once,
  // on up to n_active threads (thread_idx < n_threads() names per-thread scratch). Returns
  // when all chunks are done. n_active <= 1 or n_chunks == 1 runs inline.
  template <typename Fn>
  void for_chunks(int n_active, int64_t n_chunks, Fn&& fn) {
    if (n_chunks <= 0) return;
    if (n_active <= 1 || n_chunks == 1 || n_threads_ == 1) {
      for (int64_t c = 0; c < n_chunks; ++c) fn(c, 0);
      return;
    }
    using F = std::remove_reference_t<Fn>;
    dispatch(&invoke_chunk<F>, static_cast<void*>(&fn), n_chunks, Mode::kDynamic);
  }

  // Calls fn(begin, end, thread_idx) over disjoint [begin, end) covering [0, n_units), each
  // at most `grain` long, on up to n_active threads (see the header comment). Returns when
  // every unit is done. n_active <= 1 runs inline as one call.
  template <typename Fn>
  void for_ranges(int n_active, int64_t n_units, int64_t grain, Fn&& fn) {
    for_ranges(n_active, n_units, grain, grain, std::forward<Fn>(fn));
  }
  // The same with claims from the front of a thread's own range of a quarter of what is
  // left of it, at least `grain` and at most `max_grain` units (>= grain): fewer claims on
  // a long range (each is an atomic read-modify-write, which waits for all of the thread's
  // loads in flight), `grain` at the end and for steals.
  template <typename Fn>
  void for_ranges(int n_active, int64_t n_units, int64_t grain, int64_t max_grain, Fn&& fn) {
    if (n_units <= 0) return;
    if (n_active <= 1 || n_threads_ == 1 || n_units <= grain) {
      fn(int64_t{0}, n_units, 0);
      return;
    }
    if (n_active > n_threads_) n_active = n_threads_;
    using F = std::remove_reference_t<Fn>;
    dispatch(&invoke_range<F>, static_cast<void*>(&fn), n_active, Mode::kRanged, n_units, grain, max_grain);
  }

  // Tells a background job to stop: true once the pool has published any other job (or is
  // being destroyed). One relaxed load; poll it every microsecond or so.
  class BackgroundStop {
   public:
    BackgroundStop(const std::atomic<uint64_t>* job, uint64_t word) : job_(job), word_(word) {}
    bool operator()() const { return job_->load(std::memory_order_relaxed) != word_; }

   private:
    const std::atomic<uint64_t>* job_;
    uint64_t word_;
  };
  static constexpr size_t kBackgroundCtxBytes = 192;

  // Starts fn(ctx, thread_idx, stop) once on each worker 1 .. n_active-1 (not on the
  // caller) and returns at once. ctx is copied. Ends the previous background job first.
  // What fn reads must stay valid until the next dispatch, start_background() or
  // end_background(), each of which returns only when no worker is left in fn.
  template <typename Ctx>
  void start_background(int n_active, void (*fn)(const Ctx& ctx, int thread_idx, const BackgroundStop& stop),
                        const Ctx& ctx) {
    static_assert(std::is_trivially_copyable_v<Ctx> && sizeof(BackgroundBlob<Ctx>) <= kBackgroundCtxBytes &&
                  alignof(Ctx) <= alignof(std::max_align_t));
    if (n_active > n_threads_) n_active = n_threads_;
    if (n_active <= 1) return;
    end_background();
    const BackgroundBlob<Ctx> blob{fn, ctx};
    std::memcpy(bg_blob_, &blob, sizeof(blob));
    post_background(&invoke_background<Ctx>, n_active);
  }
  // Stops the background job, if any, and waits until no worker is left in it.
  void end_background();

  // The first unit of thread t's range when for_ranges shares n_units out over n_active
  // threads (t == n_active: n_units).
  static int64_t range_begin(int64_t n_units, int n_active, int t) { return n_units * t / n_active; }

  // How many threads work of this size deserves: one per min_work_per_thread units, at
  // least 1, at most n_threads(). Waking a thread costs about as much as a few hundred
  // thousand multiply-adds, so tiny ops stay on the calling thread.
  int threads_for(double work, double min_work_per_thread) const {
    const double n = work / min_work_per_thread;
    return n >= n_threads_ ? n_threads_ : (n < 1 ? 1 : static_cast<int>(n));
  }

  // Splits [0, n) into n_threads contiguous ranges of near-equal size and calls
  // fn(begin, end, thread_idx) for each non-empty range.
  template <typename Fn>
  void parallel_for(int64_t n, Fn&& fn) {
    parallel_for_on(n_threads_, n, std::forward<Fn>(fn));
  }
  // The same over n_active threads (see run_on).
  template <typename Fn>
  void parallel_for_on(int n_active, int64_t n, Fn&& fn) {
    run_on(n_active, [&](int thread_idx, int n_thr) {
      const int64_t begin = n * thread_idx / n_thr;
      const int64_t end = n * (thread_idx + 1) / n_thr;
      if (begin < end) fn(begin, end, thread_idx);
    });
  }

 private:
  enum class Mode { kDynamic, kStrict, kRanged };
  // (ctx, a, b, thread_idx): a is the chunk (dynamic), the thread count (strict) or the
  // range's begin (ranged, b its end).
  using RawFn = void (*)(void* ctx, int64_t a, int64_t b, int thread_idx);
  template <typename Fn>
  static void invoke_strict(void* ctx, int64_t n_active, int64_t, int thread_idx) {
    (*static_cast<Fn*>(ctx))(thread_idx, static_cast<int>(n_active));
  }
  template <typename Fn>
  static void invoke_chunk(void* ctx, int64_t chunk_idx, int64_t, int thread_idx) {
    (*static_cast<Fn*>(ctx))(chunk_idx, thread_idx);
  }
  template <typename Fn>
  static void invoke_range(void* ctx, int64_t begin, int64_t end, int thread_idx) {
    (*static_cast<Fn*>(ctx))(begin, end, thread_idx);
  }
  template <typename Ctx>
  struct BackgroundBlob {
    void (*fn)(const Ctx&, int, const BackgroundStop&);
    Ctx ctx;
  };
  using RawBackgroundFn = void (*)(const std::byte* blob, int thread_idx, const BackgroundStop& stop);
  template <typename Ctx>
  static void invoke_background(const std::byte* blob, int thread_idx, const BackgroundStop& stop) {
    BackgroundBlob<Ctx> b;
    std::memcpy(&b, blob, sizeof(b));
    b.fn(b.ctx, thread_idx, stop);
  }
  void post_background(RawBackgroundFn fn, int n_active);
  // A worker's part of the background job published as `word`.
  void run_background(uint64_t word, int thread_idx);
  // Waits until no worker is in a background job (after a new word was published).
  void wait_background_out();

  // n: chunks (dynamic) or active threads (strict, ranged); ranged: n_units units shared
  // out `grain` to `max_grain` at a time.
  void dispatch(RawFn fn, void* ctx, int64_t n, Mode mode, int64_t n_units = 0, int64_t grain = 1,
                int64_t max_grain = 1);
  // Claims and runs chunks of the dynamic job whose word was last seen as `word`.
  void work_on_chunks(uint64_t word, int thread_idx);
  // Claims and runs pieces of the ranged job of generation `gen`: its own range first.
  void work_on_ranges(uint64_t gen, int thread_idx);

  struct alignas(64) RangeSlot {
    std::atomic<uint64_t> word{0};
  };
  void worker_loop(int thread_idx);

  int n_threads_;
  std::vector<std::thread> workers_;
  std::atomic<uint64_t> job_{0};      // see the header comment
  std::atomic<int64_t> n_done_{0};    // chunks (dynamic), threads (strict) or units (ranged) finished
  std::atomic<int64_t> grain_{1};     // ranged: units per claim at least (and per steal)
  std::atomic<int64_t> max_grain_{1}; // ranged: units per claim from the front at most
  std::unique_ptr<RangeSlot[]> ranges_;  // ranged: one per thread
  std::atomic<RawFn> fn_{nullptr};
  std::atomic<void*> ctx_{nullptr};
  std::atomic<int> n_sleeping_{0};
  // Background job: its function and copied context, written by the caller only while no
  // worker can be reading them (end_background() first); workers inside it.
  RawBackgroundFn bg_fn_ = nullptr;
  alignas(std::max_align_t) std::byte bg_blob_[kBackgroundCtxBytes];
  std::atomic<int> bg_running_{0};
  bool bg_posted_ = false;  // caller's side: a background job may still run
  std::atomic<bool> stop_{false};
  std::mutex mu_;                     // only for sleeping / waking workers
  std::condition_variable cv_;
};

}  // namespace lumen
