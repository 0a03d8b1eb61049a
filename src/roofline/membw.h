// A STREAM-like read-bandwidth test: every thread of the pool sums its own contiguous
// slice of one large buffer, and the bytes read per second of the fastest pass is the
// machine's attainable read bandwidth — the memory roof for decoding, where every weight
// is read once per token. `lumen roofline --hw this` and `lumen bench --membw` use it.
//
// The buffer is anonymous memory, touched (written) by the pool first so that it is
// backed by real pages, not the shared zero page; with `huge_pages` it is madvise'd
// MADV_HUGEPAGE (transparent huge pages), otherwise MADV_NOHUGEPAGE, so the test can
// match how the weights are mapped. Make it several times the last-level cache
// (>= 256 MiB; this machine has a 32 MiB L3), or the cache is what gets measured.
//
// On a machine busy with other work, passes in which a thread was preempted are set aside
// (see n_clean_passes), so the figure is the memory's, not the scheduler's.
//
// Blocking: runs for roughly (n_passes + 1) x bytes / bandwidth (~0.1 s for 512 MiB at
// 30 GB/s) and uses every thread of the pool. Not for unit tests' timing assertions.
#pragma once

#include <cstddef>

#include "base/thread_pool.h"

namespace lumen::roofline {

inline constexpr size_t kDefaultMembwBytes = size_t{512} << 20;  // 512 MiB
inline constexpr size_t kMinRecommendedMembwBytes = size_t{256} << 20;

struct MembwResult {
  double best_bytes_per_s = 0;    // fastest pass
  double median_bytes_per_s = 0;  // median pass
  size_t n_bytes = 0;             // buffer size actually used (rounded to 2 MiB)
  int n_threads = 0;
  int n_passes = 0;
  int n_clean_passes = 0;         // passes no thread was preempted in; best/median come
                                  // from these when there are any (else from all passes)
  bool huge_pages = false;        // MADV_HUGEPAGE was requested and accepted
};

// Precondition: bytes >= 1 MiB (smaller buffers measure a cache, not memory), n_passes >= 1.
MembwResult measure_read_bandwidth_detailed(ThreadPool& pool, size_t bytes, bool huge_pages,
                                            int n_passes = 8);

// The fastest pass, in GB/s of 10^9 bytes (SI, whatever --units says; convert for display).
double measure_read_bandwidth(ThreadPool& pool, size_t bytes, bool huge_pages);

}  // namespace lumen::roofline
