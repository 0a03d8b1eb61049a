#include "model/interleaved_cache.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <system_error>

namespace lumen::model {
namespace {

constexpr char kMagic[8] = {'L', 'U', 'M', 'E', 'N', 'I', 'L', '1'};
constexpr uint64_t kDataOffset = uint64_t{2} << 20;
constexpr size_t kFixedHeader = 8 + 8 + 8 + 4;

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

// The start of every key made from the model file at `canon`.
std::string key_prefix(const std::filesystem::path& canon) { return "lumen interleaved weights, format 1|" + canon.string() + "|"; }

// The fields of a key that name one version of the model file: size, mtime (ns), device and
// inode.
std::string source_fields(const struct stat& st) {
  return std::to_string(st.st_size) + "|" + std::to_string(int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec) +
         "|" + std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino) + "|";
}

Result<std::string> cache_key(const InterleavePlan& plan, const std::string& model_path) {
  std::error_code ec;
  const std::filesystem::path canon = std::filesystem::canonical(model_path, ec);
  if (ec) return error("interleaved cache: cannot resolve '" + model_path + "': " + ec.message());
  struct stat st {};
  if (::stat(canon.c_str(), &st) != 0) return error("interleaved cache: cannot stat '" + canon.string() + "': " + std::strerror(errno));
  std::string key = key_prefix(canon) + source_fields(st);
  for (const InterleavePlan::Entry& e : plan.entries)
    key += std::string(e.ik->layout) + ":" + std::to_string(e.t->ne[0]) + "x" + std::to_string(e.t->n_rows()) + "@" +
           std::to_string(e.offset) + "+" + std::to_string(e.n_bytes) + ";";
  return key;
}

std::string header_bytes(const std::string& key, uint64_t data_bytes) {
  std::string h(kMagic, sizeof(kMagic));
  auto put = [&](const void* p, size_t n) { h.append(static_cast<const char*>(p), n); };
  put(&kDataOffset, 8);
  put(&data_bytes, 8);
  const uint32_t key_bytes = static_cast<uint32_t>(key.size());
  put(&key_bytes, 4);
  h += key;
  return h;
}

// The mapped file if it is a complete cache for `key`, else a reason why not.
Result<MappedFile> open_valid(const std::string& path, const std::string& key, uint64_t data_bytes) {
  LUMEN_ASSIGN_OR_RETURN(MappedFile f, MappedFile::open(path));
  // Before the first read: the header check faults the file's first pages in, and readahead
  // around them would otherwise fill the page cache with small folios, which no later
  // MADV_HUGEPAGE can turn into 2 MiB mappings (measured on a cold cache: 94.7% of
  // llama-3.2-1b's copy PMD-mapped when advised after the check, all when advised before).
  f.advise_hugepages();
  const std::string want = header_bytes(key, data_bytes);
  if (f.size() != kDataOffset + data_bytes) return error("interleaved cache '" + path + "' has the wrong size");
  if (std::memcmp(f.data(), want.data(), want.size()) != 0)
    return error("interleaved cache '" + path + "' was made from another file or version");
  return f;
}

Status build(const InterleavePlan& plan, const std::string& key, const std::string& path, ThreadPool& pool,
             bool release_source, Progress* progress) {
  const std::string tmp = path + ".tmp-" + std::to_string(::getpid());
  const std::string header = header_bytes(key, plan.n_bytes);
  if (header.size() > kDataOffset) return error("interleaved cache: header too large");
  const size_t size = kDataOffset + plan.n_bytes;
  const int fd = ::open(tmp.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return error("interleaved cache: cannot create '" + tmp + "': " + std::strerror(errno));
  auto fail = [&](const std::string& what) {
    const std::string msg = "interleaved cache: " + what + " '" + tmp + "': " + std::strerror(errno);
    ::close(fd);
    ::unlink(tmp.c_str());
    return error(msg);
  };
  // Reserve the blocks now: a full disk must be an error here, not a SIGBUS while packing.
  if (int rc = ::posix_fallocate(fd, 0, static_cast<off_t>(size)); rc != 0) {
    errno = rc;
    return fail("cannot reserve " + std::to_string(size) + " bytes for");
  }
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return fail("cannot map");
  auto* base = static_cast<std::byte*>(p);
  std::memcpy(base, header.data(), header.size());
  if (progress) progress->start(path, plan.n_bytes, "bytes");
  pack_interleaved(plan, base + kDataOffset, pool, PackRelease{release_source, true}, progress);
  if (progress) progress->finish();
  munmap(p, size);
  if (::fdatasync(fd) != 0) return fail("cannot write");
  // Drop the freshly written (small) pages from the page cache: the first reader, through a
  // MADV_HUGEPAGE mapping, then fills it with 2 MiB folios (see MappedFile::advise_hugepages).
  (void)::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string msg = std::strerror(errno);
    ::unlink(tmp.c_str());
    return error("interleaved cache: cannot rename '" + tmp + "' to '" + path + "': " + msg);
  }
  return {};
}

// Removes the other cache files in `dir` made from the same model file (older versions of
// it): they can never be valid again. A process still using one keeps its mapping.
void remove_stale(const std::string& dir, const std::string& keep, const std::string& prefix) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::filesystem::path& p = entry.path();
    if (p.extension() != ".lumen-il" || p == std::filesystem::path(keep)) continue;
    std::ifstream in(p, std::ios::binary);
    std::string head(kFixedHeader + prefix.size(), '\0');
    if (!in.read(head.data(), static_cast<std::streamsize>(head.size()))) continue;
    if (head.compare(0, sizeof(kMagic), kMagic, sizeof(kMagic)) != 0) continue;
    if (head.compare(kFixedHeader, prefix.size(), prefix) == 0) std::filesystem::remove(p, ec);
  }
}

// The cache file for `key` under cache_dir: <model stem>-<hash of key>.lumen-il.
std::string path_for_key(const std::string& key, const std::string& model_path, const std::string& cache_dir) {
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016" PRIx64, fnv1a(key));
  const std::string stem = std::filesystem::path(model_path).stem().string();
  return (std::filesystem::path(cache_dir) / (stem + "-" + hex + ".lumen-il")).string();
}

// The model path in a key: after the format prefix, before the last four '|' fields
// (size, mtime, device:inode, entries).
std::string model_path_of_key(const std::string& key) {
  const size_t first = key.find('|');
  size_t end = key.size();
  for (int i = 0; i < 4 && end != std::string::npos && end > 0; ++i) end = key.rfind('|', end - 1);
  if (first == std::string::npos || end == std::string::npos || end <= first) return "";
  return key.substr(first + 1, end - first - 1);
}

// The key in a cache file's header, or "" when the file is not a cache file.
std::string read_key(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  char fixed[kFixedHeader];
  if (!in.read(fixed, sizeof fixed) || std::memcmp(fixed, kMagic, sizeof kMagic) != 0) return "";
  uint32_t key_bytes = 0;
  std::memcpy(&key_bytes, fixed + 24, 4);
  if (key_bytes > kDataOffset - kFixedHeader) return "";
  std::string key(key_bytes, '\0');
  if (!in.read(key.data(), key_bytes)) return "";
  return key;
}

}  // namespace

std::vector<CacheFileInfo> list_interleaved_caches(const std::string& dir) {
  std::vector<CacheFileInfo> out;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::filesystem::path& p = entry.path();
    struct stat st {};
    if (p.extension() != ".lumen-il" || ::stat(p.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    const std::string key = read_key(p);
    CacheFileInfo info{p.string(), model_path_of_key(key), static_cast<uint64_t>(st.st_size),
                       int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec};
    struct stat model_st {};
    info.model_gone = info.model_path.empty() || ::stat(info.model_path.c_str(), &model_st) != 0;
    info.stale = info.model_gone || key.rfind(key_prefix(info.model_path) + source_fields(model_st), 0) != 0;
    out.push_back(std::move(info));
  }
  std::sort(out.begin(), out.end(), [](const CacheFileInfo& a, const CacheFileInfo& b) {
    return a.last_used_ns != b.last_used_ns ? a.last_used_ns < b.last_used_ns : a.path < b.path;
  });
  return out;
}

std::vector<CacheFileInfo> evict_interleaved_caches(const std::string& dir, uint64_t max_bytes,
                                                    const std::string& keep) {
  std::vector<CacheFileInfo> files = list_interleaved_caches(dir);
  uint64_t total = 0;
  for (const CacheFileInfo& f : files) total += f.n_bytes;
  std::vector<CacheFileInfo> removed;
  std::error_code ec;
  for (const CacheFileInfo& f : files) {
    if (total <= max_bytes) break;
    if (std::filesystem::path(f.path) == std::filesystem::path(keep)) continue;
    if (std::filesystem::remove(f.path, ec)) {  // a process still using it keeps its mapping
      total -= f.n_bytes;
      removed.push_back(f);
    }
  }
  return removed;
}

Result<InterleavedCache> open_or_build_interleaved_cache(const InterleavePlan& plan, const std::string& model_path,
                                                         const std::string& cache_dir, ThreadPool& pool,
                                                         bool release_source, Progress* progress) {
  LUMEN_ASSIGN_OR_RETURN(const std::string key, cache_key(plan, model_path));
  const std::string path = path_for_key(key, model_path, cache_dir);
  InterleavedCache c;
  if (Result<MappedFile> f = open_valid(path, key, plan.n_bytes); f.ok()) {
    c.file = std::move(f).value();
    // Its mtime records the last use, for the size cap's least-recently-used eviction.
    (void)::utimensat(AT_FDCWD, path.c_str(), nullptr, 0);
  } else {
    std::error_code ec;
    std::filesystem::create_directories(cache_dir, ec);
    if (ec) return error("interleaved cache: cannot create directory '" + cache_dir + "': " + ec.message());
    LUMEN_TRY(build(plan, key, path, pool, release_source, progress));
    LUMEN_ASSIGN_OR_RETURN(c.file, open_valid(path, key, plan.n_bytes));
    c.built = true;
    remove_stale(cache_dir, path, key_prefix(std::filesystem::canonical(model_path, ec)));
  }
  // Decode streams all of it every token: on 4 KiB pages that costs a TLB miss every
  // 4 KiB (10-13% of llama-3.2-1b's decode here when 35% of its copy was on small pages).
  c.huge_fraction = c.file.populate_on_huge_pages();
  c.data = c.file.data() + kDataOffset;
  return c;
}

}  // namespace lumen::model
