// Causal attention over a paged KV cache (ops.h), emulating ggml-cpu's non-flash path.
//
// ggml computes, per (token, head):
//   s_j = (K_j . Q) * scale              K·Q matmul: F16 x F16 with f32 accumulation when the
//                                        cache is F16 (Q is rounded to F16 on the way in)
//   p_j = expf(s_j - max_j s) * (1 / sum_j expf(s_j - max))   softmax in f32, sum in double
//   out = sum_j p_j * V_j                P·V matmul: P rounded to F16 when the cache is F16
// P is normalised *before* it is rounded to F16, so an online (flash) softmax cannot give
// the same numbers. We run two passes over one row of scores instead: pass 1 fills
// scores[j] and the max/sum, pass 2 forms p_j and accumulates V. The only buffer is one
// score row per thread (n_ctx floats): no S x S matrix is ever materialised.
//
// Keys and values of one (block, kv head) are contiguous (head-major blocks, see
// paged_kv_view.h), so both passes stream the cache block by block.
#include <algorithm>
#include <cmath>

#include "base/check.h"
#include "base/fp16.h"
#include "kernels/kernel_table.h"
#include "kernels/ops.h"

namespace lumen::kernels {
namespace {

constexpr size_t kAlign = 64;

size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// One thread's scratch: scores [n_kv], acc [head_dim] f32, q16 [head_dim] fp16.
size_t per_thread_bytes(int32_t head_dim, int64_t n_kv) {
  return align_up(static_cast<size_t>(n_kv) * sizeof(float)) +
         align_up(static_cast<size_t>(head_dim) * sizeof(float)) +
         align_up(static_cast<size_t>(head_dim) * sizeof(uint16_t));
}

struct HeadTask {
  const float* q;   // [head_dim]
  int64_t n_kv;     // keys 0 .. n_kv-1 are visible (causal)
  int32_t kv_head;
  float* out;       // [head_dim]
};

// One query row against n_kv cached positions of one kv head.
void attend_one(const KernelTable& k, const PagedKvView& kv, const HeadTask& task,
                float scale, float* scores, float* acc, uint16_t* q16) {
  const int32_t hd = kv.head_dim;
  const int32_t bs = kv.block_size;
  const bool f16 = kv.dtype == DType::kF16;
  if (f16)
    for (int32_t i = 0; i < hd; ++i) q16[i] = f32_to_fp16(task.q[i]);

  // Pass 1: scores, block by block (a block's keys of one head are contiguous).
  for (int64_t j0 = 0; j0 < task.n_kv; j0 += bs) {
    const std::byte* kb = kv.k_addr(j0, task.kv_head);
    const int64_t n = std::min<int64_t>(bs, task.n_kv - j0);
    if (f16) {
      k.attn_scores_f16(reinterpret_cast<const uint16_t*>(kb), n, q16, hd, scale, scores + j0);
    } else {
      k.attn_scores_f32(reinterpret_cast<const float*>(kb), n, task.q, hd, scale, scores + j0);
    }
  }
  // Softmax as ggml_vec_soft_max_f32: f32 exponentials, double sum, f32 reciprocal; the
  // normalised p_j = e_j * (1/sum) is rounded to f16 for the F16 P.V product.
  float max = -INFINITY;
  for (int64_t j = 0; j < task.n_kv; ++j) max = std::max(max, scores[j]);
  const double sum = k.exp_sum(scores, task.n_kv, max);
  const float inv_sum = static_cast<float>(1.0 / sum);
  if (f16) {
    for (int64_t j = 0; j < task.n_kv; ++j) scores[j] = round_fp16(scores[j] * inv_sum);
  } else {
    for (int64_t j = 0; j < task.n_kv; ++j) scores[j] *= inv_sum;
  }

  // Pass 2: out = sum_j p_j V_j.
  for (int32_t i = 0; i < hd; ++i) acc[i] = 0.0f;
  for (int64_t j0 = 0; j0 < task.n_kv; j0 += bs) {
    const std::byte* vb = kv.v_addr(j0, task.kv_head);
    const int64_t n = std::min<int64_t>(bs, task.n_kv - j0);
    if (f16) {
      k.attn_accum_f16(scores + j0, reinterpret_cast<const uint16_t*>(vb), n, hd, acc);
    } else {
      k.attn_accum_f32(scores + j0, reinterpret_cast<const float*>(vb), n, hd, acc);
    }
  }
  for (int32_t i = 0; i < hd; ++i) task.out[i] = acc[i];
}

}  // namespace

size_t attention_scratch_bytes(const AttentionParams& p, int64_t n_tokens, int64_t n_ctx,
                               int n_threads) {
  return kAlign + static_cast<size_t>(n_threads) * per_thread_bytes(p.head_dim, n_ctx);
}

// Precondition: scratch holds attention_scratch_bytes(p, n_tokens, n_ctx, n_threads) bytes
// with n_ctx >= pos0 + n_tokens and n_threads >= pool.n_threads().
void attention(const KernelTable& k, ThreadPool& pool, const AttentionParams& p,
               const PagedKvView& kv, const float* q, int64_t pos0, int64_t n_tokens,
               float* out, std::byte* scratch) {
  LUMEN_CHECK(p.n_kv_head > 0 && p.n_head % p.n_kv_head == 0);
  LUMEN_CHECK(kv.n_kv_head == p.n_kv_head && kv.head_dim == p.head_dim);
  LUMEN_CHECK(kv.dtype == DType::kF16 || kv.dtype == DType::kF32);
  LUMEN_DCHECK((pos0 + n_tokens + kv.block_size - 1) / kv.block_size <=
               static_cast<int64_t>(kv.block_table.size()));
  const int32_t hd = p.head_dim;
  const int32_t group = p.n_head / p.n_kv_head;
  const int64_t n_tasks = n_tokens * p.n_head;
  const size_t per_thread = per_thread_bytes(hd, pos0 + n_tokens);
  std::byte* base = reinterpret_cast<std::byte*>(
      (reinterpret_cast<uintptr_t>(scratch) + kAlign - 1) / kAlign * kAlign);

  // Tasks (token, head) are dealt round-robin: with causal masking later tokens have more
  // keys, so contiguous ranges would leave the first thread idle at the end of a prefill.
  pool.run([&](int thread_idx, int n_threads) {
    std::byte* mine = base + thread_idx * per_thread;
    float* scores = reinterpret_cast<float*>(mine);
    float* acc = reinterpret_cast<float*>(mine + align_up((pos0 + n_tokens) * sizeof(float)));
    uint16_t* q16 = reinterpret_cast<uint16_t*>(reinterpret_cast<std::byte*>(acc) +
                                                align_up(hd * sizeof(float)));
    for (int64_t task_idx = thread_idx; task_idx < n_tasks; task_idx += n_threads) {
      const int64_t t = task_idx / p.n_head;
      const int32_t h = static_cast<int32_t>(task_idx % p.n_head);
      HeadTask task;
      task.q = q + (t * p.n_head + h) * hd;
      task.n_kv = pos0 + t + 1;
      task.kv_head = h / group;
      task.out = out + (t * p.n_head + h) * hd;
      attend_one(k, kv, task, p.scale, scores, acc, q16);
    }
  });
}

}  // namespace lumen::kernels
