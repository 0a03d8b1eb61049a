// BlockPool: hands out the KV cache's blocks with reference counts and keeps a prefix
// cache of full blocks, keyed by a hash chain.
//
// Every block is in exactly one state:
//
//   free        ref_cnt == 0, not cached        on free_ (LIFO)
//   evictable   ref_cnt == 0, cached            on the LRU list (oldest first) and in index_
//   referenced  ref_cnt >= 1, cached or not     in some sequence's block table
//
//   allocate():  free_ first; when empty, evict the least recently used evictable
//                block (drop its hash) — so cached prefixes live as long as memory allows.
//   release():   ref_cnt -> 0 moves a block to the LRU list if cached, else to free_.
//   acquire_cached(): a prefix hit takes a reference; an evictable block leaves the LRU list.
//
// Prefix cache key of block i of a sequence (its tokens t[i*B .. (i+1)*B)):
//
//   h_0    = namespace hash (model id + optional per-tenant cache_salt)
//   h_i+1  = hash(h_i, tokens of block i)
//
// so a block is shared only when the whole prefix up to it — and the namespace — match.
// The stored tokens and parent hash are compared on lookup too: a 64-bit hash collision
// can never hand out the wrong KV. Only full blocks are ever registered, and a full block
// is never written again, so sharing needs no locking or copying.
//
// Memory is fixed at creation: the free list, the LRU (a doubly linked list threaded
// through the block metadata) and the hash index never allocate, so releasing and caching
// blocks on the per-token path costs no heap traffic.
//
// Single-threaded by contract (the engine thread).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kv/hash_index.h"

namespace lumen::kv {

// Hash of a namespace string (model id, cache salt): the root of a sequence's chain.
uint64_t namespace_hash(std::string_view model_id, std::string_view cache_salt);
// Next link of the chain.
uint64_t block_hash(uint64_t parent_hash, std::span<const int32_t> tokens);

class BlockPool {
 public:
  BlockPool(int32_t n_blocks, int32_t block_size);

  int32_t n_blocks() const { return static_cast<int32_t>(meta_.size()); }
  int32_t block_size() const { return block_size_; }
  // Blocks allocate() can hand out (free + evictable).
  int32_t n_free() const { return static_cast<int32_t>(free_.size()) + n_lru_; }
  // Blocks held by sequences.
  int32_t n_used() const { return n_blocks() - n_free(); }
  int32_t n_cached() const { return index_.size(); }

  // A block with ref_cnt 1 (free first, else the LRU evictable one, whose hash is
  // dropped), or nullopt when every block is referenced ("does not fit" is a value).
  std::optional<int32_t> allocate();
  // Precondition: ref_cnt(block_id) >= 1.
  void add_ref(int32_t block_id);
  // Drops one reference. Precondition: ref_cnt(block_id) >= 1.
  void release(int32_t block_id);
  int32_t ref_cnt(int32_t block_id) const { return meta_[block_id].ref_cnt; }

  // The cached block holding exactly `tokens` after `parent_hash`, or nullopt. Takes no
  // reference: call acquire_cached() to use it.
  std::optional<int32_t> lookup(uint64_t hash, uint64_t parent_hash, std::span<const int32_t> tokens) const;
  // Takes a reference on a cached block found by lookup().
  void acquire_cached(int32_t block_id);
  // Registers a full block under `hash` (its tokens and parent are kept for verification).
  // No-op if the block is already cached or another block already holds this hash.
  // Precondition: ref_cnt(block_id) >= 1 and tokens.size() == block_size().
  void cache_full_block(int32_t block_id, uint64_t hash, uint64_t parent_hash,
                        std::span<const int32_t> tokens);
  bool is_cached(int32_t block_id) const { return meta_[block_id].cached; }
  // Removes a referenced block from the prefix cache (its holder is about to write into
  // it again, after a truncate). Precondition: ref_cnt(block_id) >= 1.
  void drop_from_cache(int32_t block_id);

  // free + evictable + referenced == total; free blocks are uncached with ref_cnt 0;
  // evictable blocks are cached with ref_cnt 0; every cached block is in the index under
  // its hash and the index holds nothing else. Returns the first violation, or "".
  std::string check_invariants() const;

 private:
  struct BlockMeta {
    int32_t ref_cnt = 0;
    bool cached = false;
    bool in_lru = false;
    uint64_t hash = 0;
    uint64_t parent_hash = 0;
    int32_t lru_prev = -1, lru_next = -1;  // neighbours on the LRU list (-1: none)
  };
  void uncache(int32_t block_id);
  void lru_push_back(int32_t block_id);
  void lru_erase(int32_t block_id);

  int32_t block_size_;
  std::vector<BlockMeta> meta_;                 // [n_blocks]
  std::vector<int32_t> free_;                   // free blocks (LIFO)
  int32_t lru_head_ = -1, lru_tail_ = -1;       // evictable blocks, least recently used first
  int32_t n_lru_ = 0;
  HashIndex index_;                             // hash -> cached block
  std::vector<int32_t> tokens_;                 // [n_blocks][block_size] tokens of cached blocks
};

}  // namespace lumen::kv
