// A STREAM-like read-bandwidth test: every thread of the pool sums its own contiguous
// slice of a 16 MiB window of one large buffer, and the bytes read per second of the
// fastest undisturbed pass is the machine's attainable read bandwidth — the memory roof
// for decoding, where every weight is read once per token. `lumen roofline --hw this` and
// `lumen bench --membw` use it.
//
// The buffer is anonymous memory, touched (written) by the pool first so that it is
// backed by real pages, not the shared zero page; with `huge_pages` it is madvise'd
// MADV_HUGEPAGE (transparent huge pages), otherwise MADV_NOHUGEPAGE, so the test can
// match how the weights are mapped. Successive passes read successive windows, cycling
// through the buffer, so make the buffer several times the last-level cache (>= 256 MiB;
// this machine has a 32 MiB L3) or the cache is what gets measured.
//
// Short passes over windows rather than whole-buffer sweeps: on a machine shared with
// other work, passes in which a thread was preempted or started late are set aside (see
// n_clean_passes), and a short pass has a fair chance to run clean. After the n_passes
// asked for, passes continue until 16 have run clean or 3 s have passed.
//
// Blocking: about (n_passes + 1) x 16 MiB / bandwidth plus the first touch of the buffer
// (~0.1 s for 512 MiB and 40 passes at 30 GB/s) on an idle machine, up to ~3 s on a busy
// one, on every thread of the pool. Not for unit tests' timing assertions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "base/thread_pool.h"

namespace lumen::roofline {

inline constexpr size_t kDefaultMembwBytes = size_t{512} << 20;  // 512 MiB
inline constexpr size_t kMinRecommendedMembwBytes = size_t{256} << 20;

struct MembwResult {
  double best_bytes_per_s = 0;    // fastest pass
  double median_bytes_per_s = 0;  // median pass
  size_t n_bytes = 0;             // buffer size actually used (rounded to 2 MiB)
  size_t n_window_bytes = 0;      // bytes read per pass
  int n_threads = 0;
  int n_passes = 0;               // passes run (after one warm-up pass)
  int n_clean_passes = 0;         // passes no thread was preempted in; best/median come
                                  // from these when there are any (else from all passes)
  bool huge_pages = false;        // MADV_HUGEPAGE was requested and accepted
};

// The test with its buffer kept between readings, for taking many (lumen bench --membw reads
// the bandwidth around every tg run and, inside a run, every ~0.25 s of decoding): the
// buffer is mapped and first touched once, here, and each measure() starts at the window
// after the last one the previous reading read. The buffer stays resident (n_bytes() of
// RSS) while the meter lives. Precondition: bytes >= 1 MiB; the pool outlives the meter.
class ReadBandwidthMeter {
 public:
  ReadBandwidthMeter(ThreadPool& pool, size_t bytes, bool huge_pages);
  ~ReadBandwidthMeter();
  ReadBandwidthMeter(const ReadBandwidthMeter&) = delete;
  ReadBandwidthMeter& operator=(const ReadBandwidthMeter&) = delete;

  // One reading, as measure_read_bandwidth_detailed. Precondition: n_passes >= 1.
  MembwResult measure(int n_passes = 40);
  size_t n_bytes() const { return n_bytes_; }
  bool huge_pages() const;  // MADV_HUGEPAGE was requested and accepted

 private:
  struct Buffer;
  ThreadPool& pool_;
  size_t n_bytes_ = 0;
  std::unique_ptr<Buffer> buf_;
  int64_t next_window_ = 0;
};

// Precondition: bytes >= 1 MiB (smaller buffers measure a cache, not memory), n_passes >= 1.
// Returns n_passes >= the n_passes asked for.
MembwResult measure_read_bandwidth_detailed(ThreadPool& pool, size_t bytes, bool huge_pages,
                                            int n_passes = 40);

// The fastest pass, in GB/s of 10^9 bytes (SI, whatever --units says; convert for display).
double measure_read_bandwidth(ThreadPool& pool, size_t bytes, bool huge_pages);

}  // namespace lumen::roofline
