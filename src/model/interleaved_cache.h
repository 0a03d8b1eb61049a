// The interleaved-weights cache: a model's interleaved matrices (weights.h, InterleavePlan)
// written once to a file beside nothing else, then mmapped on every later load. Loading stays
// an mmap (no repacking, no fresh anonymous memory to fault in: on this VM class, touching
// fresh memory costs ~2 ms per MiB the first time), the copy lives in the page cache shared
// by every process that serves the model, and the GGUF itself is left untouched, so
// llama.cpp and lumen keep reading the same file.
//
// File layout:
//
//   [0, data_offset)              header: "LUMENIL1" | u64 data_offset | u64 data_bytes |
//                                 u32 key_bytes | key (text)
//   [data_offset, + data_bytes)   the plan's buffer (data_offset = 2 MiB, so the data can
//                                 sit on 2 MiB page-cache folios)
//
// The key names the source exactly: format version, the GGUF's canonical path, size, mtime
// (ns), device and inode, and every entry's layout, shape, offset and size. A file whose
// header, key or size differs is not used; it is rebuilt. The file is written under a
// temporary name, space reserved with fallocate (a full disk is an error, not a SIGBUS),
// synced, then renamed into place, so a reader never sees a partial file. Building a cache
// removes the cache files of older versions of the same model file.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/mapped_file.h"
#include "base/status.h"
#include "base/thread_pool.h"
#include "model/weights.h"

namespace lumen::model {

struct InterleavedCache {
  MappedFile file;
  const std::byte* data = nullptr;  // the plan's buffer inside `file`
  bool built = false;               // written by this call (else found valid)
  double huge_fraction = 0;         // of the file mapped on 2 MiB pages after loading it
};

// Maps the valid cache file for (model, plan) under cache_dir, building it first (packing
// on the pool from the model's views) when it is missing or stale. Errors name the file.
// release_source: the views are a read-only file mapping whose pages packing may unmap.
// progress (may be null): told of a build, with the file's path as `what`, in bytes.
Result<InterleavedCache> open_or_build_interleaved_cache(const InterleavePlan& plan, const std::string& model_path,
                                                         const std::string& cache_dir, ThreadPool& pool,
                                                         bool release_source, Progress* progress = nullptr);

// A cache file found under a cache directory (`lumen cache ls`).
struct CacheFileInfo {
  std::string path;        // the cache file
  std::string model_path;  // the model file it was made from (canonical), "" if unreadable
  uint64_t n_bytes = 0;    // its size on disk
  int64_t last_used_ns = 0; // its mtime (ns since the epoch): set when built or opened
  bool model_gone = false;  // the model file is gone, or the header names none
  bool stale = false;       // model_gone, or the model file changed after the copy was made
                            // (size, mtime, device or inode): it can never be used again
};

// The *.lumen-il files directly under dir, least recently used first (none if dir is missing).
std::vector<CacheFileInfo> list_interleaved_caches(const std::string& dir);

// Removes the least recently used cache files under dir until they total at most
// max_bytes, never removing `keep` (the file in use). Returns the files removed.
std::vector<CacheFileInfo> evict_interleaved_caches(const std::string& dir, uint64_t max_bytes,
                                                    const std::string& keep);

}  // namespace lumen::model
