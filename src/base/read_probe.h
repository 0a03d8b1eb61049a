// Read probes: how fast this process streams a given piece of memory.
//
// stream_sum is the plain forward read the bandwidth meter (roofline/membw.cc) times; the
// model times it over a sample of its interleaved weights' cache file against the same
// bytes copied into anonymous memory (Model::interleave_weights), because where a page
// sits decides its read speed: on this project's Cascade Lake VM about half of the page
// caches of the cache files read at 0.70-0.89x of an anonymous copy of the same bytes,
// both on 2 MiB pages, and a copy of such a file read at full speed (docs/perf.md,
// session 28). On a NUMA machine a page cache on the far node would read so too.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "base/thread_pool.h"

namespace lumen {

// Sum of the 64-bit words of [p, p + n_bytes), read front to back with each line
// prefetched 8 KiB ahead (SSE2 loads, which every x86-64 has). p is 64-byte aligned and
// n_bytes a multiple of 64. The sum only keeps the compiler from dropping the reads.
uint64_t stream_sum(const void* p, size_t n_bytes);

// GB/s at which the pool's threads read `chunks` (each chunk_bytes, 64-byte aligned), chunk
// i by thread i % n_threads, all threads at once; from the dispatch to the last thread's end.
double read_chunks_gbps(ThreadPool& pool, std::span<const std::byte* const> chunks, size_t chunk_bytes);

// The probe's verdict: a mapping read at mapped_gbps is worth copying into memory read at
// memory_gbps when it is below kSlowMappingRatio of it (the noise between two alternating
// reads of the same memory here is a few percent; the slow mappings read 0.70-0.89x).
inline constexpr double kSlowMappingRatio = 0.9;
inline bool mapping_reads_slow(double mapped_gbps, double memory_gbps) {
  return mapped_gbps > 0 && memory_gbps > 0 && mapped_gbps < kSlowMappingRatio * memory_gbps;
}

}  // namespace lumen
