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

#include "base/huge_buffer.h"
#include "base/status.h"
#include "kv/block_pool.h"
#include "tensor/paged_kv_view.h"

namespace lumen::kv {

// One KV group's storage (tensor/paged_kv_view.h): n_slots layers share its blocks.
struct KvCacheConfig {
  int32_t n_slots = 0;  // layers stored in this group
  int32_t n_kv_head = 0;
  int32_t head_dim = 0;
  int32_t block_size = 16;  // token slots per block
  int32_t n_blocks = 0;
  bool k_only = false;  // one row per token and layer, no V (model/kv_layout.h); dtypes.v is then dtypes.k
  KvDTypes dtypes = {};  // K and V element types (F16: llama.cpp's default); rows of head_dim
                    // elements, so head_dim must be a multiple of a quantized type's block

  // Bytes of one token's K and V over all the group's layers (the types' row bytes).
  size_t bytes_per_token() const;
  // Total bytes of the region.
  size_t total_bytes() const;
};

// An error unless head_dim is a whole number of blocks of both types.
Status check_kv_dtypes(KvDTypes dtypes, int32_t head_dim);

// Owns one group's KV region: [n_slots][2][n_blocks][n_kv_head][block_size][row].
// Move-only. Memory comes from mmap (anonymous) with MADV_HUGEPAGE.
class KvStorage {
 public:
  KvStorage() = default;

  static Result<KvStorage> allocate(const KvCacheConfig& config);

  const KvCacheConfig& config() const { return config_; }
  const KvStorageView& view() const { return view_; }

  // Copies block src_id's K and V (every slot) into block dst_id: copy-on-write when a
  // shared, partly filled block must diverge.
  void copy_block(int32_t src_id, int32_t dst_id);

 private:
  KvCacheConfig config_;
  KvStorageView view_;
  HugeBuffer memory_;
};

// The blocks of one sequence in one group, in logical order. Entry i holds positions
// [i * block_size, (i + 1) * block_size); -1 marks a block a sliding-window group has
// released (every entry before first_live() is -1, none after it).
class BlockTable {
 public:
  std::span<const int32_t> ids() const { return ids_; }
  int32_t n_blocks() const { return static_cast<int32_t>(ids_.size()); }
  // Index of the first block still held (n_blocks() if none).
  int32_t first_live() const { return first_live_; }
  int32_t n_live() const { return n_blocks() - first_live_; }
  // Slots available without allocating.
  int64_t capacity_tokens(int32_t block_size) const { return int64_t{n_blocks()} * block_size; }
  void reserve_entries(int32_t n) { ids_.reserve(n); }

  // Grows the table until it holds n_tokens; false (and no change) if the pool runs out.
  bool reserve(BlockPool& pool, int64_t n_tokens, int32_t block_size);
  // Appends a block the caller already holds a reference to (a prefix-cache hit), or -1
  // (a released block: only before any held one).
  void push_back(int32_t block_id);
  // Replaces entry idx (copy-on-write); the caller moves the references.
  void replace(int32_t idx, int32_t block_id) { ids_[idx] = block_id; }
  // Releases entries [first_live(), n) and marks them -1.
  void release_front(int32_t n, BlockPool& pool);
  // Releases entries [n, n_blocks()) and drops them.
  void truncate(int32_t n, BlockPool& pool);
  // Returns every block to the pool.
  void release_all(BlockPool& pool);

 private:
  std::vector<int32_t> ids_;
  int32_t first_live_ = 0;
};

}  // namespace lumen::kv
