// PagedKvView: how kernels see one layer of one sequence's KV cache. Plain data; the kv
// layer fills it, kernels read and append through it, nobody else touches the storage.
//
// Storage of one layer (K and V each), dtype = kv dtype (F16 or F32):
//
//   [n_blocks_total][n_kv_head][block_size][head_dim]
//
// Token at position pos of the sequence lives in physical block
//   block_table[pos / block_size], slot pos % block_size:
//
//   k_addr(pos, h) = k_base + block_table[pos / block_size] * block_stride_bytes
//                           + ((h * block_size) + pos % block_size) * head_dim * elem_bytes
//
// Head-major inside a block keeps each head's keys for one block contiguous
// (block_size * head_dim elements), which is what attention streams over.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "tensor/dtype.h"

namespace lumen {

struct PagedKvView {
  DType dtype = DType::kF16;        // element type of K and V
  int32_t block_size = 0;           // token slots per block
  int32_t n_kv_head = 0;
  int32_t head_dim = 0;
  std::byte* k_base = nullptr;      // this layer's K storage, block 0
  std::byte* v_base = nullptr;      // this layer's V storage, block 0
  size_t block_stride_bytes = 0;    // bytes of one block (all heads) of K (same for V)
  // logical block idx -> physical block idx; -1 for a block a sliding-window group has
  // released (every position in it is outside the window): never addressed.
  std::span<const int32_t> block_table;

  size_t elem_bytes() const { return dtype == DType::kF32 ? 4 : 2; }
  std::byte* k_addr(int64_t pos, int32_t head) const {
    return k_base + block_table[pos / block_size] * block_stride_bytes +
           (static_cast<size_t>(head) * block_size + pos % block_size) * head_dim * elem_bytes();
  }
  std::byte* v_addr(int64_t pos, int32_t head) const {
    return v_base + block_table[pos / block_size] * block_stride_bytes +
           (static_cast<size_t>(head) * block_size + pos % block_size) * head_dim * elem_bytes();
  }
};

}  // namespace lumen

namespace lumen {

// KvStorageView: one KV group's region as plain data, from which the model makes one
// PagedKvView per layer and sequence. Owned by the kv layer.
//
// The layers that store K/V are partitioned into KV groups by attention window (all
// full-attention layers form one group, the sliding layers of each window another; see
// model/kv_layout.h). Each group has its own region and its own blocks: block b of a group
// holds the K/V of every one of the group's layers ("slots", in layer order) for
// block_size tokens.
//
// Region layout: [n_slots][2 (K, V)][n_blocks][n_kv_head][block_size][head_dim]
//   slot s, K block b at: base + s * slot_stride_bytes + b * block_stride_bytes
//   slot s, V block b at: base + s * slot_stride_bytes + v_offset_bytes + b * block_stride_bytes
struct KvStorageView {
  DType dtype = DType::kF16;
  int32_t n_slots = 0;            // layers stored in this group
  int32_t n_blocks = 0;
  int32_t block_size = 0;
  int32_t n_kv_head = 0;
  int32_t head_dim = 0;
  std::byte* base = nullptr;
  size_t block_stride_bytes = 0;  // n_kv_head * block_size * head_dim * elem bytes
  size_t v_offset_bytes = 0;      // n_blocks * block_stride_bytes
  size_t slot_stride_bytes = 0;   // 2 * v_offset_bytes

  // The view of one slot (a layer of this group) through one sequence's block table of
  // this group.
  PagedKvView layer_view(int32_t slot, std::span<const int32_t> block_table) const {
    PagedKvView v;
    v.dtype = dtype;
    v.block_size = block_size;
    v.n_kv_head = n_kv_head;
    v.head_dim = head_dim;
    v.k_base = base + slot * slot_stride_bytes;
    v.v_base = v.k_base + v_offset_bytes;
    v.block_stride_bytes = block_stride_bytes;
    v.block_table = block_table;
    return v;
  }
};

}  // namespace lumen
