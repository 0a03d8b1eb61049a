#include "kv/kv_cache.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "base/check.h"

namespace lumen::kv {

size_t KvCacheConfig::bytes_per_token() const {
  return size_t{1} * n_slots * n_kv_head * (row_bytes(dtypes.k, head_dim) + (k_only ? 0 : row_bytes(dtypes.v, head_dim)));
}

Status check_kv_dtypes(KvDTypes dtypes, int32_t head_dim) {
  for (DType t : {dtypes.k, dtypes.v}) {
    const uint32_t block = dtype_info(t).block_size;
    if (head_dim <= 0 || head_dim % block != 0)
      return error("kv cache: type '" + std::string(dtype_name(t)) + "' stores blocks of " + std::to_string(block) +
                   " elements, which do not divide the head size " + std::to_string(head_dim));
  }
  return Status::ok_status();
}

size_t KvCacheConfig::total_bytes() const {
  return bytes_per_token() * block_size * static_cast<size_t>(n_blocks);
}

Result<KvStorage> KvStorage::allocate(const KvCacheConfig& config) {
  if (config.n_slots <= 0 || config.n_kv_head <= 0 || config.head_dim <= 0 ||
      config.block_size <= 0 || config.n_blocks <= 0)
    return error("kv cache: every dimension must be positive");
  KvStorage s;
  s.config_ = config;
  if (config.k_only) s.config_.dtypes.v = config.dtypes.k;  // V aliases K
  LUMEN_TRY(check_kv_dtypes(s.config_.dtypes, config.head_dim));
  LUMEN_ASSIGN_OR_RETURN(s.memory_, HugeBuffer::allocate(config.total_bytes(), "kv cache"));
  KvStorageView& v = s.view_;
  v.dtypes = s.config_.dtypes;
  v.n_slots = config.n_slots;
  v.n_blocks = config.n_blocks;
  v.block_size = config.block_size;
  v.n_kv_head = config.n_kv_head;
  v.head_dim = config.head_dim;
  v.base = s.memory_.data();
  v.k_block_stride_bytes = size_t{1} * config.n_kv_head * config.block_size * row_bytes(config.dtypes.k, config.head_dim);
  v.v_block_stride_bytes = size_t{1} * config.n_kv_head * config.block_size * row_bytes(v.dtypes.v, config.head_dim);
  v.v_offset_bytes = config.k_only ? 0 : v.k_block_stride_bytes * config.n_blocks;
  v.slot_stride_bytes = v.k_block_stride_bytes * config.n_blocks + (config.k_only ? 0 : v.v_block_stride_bytes * config.n_blocks);
  return s;
}

void KvStorage::copy_block(int32_t src_id, int32_t dst_id) {
  LUMEN_CHECK(src_id >= 0 && src_id < config_.n_blocks && dst_id >= 0 && dst_id < config_.n_blocks);
  if (src_id == dst_id) return;
  for (int32_t slot = 0; slot < config_.n_slots; ++slot) {
    std::byte* k = view_.base + slot * view_.slot_stride_bytes;
    std::byte* v = k + view_.v_offset_bytes;
    const size_t kb = view_.k_block_stride_bytes, vb = view_.v_block_stride_bytes;
    std::memcpy(k + dst_id * kb, k + src_id * kb, kb);
    if (!config_.k_only) std::memcpy(v + dst_id * vb, v + src_id * vb, vb);
  }
}

bool BlockTable::reserve(BlockPool& pool, int64_t n_tokens, int32_t block_size) {
  const int64_t n_needed = (n_tokens + block_size - 1) / block_size;
  if (n_needed <= n_blocks()) return true;
  if (n_needed - n_blocks() > pool.n_free()) return false;
  while (n_blocks() < n_needed) ids_.push_back(*pool.allocate());
  return true;
}

void BlockTable::push_back(int32_t block_id) {
  if (block_id < 0) {
    LUMEN_CHECK(first_live_ == n_blocks());  // released blocks only lead the table
    ++first_live_;
  }
  ids_.push_back(block_id);
}

void BlockTable::release_front(int32_t n, BlockPool& pool) {
  n = std::min(n, n_blocks());
  for (; first_live_ < n; ++first_live_) {
    pool.release(ids_[first_live_]);
    ids_[first_live_] = -1;
  }
}

void BlockTable::truncate(int32_t n, BlockPool& pool) {
  for (int32_t i = n_blocks(); i-- > std::max(n, 0);) {
    if (ids_[i] >= 0) pool.release(ids_[i]);
    ids_.pop_back();
  }
  first_live_ = std::min(first_live_, n_blocks());
}

void BlockTable::release_all(BlockPool& pool) {
  for (int32_t id : ids_)
    if (id >= 0) pool.release(id);
  ids_.clear();
  first_live_ = 0;
}

}  // namespace lumen::kv
