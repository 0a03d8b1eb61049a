// How both attention paths (attention.cc, flash_attention.cc) split a batch into tasks:
// (tile of tokens, kv head, part of the group). A GQA group is split into parts only when
// there would otherwise be too few tasks to keep every thread busy (decode, few kv heads);
// threads claim tasks dynamically, since later tokens of a prefill have more keys.
#pragma once

#include <algorithm>
#include <cstdint>

#include "base/thread_pool.h"

namespace lumen::kernels {

struct HeadTask {
  int32_t kv_head = 0;  // the group's kv head
  int32_t h_begin = 0;  // query heads [h_begin, h_end) of the group
  int32_t h_end = 0;
  int64_t t0 = 0;       // first token of the tile
  int32_t n_tok = 0;    // tokens in the tile
};

// fn(const HeadTask&, int thread_idx) for every non-empty task.
template <class Fn>
void for_head_tasks(ThreadPool& pool, int n_active, int64_t n_tokens, int64_t tile_tokens, int32_t n_kv_head,
                    int32_t group, Fn&& fn) {
  const int64_t n_tiles = (n_tokens + tile_tokens - 1) / tile_tokens;
  const int64_t n_groups = n_tiles * n_kv_head;
  const auto n_parts = static_cast<int32_t>(std::clamp<int64_t>((2 * n_active + n_groups - 1) / n_groups, 1, group));
  pool.for_chunks(n_active, n_groups * n_parts, [&](int64_t task_idx, int thread_idx) {
    HeadTask t;
    const int64_t tile = task_idx / (n_kv_head * n_parts);
    t.kv_head = static_cast<int32_t>(task_idx / n_parts % n_kv_head);
    const auto part = static_cast<int32_t>(task_idx % n_parts);
    t.h_begin = t.kv_head * group + group * part / n_parts;
    t.h_end = t.kv_head * group + group * (part + 1) / n_parts;
    if (t.h_begin >= t.h_end) return;
    t.t0 = tile * tile_tokens;
    t.n_tok = static_cast<int32_t>(std::min(tile_tokens, n_tokens - t.t0));
    fn(t, thread_idx);
  });
}

}  // namespace lumen::kernels
