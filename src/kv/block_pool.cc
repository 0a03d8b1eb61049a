#include "kv/block_pool.h"

#include <algorithm>

#include "base/check.h"

namespace lumen::kv {
namespace {

// splitmix64 finaliser: a strong 64-bit mix.
uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

uint64_t namespace_hash(std::string_view model_id, std::string_view cache_salt) {
  uint64_t h = mix64(0x6c756d656e6b7631ull);  // "lumenkv1"
  for (unsigned char c : model_id) h = mix64(h ^ c);
  h = mix64(h ^ 0xffu);  // separator: ("ab", "c") != ("a", "bc")
  for (unsigned char c : cache_salt) h = mix64(h ^ c);
  return mix64(h ^ cache_salt.size());
}

uint64_t block_hash(uint64_t parent_hash, std::span<const int32_t> tokens) {
  uint64_t h = mix64(parent_hash);
  for (int32_t t : tokens) h = mix64(h ^ static_cast<uint32_t>(t));
  return h;
}

BlockPool::BlockPool(int32_t n_blocks, int32_t block_size)
    : block_size_(block_size), meta_(n_blocks), index_(n_blocks), tokens_(static_cast<size_t>(n_blocks) * block_size) {
  free_.reserve(n_blocks);
  // Pushed in reverse so that allocation hands out 0, 1, 2, ... first.
  for (int32_t i = n_blocks - 1; i >= 0; --i) free_.push_back(i);
}

std::optional<int32_t> BlockPool::allocate() {
  int32_t id;
  if (!free_.empty()) {
    id = free_.back();
    free_.pop_back();
  } else if (lru_head_ >= 0) {
    id = lru_head_;  // least recently used cached prefix block
    lru_erase(id);
    uncache(id);
  } else {
    return std::nullopt;
  }
  LUMEN_DCHECK(meta_[id].ref_cnt == 0 && !meta_[id].cached);
  meta_[id].ref_cnt = 1;
  return id;
}

void BlockPool::add_ref(int32_t block_id) {
  LUMEN_DCHECK(meta_[block_id].ref_cnt >= 1);
  ++meta_[block_id].ref_cnt;
}

void BlockPool::release(int32_t block_id) {
  LUMEN_CHECK(block_id >= 0 && block_id < n_blocks() && meta_[block_id].ref_cnt >= 1);
  BlockMeta& m = meta_[block_id];
  if (--m.ref_cnt > 0) return;
  if (m.cached) {
    lru_push_back(block_id);
  } else {
    free_.push_back(block_id);
  }
}

std::optional<int32_t> BlockPool::lookup(uint64_t hash, uint64_t parent_hash,
                                         std::span<const int32_t> tokens) const {
  const std::optional<int32_t> id = index_.find(hash);
  if (!id) return std::nullopt;
  const BlockMeta& m = meta_[*id];
  if (m.parent_hash != parent_hash || static_cast<int32_t>(tokens.size()) != block_size_) return std::nullopt;
  if (!std::equal(tokens.begin(), tokens.end(), tokens_.begin() + static_cast<size_t>(*id) * block_size_))
    return std::nullopt;
  return id;
}

void BlockPool::acquire_cached(int32_t block_id) {
  BlockMeta& m = meta_[block_id];
  LUMEN_CHECK(m.cached);
  if (m.in_lru) lru_erase(block_id);
  ++m.ref_cnt;
}

void BlockPool::cache_full_block(int32_t block_id, uint64_t hash, uint64_t parent_hash,
                                 std::span<const int32_t> tokens) {
  BlockMeta& m = meta_[block_id];
  LUMEN_DCHECK(m.ref_cnt >= 1);
  LUMEN_CHECK(static_cast<int32_t>(tokens.size()) == block_size_);
  if (m.cached || index_.contains(hash)) return;
  m.cached = true;
  m.hash = hash;
  m.parent_hash = parent_hash;
  std::copy(tokens.begin(), tokens.end(), tokens_.begin() + static_cast<size_t>(block_id) * block_size_);
  index_.insert(hash, block_id);
}

void BlockPool::drop_from_cache(int32_t block_id) {
  LUMEN_CHECK(block_id >= 0 && block_id < n_blocks() && meta_[block_id].ref_cnt >= 1);
  uncache(block_id);
}

void BlockPool::uncache(int32_t block_id) {
  BlockMeta& m = meta_[block_id];
  if (!m.cached) return;
  index_.erase(m.hash, block_id);
  m.cached = false;
  m.hash = m.parent_hash = 0;
}

void BlockPool::lru_push_back(int32_t block_id) {
  BlockMeta& m = meta_[block_id];
  LUMEN_DCHECK(!m.in_lru);
  m.in_lru = true;
  m.lru_prev = lru_tail_;
  m.lru_next = -1;
  if (lru_tail_ >= 0) {
    meta_[lru_tail_].lru_next = block_id;
  } else {
    lru_head_ = block_id;
  }
  lru_tail_ = block_id;
  ++n_lru_;
}

void BlockPool::lru_erase(int32_t block_id) {
  BlockMeta& m = meta_[block_id];
  LUMEN_DCHECK(m.in_lru);
  (m.lru_prev >= 0 ? meta_[m.lru_prev].lru_next : lru_head_) = m.lru_next;
  (m.lru_next >= 0 ? meta_[m.lru_next].lru_prev : lru_tail_) = m.lru_prev;
  m.lru_prev = m.lru_next = -1;
  m.in_lru = false;
  --n_lru_;
}

std::string BlockPool::check_invariants() const {
  std::vector<char> seen(meta_.size(), 0);
  for (int32_t id : free_) {
    if (id < 0 || id >= n_blocks()) return "free list holds out-of-range block " + std::to_string(id);
    if (seen[id]) return "block " + std::to_string(id) + " is listed twice";
    seen[id] = 1;
    if (meta_[id].ref_cnt != 0 || meta_[id].cached)
      return "free block " + std::to_string(id) + " has ref_cnt " + std::to_string(meta_[id].ref_cnt) +
             (meta_[id].cached ? " and is cached" : "");
  }
  int32_t n_walked = 0;
  for (int32_t id = lru_head_, prev = -1; id >= 0; prev = id, id = meta_[id].lru_next) {
    if (id >= n_blocks()) return "LRU list holds out-of-range block " + std::to_string(id);
    if (meta_[id].lru_prev != prev) return "LRU list is broken at block " + std::to_string(id);
    if (++n_walked > n_lru_) return "LRU list is longer than its count";
    if (seen[id]) return "block " + std::to_string(id) + " is listed twice";
    seen[id] = 2;
    if (meta_[id].ref_cnt != 0 || !meta_[id].cached || !meta_[id].in_lru)
      return "evictable block " + std::to_string(id) + " is referenced or uncached";
  }
  int32_t n_referenced = 0;
  for (int32_t id = 0; id < n_blocks(); ++id) {
    const BlockMeta& m = meta_[id];
    if (m.ref_cnt < 0) return "block " + std::to_string(id) + " has negative ref_cnt";
    if (!seen[id]) {
      if (m.ref_cnt == 0) return "block " + std::to_string(id) + " is neither free, evictable nor referenced";
      if (m.in_lru) return "referenced block " + std::to_string(id) + " is on the LRU list";
      ++n_referenced;
    }
    if (m.cached) {
      const std::optional<int32_t> at = index_.find(m.hash);
      if (at != id)
        return "cached block " + std::to_string(id) + " is not in the index under its hash";
    }
  }
  if (n_walked != n_lru_) return "LRU list is shorter than its count";
  std::string stale;
  index_.for_each([&](uint64_t hash, int32_t id) {
    if (stale.empty() && (!meta_[id].cached || meta_[id].hash != hash))
      stale = "index entry for block " + std::to_string(id) + " is stale";
  });
  if (!stale.empty()) return stale;
  if (n_referenced + n_free() != n_blocks()) return "free + evictable + referenced != total";
  return "";
}

}  // namespace lumen::kv
