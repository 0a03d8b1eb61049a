// The paged KV cache: one preallocated region of fixed-size blocks (KvStorage) and the
// pool that hands blocks out to sequences (BlockPool). Sequences own a BlockTable: the
// list of physical block ids that hold their tokens, in order.
//
// Single-threaded by contract: the engine thread alone allocates and frees blocks.
// Kernels read and write the storage only through PagedKvView (tensor/paged_kv_view.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "tensor/paged_kv_view.h"

namespace lumen::kv {

struct KvCacheConfig {
  int32_t n_layer = 0;
  int32_t n_kv_head = 0;
  int32_t head_dim = 0;
  int32_t block_size = 16;  // token slots per block
  int32_t n_blocks = 0;
  DType dtype = DType::kF16;  // F16 (llama.cpp's default) or F32

  // Bytes of one token's K and V over all layers.
  size_t bytes_per_token() const;
  // Total bytes of the region.
  size_t total_bytes() const;
};

// Owns the KV region: [n_layer][2][n_blocks][n_kv_head][block_size][head_dim].
// Move-only. Memory comes from mmap (anonymous) with MADV_HUGEPAGE.
class KvStorage {
 public:
  KvStorage() = default;
  ~KvStorage();
  KvStorage(KvStorage&& other) noexcept;
  KvStorage& operator=(KvStorage&& other) noexcept;
  KvStorage(const KvStorage&) = delete;
  KvStorage& operator=(const KvStorage&) = delete;

  static Result<KvStorage> allocate(const KvCacheConfig& config);

  const KvCacheConfig& config() const { return config_; }
  const KvStorageView& view() const { return view_; }

 private:
  KvCacheConfig config_;
  KvStorageView view_;
  std::byte* data_ = nullptr;
  size_t n_bytes_ = 0;
};

// Hands out block ids with reference counts (ref_cnt > 1 once blocks are shared).
class BlockPool {
 public:
  explicit BlockPool(int32_t n_blocks);

  int32_t n_blocks() const { return static_cast<int32_t>(ref_cnt_.size()); }
  int32_t n_free() const { return static_cast<int32_t>(free_.size()); }
  int32_t n_used() const { return n_blocks() - n_free(); }

  // A free block with ref_cnt 1, or nullopt when the pool is exhausted ("does not fit" is
  // a value, not an error).
  std::optional<int32_t> allocate();
  // Adds a reference to a block in use.
  void add_ref(int32_t block_id);
  // Drops one reference; the block returns to the free list at zero.
  // Precondition: ref_cnt(block_id) >= 1.
  void release(int32_t block_id);
  int32_t ref_cnt(int32_t block_id) const { return ref_cnt_[block_id]; }

  // free + referenced == total; free blocks have ref_cnt 0; no block is free twice.
  // Returns a description of the first violation, or "" when all hold.
  std::string check_invariants() const;

 private:
  std::vector<int32_t> ref_cnt_;  // [n_blocks]
  std::vector<int32_t> free_;     // stack of free block ids (LIFO keeps hot blocks in cache)
};

// The blocks of one sequence, in logical order.
class BlockTable {
 public:
  std::span<const int32_t> ids() const { return ids_; }
  int32_t n_blocks() const { return static_cast<int32_t>(ids_.size()); }
  // Slots available without allocating.
  int64_t capacity_tokens(int32_t block_size) const { return int64_t{n_blocks()} * block_size; }

  // Grows the table until it holds n_tokens; false (and no change) if the pool runs out.
  bool reserve(BlockPool& pool, int64_t n_tokens, int32_t block_size);
  // Returns every block to the pool.
  void release_all(BlockPool& pool);

 private:
  std::vector<int32_t> ids_;
};

}  // namespace lumen::kv
