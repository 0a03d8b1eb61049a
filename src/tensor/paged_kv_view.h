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
  std::span<const int32_t> block_table;  // logical block idx -> physical block idx

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

// KvStorageView: the whole paged KV cache as plain data (all layers), from which the
// model makes one PagedKvView per layer and sequence. Owned by the kv layer.
//
// Region layout: [n_layer][2 (K, V)][n_blocks][n_kv_head][block_size][head_dim]
//   layer il, K block b at: base + il * layer_stride_bytes + b * block_stride_bytes
//   layer il, V block b at: base + il * layer_stride_bytes + v_offset_bytes + b * block_stride_bytes
struct KvStorageView {
  DType dtype = DType::kF16;
  int32_t n_layer = 0;
  int32_t n_blocks = 0;
  int32_t block_size = 0;
  int32_t n_kv_head = 0;
  int32_t head_dim = 0;
  std::byte* base = nullptr;
  size_t block_stride_bytes = 0;  // n_kv_head * block_size * head_dim * elem bytes
  size_t v_offset_bytes = 0;      // n_blocks * block_stride_bytes
  size_t layer_stride_bytes = 0;  // 2 * v_offset_bytes

  PagedKvView layer_view(int32_t il, std::span<const int32_t> block_table) const {
    PagedKvView v;
    v.dtype = dtype;
    v.block_size = block_size;
    v.n_kv_head = n_kv_head;
    v.head_dim = head_dim;
    v.k_base = base + il * layer_stride_bytes;
    v.v_base = v.k_base + v_offset_bytes;
    v.block_stride_bytes = block_stride_bytes;
    v.block_table = block_table;
    return v;
  }
};

}  // namespace lumen
