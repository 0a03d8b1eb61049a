#include "cli/cache_cmd.h"

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/common.h"
#include "model/interleaved_cache.h"
#include "roofline/units.h"

namespace lumen::cli {
namespace {

std::string bytes_text(uint64_t n) { return roofline::format_bytes(static_cast<double>(n), roofline::Units::kBinary, 1); }

std::string age_text(int64_t t) {
  const int64_t s = std::max<int64_t>(0, static_cast<int64_t>(std::time(nullptr)) - t);
  if (s < 120) return std::to_string(s) + " s ago";
  if (s < 7200) return std::to_string(s / 60) + " min ago";
  if (s < 172800) return std::to_string(s / 3600) + " h ago";
  return std::to_string(s / 86400) + " days ago";
}

// Whether cache file f belongs to MODEL: the same file (when MODEL names one), else MODEL
// is part of the source model's path or of the cache file's name.
bool matches(const model::CacheFileInfo& f, const std::string& model) {
  std::error_code ec;
  const std::filesystem::path canon = std::filesystem::canonical(model, ec);
  if (!ec && std::filesystem::is_regular_file(canon, ec)) return f.model_path == canon.string();
  return f.model_path.find(model) != std::string::npos ||
         std::filesystem::path(f.path).filename().string().find(model) != std::string::npos;
}

int cache_ls(const std::string& dir, const std::optional<uint64_t>& cap) {
  const std::vector<model::CacheFileInfo> files = model::list_interleaved_caches(dir);
  uint64_t total = 0;
  size_t n_stale = 0;
  std::printf("%10s  %-14s  %s\n", "size", "last used", "model -> cache file");
  for (auto it = files.rbegin(); it != files.rend(); ++it) {  // most recently used first
    total += it->n_bytes;
    const char* mark = it->model_gone ? " (model gone)" : it->stale ? " (model changed since)" : "";
    std::printf("%10s  %-14s  %s%s\n            -> %s\n", bytes_text(it->n_bytes).c_str(), age_text(it->last_used_ns / 1000000000).c_str(),
                it->model_path.empty() ? "(unreadable header)" : it->model_path.c_str(), mark, it->path.c_str());
    n_stale += it->stale;
  }
  std::printf("%zu file(s), %s in %s; cap %s\n", files.size(), bytes_text(total).c_str(), dir.c_str(),
              cap ? (bytes_text(*cap) + " (LUMEN_CACHE_MAX)").c_str() : "none (set LUMEN_CACHE_MAX, e.g. 8GiB)");
  if (n_stale > 0) std::printf("%zu of them can never be used again (lumen cache prune removes them)\n", n_stale);
  return 0;
}

// Removes the files no load can use again: their model file is gone or has changed.
int cache_prune(const std::string& dir) {
  uint64_t freed = 0;
  size_t n_removed = 0;
  std::error_code ec;
  for (const model::CacheFileInfo& f : model::list_interleaved_caches(dir)) {
    if (!f.stale) continue;
    if (!std::filesystem::remove(f.path, ec)) {
      std::fprintf(stderr, "error: cannot remove '%s': %s\n", f.path.c_str(), ec.message().c_str());
      return 1;
    }
    std::printf("removed %s (%s, %s)\n", f.path.c_str(), bytes_text(f.n_bytes).c_str(),
                f.model_gone ? "model gone" : "model changed since");
    freed += f.n_bytes;
    ++n_removed;
  }
  std::printf("%zu file(s) removed, %s freed\n", n_removed, bytes_text(freed).c_str());
  return 0;
}

int cache_clear(const std::string& dir, const std::optional<std::string>& model) {
  uint64_t freed = 0;
  size_t n_removed = 0;
  std::error_code ec;
  for (const model::CacheFileInfo& f : model::list_interleaved_caches(dir)) {
    if (model && !matches(f, *model)) continue;
    if (!std::filesystem::remove(f.path, ec)) {
      std::fprintf(stderr, "error: cannot remove '%s': %s\n", f.path.c_str(), ec.message().c_str());
      return 1;
    }
    std::printf("removed %s (%s)\n", f.path.c_str(), bytes_text(f.n_bytes).c_str());
    freed += f.n_bytes;
    ++n_removed;
  }
  if (n_removed == 0 && model) {
    std::fprintf(stderr, "lumen cache clear: no cache file in %s was made from '%s' (see lumen cache ls)\n", dir.c_str(),
                 model->c_str());
    return 1;
  }
  std::printf("%zu file(s) removed, %s freed\n", n_removed, bytes_text(freed).c_str());
  return 0;
}

}  // namespace

std::optional<uint64_t> cache_cap_from_env() {
  const char* v = std::getenv("LUMEN_CACHE_MAX");
  if (!v || !*v) return std::nullopt;
  Result<int64_t> b = parse_bytes(v);
  if (!b.ok()) {
    std::fprintf(stderr, "warning: LUMEN_CACHE_MAX: %s; the cache has no size cap\n", b.message().c_str());
    return std::nullopt;
  }
  return static_cast<uint64_t>(*b);
}

void report_cache_write(const engine::Engine& eng, const std::string& cache_dir) {
  const model::Model::InterleaveReport& r = eng.interleave_report();
  if (!r.cache_built || r.cache_path.empty()) return;
  std::fprintf(stderr, "lumen: wrote %s of weights interleaved for the %s kernels to %s (lumen cache ls | clear)\n",
               bytes_text(r.n_bytes).c_str(), std::string(eng.kernel_name()).c_str(), r.cache_path.c_str());
  const std::optional<uint64_t> cap = cache_cap_from_env();
  if (!cap) return;
  for (const model::CacheFileInfo& f : model::evict_interleaved_caches(cache_dir, *cap, r.cache_path))
    std::fprintf(stderr, "lumen: removed %s (%s, least recently used) to keep the cache under LUMEN_CACHE_MAX = %s\n",
                 f.path.c_str(), bytes_text(f.n_bytes).c_str(), bytes_text(*cap).c_str());
  uint64_t total = 0;
  for (const model::CacheFileInfo& f : model::list_interleaved_caches(cache_dir)) total += f.n_bytes;
  if (total > *cap)
    std::fprintf(stderr, "warning: the cache file in use alone (%s) is over LUMEN_CACHE_MAX = %s\n",
                 bytes_text(total).c_str(), bytes_text(*cap).c_str());
}

int cmd_cache(int argc, char** argv, int first) {
  ArgParser args("cache", "lumen cache ls | clear [MODEL] | prune [--cache-dir DIR]",
                 {{{"--cache-dir"}, "DIR", "the cache directory (default: $LUMEN_CACHE_DIR, else ~/.cache/lumen)"}});
  int rc = 0;
  if (!parse_or_report(args, argc, argv, first, rc)) return rc;
  const std::vector<std::string>& pos = args.positional();
  const std::string dir = args.get_or("--cache-dir", default_cache_dir());
  if (dir.empty()) {
    std::fprintf(stderr, "error: no cache directory: set LUMEN_CACHE_DIR or HOME, or pass --cache-dir DIR\n");
    return 2;
  }
  if (pos.size() == 1 && pos[0] == "ls") return cache_ls(dir, cache_cap_from_env());
  if (!pos.empty() && pos[0] == "clear" && pos.size() <= 2)
    return cache_clear(dir, pos.size() == 2 ? std::optional<std::string>(pos[1]) : std::nullopt);
  if (pos.size() == 1 && pos[0] == "prune") return cache_prune(dir);
  std::fprintf(stderr, "usage: lumen cache ls | clear [MODEL] | prune [--cache-dir DIR]\n");
  return 2;
}

}  // namespace lumen::cli
