// A persistent pool of worker threads for compute parallelism (the only way compute code
// goes parallel). The calling thread takes part as thread 0, so ThreadPool(1) runs inline.
// Workers spin briefly after each job (decode steps come back-to-back), then sleep.
//
// Thread-safety: run()/parallel_for() must be called from one thread at a time.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <utility>
#include <thread>
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
    run_raw(&invoke<std::remove_reference_t<Fn>>, static_cast<void*>(&fn));
  }

  // Like run(), but only n_active threads (1 <= n_active <= n_threads()) get work, called
  // as fn(thread_idx, n_active). With n_active == 1 the caller runs it inline: no wake-up,
  // no synchronisation, which is what small work wants.
  template <typename Fn>
  void run_on(int n_active, Fn&& fn) {
    if (n_active <= 1) {
      fn(0, 1);
      return;
    }
    if (n_active >= n_threads_) {
      run(std::forward<Fn>(fn));
      return;
    }
    run([&](int thread_idx, int) {
      if (thread_idx < n_active) fn(thread_idx, n_active);
    });
  }

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
  using RawFn = void (*)(void* ctx, int thread_idx, int n_threads);
  template <typename Fn>
  static void invoke(void* ctx, int thread_idx, int n_threads) {
    (*static_cast<Fn*>(ctx))(thread_idx, n_threads);
  }
  void run_raw(RawFn fn, void* ctx);
  void worker_loop(int thread_idx);

  int n_threads_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> n_pending_{0};
  std::atomic<bool> stop_{false};
  RawFn fn_ = nullptr;
  void* ctx_ = nullptr;
};

}  // namespace lumen
