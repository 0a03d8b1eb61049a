// PagedKvView: how kernels see one layer of one sequence's KV cache. Plain data; the kv
// layer fills it, kernels read and append through it, nobody else touches the storage.
//
// Storage of one layer (K and V each), K and V each of its own type (KvDTypes): a row of
// head_dim elements takes row_bytes(dtype, head_dim) bytes (tensor/dtype.h; a quantized
// type's row is head_dim / 32 blocks of llama.cpp's layout):
//
//   [n_blocks_total][n_kv_head][block_size][row]
//
// Token at position pos of the sequence lives in physical block
//   block_table[pos / block_size], slot pos % block_size:
//
//   k_addr(pos, h) = k_base + block_table[pos / block_size] * k_block_stride_bytes
//                           + ((h * block_size) + pos % block_size) * k_row_bytes()
//
// Head-major inside a block keeps each head's keys for one block contiguous
// (block_size * head_dim elements), which is what attention streams over.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "tensor/dtype.h"

namespace lumen {

// Element types of a KV cache, K and V independently (llama.cpp's -ctk / -ctv).
struct KvDTypes {
  DType k = DType::kF16;
  DType v = DType::kF16;
  bool operator==(const KvDTypes&) const = default;
};

// Bytes of one token's K and V rows of one kv head (the types' row sizes).
inline size_t kv_token_bytes(KvDTypes t, int32_t head_dim) { return row_bytes(t.k, head_dim) + row_bytes(t.v, head_dim); }
// Mean bytes per cached element of K and V (2 for f16, 34/32 for q8_0, ...).
inline double kv_bytes_per_elem(KvDTypes t, int32_t head_dim) {
  return static_cast<double>(kv_token_bytes(t, head_dim)) / (2.0 * head_dim);
}

struct PagedKvView {
  DType k_dtype = DType::kF16;      // element type of K
  DType v_dtype = DType::kF16;      // element type of V
  int32_t block_size = 0;           // token slots per block
  int32_t n_kv_head = 0;
  int32_t head_dim = 0;
  std::byte* k_base = nullptr;      // this layer's K storage, block 0
  std::byte* v_base = nullptr;      // this layer's V storage, block 0
  size_t k_block_stride_bytes = 0;  // bytes of one block (all heads) of K
  size_t v_block_stride_bytes = 0;  // bytes of one block (all heads) of V
  // logical block idx -> physical block idx; -1 for a block a sliding-window group has
  // released (every position in it is outside the window): never addressed.
  std::span<const int32_t> block_table;

  size_t k_row_bytes() const { return row_bytes(k_dtype, head_dim); }
  size_t v_row_bytes() const { return row_bytes(v_dtype, head_dim); }
  // Block strides of a view whose blocks hold nothing else (tests, benchmarks).
  void set_dense_strides() {
    k_block_stride_bytes = static_cast<size_t>(n_kv_head) * block_size * k_row_bytes();
    v_block_stride_bytes = static_cast<size_t>(n_kv_head) * block_size * v_row_bytes();
  }
  std::byte* k_addr(int64_t pos, int32_t head) const {
    return k_base + block_table[pos / block_size] * k_block_stride_bytes +
           (static_cast<size_t>(head) * block_size + pos % block_size) * k_row_bytes();
  }
  std::byte* v_addr(int64_t pos, int32_t head) const {
    return v_base + block_table[pos / block_size] * v_block_stride_bytes +
           (static_cast<size_t>(head) * block_size + pos % block_size) * v_row_bytes();
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
// Region layout: [n_slots][2 (K, V)][n_blocks][n_kv_head][block_size][row of its type]
//   slot s, K block b at: base + s * slot_stride_bytes + b * k_block_stride_bytes
//   slot s, V block b at: base + s * slot_stride_bytes + v_offset_bytes + b * v_block_stride_bytes
// A K-only region (multi-head latent attention: one row per token, the values are read from
// it too) is [n_slots][n_blocks][n_kv_head][block_size][row]: v_offset_bytes is 0 and V has
// K's type and strides, so V aliases K.
struct KvStorageView {
  KvDTypes dtypes = {};
  int32_t n_slots = 0;            // layers stored in this group
  int32_t n_blocks = 0;
  int32_t block_size = 0;
  int32_t n_kv_head = 0;
  int32_t head_dim = 0;
  std::byte* base = nullptr;
  size_t k_block_stride_bytes = 0;  // n_kv_head * block_size * row_bytes(dtypes.k, head_dim)
  size_t v_block_stride_bytes = 0;  // n_kv_head * block_size * row_bytes(dtypes.v, head_dim)
  size_t v_offset_bytes = 0;        // n_blocks * k_block_stride_bytes (0: K-only, V aliases K)
  size_t slot_stride_bytes = 0;     // n_blocks * (k_block_stride_bytes + v_block_stride_bytes), K-only: n_blocks * k_block_stride_bytes

  // The view of one slot (a layer of this group) through one sequence's block table of
  // this group.
  PagedKvView layer_view(int32_t slot, std::span<const int32_t> block_table) const {
    PagedKvView v;
    v.k_dtype = dtypes.k;
    v.v_dtype = dtypes.v;
    v.block_size = block_size;
    v.n_kv_head = n_kv_head;
    v.head_dim = head_dim;
    v.k_base = base + slot * slot_stride_bytes;
    v.v_base = v.k_base + v_offset_bytes;
    v.k_block_stride_bytes = k_block_stride_bytes;
    v.v_block_stride_bytes = v_block_stride_bytes;
    v.block_table = block_table;
    return v;
  }
};

}  // namespace lumen
