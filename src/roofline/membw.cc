#include "roofline/membw.h"

#include <sys/mman.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <thread>
#include <cstdint>
#include <vector>

#include "base/check.h"
#include "base/read_probe.h"
#include "base/timer.h"

namespace lumen::roofline {

namespace {

constexpr size_t kHugePageBytes = size_t{2} << 20;
constexpr size_t kWindowBytes = size_t{16} << 20;  // read per pass, 8x a core's L2
constexpr int kWantClean = 16;       // clean passes to collect beyond the minimum count...
constexpr double kBudgetMs = 3000;   // ...within this much wall time

double thread_cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
}

// The passes read with stream_sum (base/read_probe.h): each line prefetched 8 KiB before
// it is read, as the decode kernels do (matmul_interleaved_avx512.cc): on the Zen 4 host the
// hardware prefetchers alone left 5-15% of the bandwidth unused, and decode with software
// prefetch streamed faster (53.0 GB/s) than this test read without it (49.2). The roof
// must be what memory can deliver, not what one way of reading it gets.

// Anonymous, 2 MiB aligned mapping; unmapped on destruction.
class AnonBuffer {
 public:
  explicit AnonBuffer(size_t n_bytes) : n_bytes_(n_bytes) {
    void* p = mmap(nullptr, n_bytes_ + kHugePageBytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) LUMEN_FATAL("membw: cannot map %zu bytes; use a smaller buffer", n_bytes_);
    raw_ = static_cast<std::byte*>(p);
    const uintptr_t addr = reinterpret_cast<uintptr_t>(raw_);
    data_ = raw_ + ((kHugePageBytes - addr % kHugePageBytes) % kHugePageBytes);
  }
  ~AnonBuffer() { munmap(raw_, n_bytes_ + kHugePageBytes); }
  AnonBuffer(const AnonBuffer&) = delete;
  AnonBuffer& operator=(const AnonBuffer&) = delete;

  std::byte* data() const { return data_; }
  size_t n_bytes() const { return n_bytes_; }

 private:
  std::byte* raw_ = nullptr;
  std::byte* data_ = nullptr;
  size_t n_bytes_ = 0;
};

}  // namespace

// The buffer, mapped and first touched by the pool's threads (each its own slices, as the
// sums read them), kept for every later reading.
struct ReadBandwidthMeter::Buffer {
  AnonBuffer mem;
  bool huge_pages = false;
  Buffer(ThreadPool& pool, size_t n_bytes, bool want_huge) : mem(n_bytes) {
    huge_pages = want_huge && madvise(mem.data(), n_bytes, MADV_HUGEPAGE) == 0;
    if (!want_huge) (void)madvise(mem.data(), n_bytes, MADV_NOHUGEPAGE);
    // Slices of whole 64-byte lines, one per thread, the same in the fill and the sums so
    // each thread reads what it first touched.
    uint64_t* words = reinterpret_cast<uint64_t*>(mem.data());
    pool.parallel_for(static_cast<int64_t>(n_bytes / 64), [&](int64_t begin, int64_t end, int) {
      for (int64_t i = begin * 8; i < end * 8; ++i) words[i] = static_cast<uint64_t>(i) * 0x9E3779B97F4A7C15ull;
    });
  }
};

ReadBandwidthMeter::ReadBandwidthMeter(ThreadPool& pool, size_t bytes, bool huge_pages)
    : pool_(pool), n_bytes_((bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes) {
  LUMEN_CHECK(bytes >= (size_t{1} << 20));
  buf_ = std::make_unique<Buffer>(pool, n_bytes_, huge_pages);
}

ReadBandwidthMeter::~ReadBandwidthMeter() = default;

bool ReadBandwidthMeter::huge_pages() const { return buf_->huge_pages; }

MembwResult ReadBandwidthMeter::measure(int n_passes) {
  LUMEN_CHECK(n_passes >= 1);
  MembwResult r;
  r.n_bytes = n_bytes_;
  r.n_threads = pool_.n_threads();
  r.huge_pages = buf_->huge_pages;
  const uint64_t* words = reinterpret_cast<const uint64_t*>(buf_->mem.data());
  const int64_t n_lines = static_cast<int64_t>(r.n_bytes / 64);
  // Each pass reads one window of kWindowBytes, the next window each time, cycling through
  // the buffer: the buffer is many times the last-level cache, so a window is never
  // cached when it comes round again, and a short pass is likely to run undisturbed on a
  // machine shared with other work.
  //
  // The threads meet at a barrier before they read, so the slices run at the same time
  // even when a worker wakes late, and the pass lasts from the first start to the last
  // end. A pass counts as clean when no thread lost more than 10% of its read to
  // preemption (its CPU time against its wall time) and the starts are close together;
  // a pass in which one slice waited for a core measures the scheduler, not the memory.
  const int64_t n_window_lines = static_cast<int64_t>(std::min(r.n_bytes, kWindowBytes) / 64);
  const int64_t n_windows = n_lines / n_window_lines;
  const size_t n_thr = static_cast<size_t>(pool_.n_threads());
  std::vector<uint64_t> sinks(n_thr, 0);
  std::vector<double> cpu_share(n_thr, 1.0), start_ms(n_thr, 0.0), end_ms(n_thr, 0.0);
  std::vector<double> rates, clean_rates;
  std::atomic<int> n_arrived{0};
  // At least n_passes; then on, while fewer than kWantClean passes ran clean, until the
  // time budget is spent.
  const double t_start = now_ms();
  int pass = 0;
  for (; pass < n_passes + 1 || (static_cast<int>(clean_rates.size()) < kWantClean &&
                                 now_ms() - t_start < kBudgetMs);
       ++pass) {  // pass 0 warms TLBs and the pool
    const uint64_t* window = words + ((next_window_ + pass) % n_windows) * n_window_lines * 8;
    n_arrived.store(0, std::memory_order_relaxed);
    pool_.run([&](int thread_idx, int n_threads) {
      const size_t t = static_cast<size_t>(thread_idx);
      const int64_t begin = n_window_lines * thread_idx / n_threads;
      const int64_t end = n_window_lines * (thread_idx + 1) / n_threads;
      n_arrived.fetch_add(1, std::memory_order_acq_rel);
      for (int spin = 0; n_arrived.load(std::memory_order_acquire) < n_threads; ++spin)
        if (spin > 1000) std::this_thread::yield();  // the others may be waiting for a core
      const double w0 = now_ms(), c0 = thread_cpu_ms();
      sinks[t] += stream_sum(window + begin * 8, static_cast<size_t>(end - begin) * 64);
      const double w1 = now_ms();
      start_ms[t] = w0;
      end_ms[t] = w1;
      cpu_share[t] = (thread_cpu_ms() - c0) / std::max(w1 - w0, 1e-6);
    });
    if (pass == 0) continue;
    const double first_start = *std::min_element(start_ms.begin(), start_ms.end());
    const double last_start = *std::max_element(start_ms.begin(), start_ms.end());
    const double dt_ms = *std::max_element(end_ms.begin(), end_ms.end()) - first_start;
    if (dt_ms <= 0) continue;
    const double rate = static_cast<double>(n_window_lines * 64) / (dt_ms / 1e3);
    rates.push_back(rate);
    const bool together = last_start - first_start <= 0.05 * dt_ms;
    const bool undisturbed = *std::min_element(cpu_share.begin(), cpu_share.end()) >= 0.9;
    if (together && undisturbed) clean_rates.push_back(rate);
  }
  r.n_passes = pass - 1;
  next_window_ = (next_window_ + pass) % n_windows;
  r.n_window_bytes = static_cast<size_t>(n_window_lines * 64);
  r.n_clean_passes = static_cast<int>(clean_rates.size());
  if (!clean_rates.empty()) rates = clean_rates;
  // The sums must be used, or the reads could be dropped.
  uint64_t total = 0;
  for (uint64_t s : sinks) total += s;
  asm volatile("" : : "r"(total) : "memory");

  std::sort(rates.begin(), rates.end());
  if (!rates.empty()) {
    r.best_bytes_per_s = rates.back();
    r.median_bytes_per_s = rates[rates.size() / 2];
  }
  return r;
}

MembwResult measure_read_bandwidth_detailed(ThreadPool& pool, size_t bytes, bool huge_pages, int n_passes) {
  ReadBandwidthMeter meter(pool, bytes, huge_pages);
  return meter.measure(n_passes);
}

double measure_read_bandwidth(ThreadPool& pool, size_t bytes, bool huge_pages) {
  return measure_read_bandwidth_detailed(pool, bytes, huge_pages).best_bytes_per_s / 1e9;
}

}  // namespace lumen::roofline
