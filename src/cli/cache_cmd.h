// lumen cache ls | clear [MODEL] | prune: the interleaved-weight copies lumen keeps on disk
// (model/interleaved_cache.h) in $LUMEN_CACHE_DIR, $XDG_CACHE_HOME/lumen or ~/.cache/lumen,
// and their size cap, LUMEN_CACHE_MAX (e.g. 8GiB): when a load writes a cache file, the
// least recently used others are removed until the directory fits the cap. prune removes
// the copies no load can use again: their model file is gone, or changed since (a load of
// the changed file replaces its own old copy, but a file deleted or never loaded again
// leaves one behind).
#pragma once

#include <cstdint>
#include <optional>

#include "engine/engine.h"

namespace lumen::cli {

int cmd_cache(int argc, char** argv, int first);

// The cap LUMEN_CACHE_MAX sets (nullopt: none). A value that is not a size is reported on
// stderr, naming the variable, and means no cap.
std::optional<uint64_t> cache_cap_from_env();

// After a load: when it wrote a cache file, one line on stderr saying what, where and how
// big, then the cap applied (each file evicted is named).
void report_cache_write(const engine::Engine& eng, const std::string& cache_dir);

}  // namespace lumen::cli
