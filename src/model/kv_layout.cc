#include "model/kv_layout.h"

#include <algorithm>

namespace lumen::model {

Result<KvLayout> build_kv_layout(std::span<const LayerAttn> layers, int32_t n_kv_head, int32_t head_dim) {
  if (n_kv_head <= 0 || head_dim <= 0) return error("kv layout: n_kv_head and head_dim must be positive");
  const auto n_layer = static_cast<int32_t>(layers.size());
  auto where = [](int32_t il) { return "kv layout: layer " + std::to_string(il) + ": "; };
  // The distinct windows of the storing layers: full (0) first, then ascending.
  std::vector<int32_t> windows;
  for (int32_t il = 0; il < n_layer; ++il) {
    const LayerAttn& a = layers[il];
    if (!a.has_attention) continue;
    if (a.window < 0) return error(where(il) + "negative sliding window " + std::to_string(a.window));
    if (a.kv_source_layer >= 0) continue;
    if (std::find(windows.begin(), windows.end(), a.window) == windows.end()) windows.push_back(a.window);
  }
  std::sort(windows.begin(), windows.end());

  KvLayout out;
  out.n_kv_head = n_kv_head;
  out.head_dim = head_dim;
  out.groups.resize(windows.size());
  for (size_t g = 0; g < windows.size(); ++g) out.groups[g].window = windows[g];
  out.layers.resize(n_layer);
  for (int32_t il = 0; il < n_layer; ++il) {
    const LayerAttn& a = layers[il];
    if (!a.has_attention || a.kv_source_layer >= 0) continue;
    const auto g = static_cast<int32_t>(std::find(windows.begin(), windows.end(), a.window) - windows.begin());
    out.layers[il] = {g, out.n_slots(g), -1};
    out.groups[g].layers.push_back(il);
  }
  for (int32_t il = 0; il < n_layer; ++il) {
    const LayerAttn& a = layers[il];
    if (!a.has_attention || a.kv_source_layer < 0) continue;
    const int32_t src = a.kv_source_layer;
    if (src >= il)
      return error(where(il) + "kv source layer " + std::to_string(src) + " is not an earlier layer");
    const LayerAttn& s = layers[src];
    if (!s.has_attention || s.kv_source_layer >= 0)
      return error(where(il) + "kv source layer " + std::to_string(src) + " stores no K/V of its own");
    // A sliding group keeps only what its own window can still see: a reader needs a
    // window no wider than its source's.
    if (s.window > 0 && (a.window == 0 || a.window > s.window))
      return error(where(il) + "window " + std::to_string(a.window) + " is wider than its kv source layer " +
                   std::to_string(src) + "'s window " + std::to_string(s.window));
    out.layers[il] = {out.layers[src].group, out.layers[src].slot, src};
  }
  return out;
}

std::string check_kv_layout(const KvLayout& layout) {
  const auto n_layer = static_cast<int32_t>(layout.layers.size());
  for (int32_t g = 0; g < layout.n_groups(); ++g) {
    const KvLayout::Group& grp = layout.groups[g];
    if (grp.window < 0) return "group " + std::to_string(g) + " has a negative window";
    if (grp.layers.empty()) return "group " + std::to_string(g) + " stores no layer";
    if (g > 0 && grp.window <= layout.groups[g - 1].window) return "groups are not ordered by window";
    for (int32_t s = 0; s < layout.n_slots(g); ++s) {
      const int32_t il = grp.layers[s];
      if (il < 0 || il >= n_layer) return "group " + std::to_string(g) + " holds out-of-range layer";
      if (s > 0 && il <= grp.layers[s - 1]) return "group " + std::to_string(g) + " layers are not ascending";
      const KvLayout::LayerKv& lk = layout.layers[il];
      if (lk.group != g || lk.slot != s || lk.source_layer != -1)
        return "layer " + std::to_string(il) + " does not point back at group " + std::to_string(g) + " slot " +
               std::to_string(s);
    }
  }
  for (int32_t il = 0; il < n_layer; ++il) {
    const KvLayout::LayerKv& lk = layout.layers[il];
    if (lk.group < 0) {
      if (lk.slot != -1 || lk.source_layer != -1) return "layer " + std::to_string(il) + " without KV has a slot";
      continue;
    }
    if (lk.group >= layout.n_groups() || lk.slot < 0 || lk.slot >= layout.n_slots(lk.group))
      return "layer " + std::to_string(il) + " points outside the groups";
    const int32_t owner = layout.groups[lk.group].layers[lk.slot];
    if (lk.source_layer < 0 ? owner != il : (owner != lk.source_layer || lk.source_layer >= il))
      return "layer " + std::to_string(il) + " reads a slot that is not its own or its source's";
  }
  return "";
}

}  // namespace lumen::model
