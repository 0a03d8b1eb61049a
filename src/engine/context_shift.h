// Context shift: what happens when a generating completion fills its context (llama.cpp's
// behaviour, for `lumen run` and `lumen chat`; the server never shifts, see
// src/server/README.md).
//
//   before (n_past = n_ctx tokens computed, x just sampled):
//     | keep: 0 .. n_keep-1 | discard: n_discard oldest | rest                 | x
//   after:
//     | keep: 0 .. n_keep-1 | rest (now at n_keep ..)  | x | room for n_discard tokens
//
//   n_keep    = min(request's n_keep, n_past)       (BOS, a system prompt, ...)
//   n_discard = (n_past - n_keep) / 2                (the oldest half of the rest)
//
// The kept tokens' K/V stay where they are. The rest moved n_discard positions down: its
// cached K rows (stored after RoPE) are rotated for the old positions, and its K/V were
// computed attending to the dropped tokens. Two ways on (ContextShiftMode):
//
//   kReRope     the rest's rows move down n_discard positions, K rotated by -n_discard
//               (kernels::kv_move; RoPE rotations compose), into fresh blocks (a shared or
//               cached block is never written) that never enter the prefix cache; the K/V
//               still carry what the dropped tokens contributed (llama.cpp's shift). Only
//               where Model::can_move_kv (full attention, F16/F32 rows); else recompute.
//   kRecompute  the rest is computed again: exactly the logits of a fresh run over the
//               kept tokens, for every architecture. A full-attention cache is truncated to
//               n_keep; a cache with sliding-window groups starts from the prefix cache's
//               blocks of the new token list (blocks a window released cannot serve a query
//               past n_keep).
//
// Cost (docs/perf.md): re-RoPE copies the rest's rows once, recompute is a prefill of
// the rest at depth n_keep.
#pragma once

#include <algorithm>
#include <cstdint>

namespace lumen::engine {

enum class ContextShiftMode : uint8_t { kReRope, kRecompute };

struct ContextShiftPlan {
  int64_t n_keep = 0;
  int64_t n_discard = 0;  // 0: nothing can be dropped (the completion ends, context full)
};

// n_past: tokens whose K/V fill the context; n_keep: the request's ask.
inline ContextShiftPlan plan_context_shift(int64_t n_past, int64_t n_keep) {
  ContextShiftPlan p;
  p.n_keep = std::clamp<int64_t>(n_keep, 0, n_past);
  p.n_discard = (n_past - p.n_keep) / 2;
  return p;
}

}  // namespace lumen::engine
