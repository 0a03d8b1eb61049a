// KvLayout: what a model needs from the KV cache, derived from its layers' attention kinds.
//
// The layers that store K/V are partitioned into KV groups by attention window: all
// full-attention layers form one group, the sliding layers of each distinct window
// another. Each group gets its own block pool and storage region (kv/), and every block
// of a group holds the K/V of all the group's layers ("slots", in layer order) for
// block_size tokens, so memory is exact: a sequence of length L costs
//
//   sum over groups g:  n_slots(g) * (window(g) == 0 ? L : ~min(L, window(g) + chunk))
//
// rows of K and V. A layer that reads another layer's K/V (cross-layer sharing, CLA)
// stores nothing and costs nothing; a layer without attention has no KV at all.
//
//   Gemma-3-like, 6 layers (5 local w=512 : 1 global), layer 5 global:
//     groups[0] = {window 0,   layers {5}}           slot 0 = layer 5
//     groups[1] = {window 512, layers {0,1,2,3,4}}   slot s = layer s
//     layers[3] = {group 1, slot 3, source_layer -1}
//
// Plain data; the model builds it once at load.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "tensor/paged_kv_view.h"
#include "base/status.h"

namespace lumen::model {

struct KvLayout {
  struct Group {
    // 0: full attention. w > 0: key position k is visible to query position q iff
    // q - w < k <= q (llama.cpp's sliding-window mask).
    int32_t window = 0;
    std::vector<int32_t> layers;  // model layers stored in this group, ascending; slot = index
  };
  std::vector<Group> groups;  // full group first (if any), then sliding groups by window

  // Where one model layer's K/V live. For a layer that stores its own K/V, source_layer is
  // -1 and (group, slot) is its own place. For a CLA layer, source_layer >= 0 is the layer
  // whose K/V it reads and (group, slot) are that layer's: the forward pass then reads
  // through (group, slot) in both cases and only stores when source_layer < 0. A layer
  // without attention has group == slot == -1.
  struct LayerKv {
    int32_t group = -1;
    int32_t slot = -1;
    int32_t source_layer = -1;
  };
  std::vector<LayerKv> layers;  // [n_layer]

  int32_t n_kv_head = 0;  // per stored row (all storing layers alike for now)
  int32_t head_dim = 0;
  // One row per token and layer instead of a K row and a V row: multi-head latent attention
  // caches [latent | rope key] (n_kv_head 1, head_dim kv_lora_rank + rope dims) and reads the
  // values from the same row (KvStorageView: V aliases K).
  bool k_only = false;

  int32_t n_groups() const { return static_cast<int32_t>(groups.size()); }
  int32_t n_slots(int32_t group) const { return static_cast<int32_t>(groups[group].layers.size()); }
  // Bytes of one token's K and V in one group (all its slots), elem_bytes per element.
  size_t group_bytes_per_token(int32_t group, size_t elem_bytes) const {
    return size_t{k_only ? 1u : 2u} * n_slots(group) * n_kv_head * head_dim * elem_bytes;
  }
  // The same for a cache of these K and V types (their row bytes; K-only: K's row).
  size_t group_bytes_per_token(int32_t group, KvDTypes types) const {
    return size_t{1} * n_slots(group) * n_kv_head * (k_only ? row_bytes(types.k, head_dim) : kv_token_bytes(types, head_dim));
  }
};

// One layer's attention, as the layout builder needs it.
struct LayerAttn {
  bool has_attention = true;    // false: no attention, no KV (SSM / MLP-only layers)
  int32_t window = 0;           // 0: full attention; w > 0: sliding window of w tokens
  int32_t kv_source_layer = -1; // >= 0: reads that (earlier) layer's K/V instead of storing
};

// Groups the layers as described above. Errors (bad metadata) name the layer at fault: a
// negative window, a source layer that is not earlier, stores nothing itself, or whose
// window is narrower than the reader's (its blocks would be released too early).
Result<KvLayout> build_kv_layout(std::span<const LayerAttn> layers, int32_t n_kv_head, int32_t head_dim);

// The layout's internal consistency (groups and per-layer entries agree); "" if fine.
std::string check_kv_layout(const KvLayout& layout);

}  // namespace lumen::model
