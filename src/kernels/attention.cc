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
// score row per query head in flight (n_ctx floats): no S x S matrix is ever materialised.
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

// One thread's scratch, for up to `group` query heads sharing a kv head:
//   scores [group][n_kv] f32 | acc [group][head_dim] f32 | q16 [group][head_dim] fp16
struct ThreadScratch {
  float* scores;
  float* acc;
  uint16_t* q16;
  size_t scores_stride;  // floats between two heads' score rows
};

size_t scores_stride(int64_t n_kv) { return align_up(static_cast<size_t>(n_kv) * sizeof(float)) / sizeof(float); }

size_t per_thread_bytes(int32_t group, int32_t head_dim, int64_t n_kv) {
  return static_cast<size_t>(group) *
         (scores_stride(n_kv) * sizeof(float) +
          align_up(static_cast<size_t>(head_dim) * sizeof(float)) +
          align_up(static_cast<size_t>(head_dim) * sizeof(uint16_t)));
}

ThreadScratch carve(std::byte* base, int32_t group, int32_t head_dim, int64_t n_kv) {
  ThreadScratch ts;
  ts.scores_stride = scores_stride(n_kv);
  ts.scores = reinterpret_cast<float*>(base);
  base += group * ts.scores_stride * sizeof(float);
  ts.acc = reinterpret_cast<float*>(base);
  base += group * align_up(head_dim * sizeof(float));
  ts.q16 = reinterpret_cast<uint16_t*>(base);
  return ts;
}

// Query heads [h_begin, h_end) of one token, all reading kv head `kv_head` (GQA): each K/V
// block is fetched from memory once and reused from L1 for every head of the group. The
// arithmetic of each head is exactly that of a lone head, so grouping never changes a
// result.
struct GroupTask {
  const float* q;   // [n_head][head_dim] of this token
  float* out;       // [n_head][head_dim] of this token
  int64_t n_kv;     // keys 0 .. n_kv-1 are visible (causal)
  int32_t kv_head;
  int32_t h_begin, h_end;
};

void attend_group(const KernelTable& k, const PagedKvView& kv, const GroupTask& task,
                  float scale, const ThreadScratch& ts) {
  const int32_t hd = kv.head_dim;
  const int32_t bs = kv.block_size;
  const int32_t n_heads = task.h_end - task.h_begin;
  const bool f16 = kv.dtype == DType::kF16;
  const size_t acc_stride = align_up(hd * sizeof(float)) / sizeof(float);
  const size_t q16_stride = align_up(hd * sizeof(uint16_t)) / sizeof(uint16_t);
  auto q_of = [&](int32_t i) { return task.q + static_cast<int64_t>(task.h_begin + i) * hd; };
  auto scores_of = [&](int32_t i) { return ts.scores + i * ts.scores_stride; };
  auto acc_of = [&](int32_t i) { return ts.acc + i * acc_stride; };
  auto q16_of = [&](int32_t i) { return ts.q16 + i * q16_stride; };
  if (f16) {
    for (int32_t i = 0; i < n_heads; ++i)
      for (int32_t d = 0; d < hd; ++d) q16_of(i)[d] = f32_to_fp16(q_of(i)[d]);
  }

  // Pass 1: scores, block by block (a block's keys of one kv head are contiguous).
  for (int64_t j0 = 0; j0 < task.n_kv; j0 += bs) {
    const std::byte* kb = kv.k_addr(j0, task.kv_head);
    const int64_t n = std::min<int64_t>(bs, task.n_kv - j0);
    for (int32_t i = 0; i < n_heads; ++i) {
      if (f16) {
        k.attn_scores_f16(reinterpret_cast<const uint16_t*>(kb), n, q16_of(i), hd, scale, scores_of(i) + j0);
      } else {
        k.attn_scores_f32(reinterpret_cast<const float*>(kb), n, q_of(i), hd, scale, scores_of(i) + j0);
      }
    }
  }
  // Softmax as ggml_vec_soft_max_f32: f32 exponentials, double sum, f32 reciprocal; the
  // normalised p_j = e_j * (1/sum) is rounded to f16 for the F16 P.V product.
  for (int32_t i = 0; i < n_heads; ++i) {
    float* sc = scores_of(i);
    float max = -INFINITY;
    for (int64_t j = 0; j < task.n_kv; ++j) max = std::max(max, sc[j]);
    const double sum = k.exp_sum(sc, task.n_kv, max);
    const float inv_sum = static_cast<float>(1.0 / sum);
    if (f16) {
      for (int64_t j = 0; j < task.n_kv; ++j) sc[j] = round_fp16(sc[j] * inv_sum);
    } else {
      for (int64_t j = 0; j < task.n_kv; ++j) sc[j] *= inv_sum;
    }
    for (int32_t d = 0; d < hd; ++d) acc_of(i)[d] = 0.0f;
  }

  // Pass 2: out = sum_j p_j V_j.
  for (int64_t j0 = 0; j0 < task.n_kv; j0 += bs) {
    const std::byte* vb = kv.v_addr(j0, task.kv_head);
    const int64_t n = std::min<int64_t>(bs, task.n_kv - j0);
    for (int32_t i = 0; i < n_heads; ++i) {
      if (f16) {
        k.attn_accum_f16(scores_of(i) + j0, reinterpret_cast<const uint16_t*>(vb), n, hd, acc_of(i));
      } else {
        k.attn_accum_f32(scores_of(i) + j0, reinterpret_cast<const float*>(vb), n, hd, acc_of(i));
      }
    }
  }
  for (int32_t i = 0; i < n_heads; ++i) {
    float* o = task.out + static_cast<int64_t>(task.h_begin + i) * hd;
    for (int32_t d = 0; d < hd; ++d) o[d] = acc_of(i)[d];
  }
}

}  // namespace

size_t attention_scratch_bytes(const AttentionParams& p, int64_t n_tokens, int64_t n_ctx,
                               int n_threads) {
  const int32_t group = p.n_kv_head > 0 ? p.n_head / p.n_kv_head : 1;
  return kAlign + static_cast<size_t>(n_threads) * per_thread_bytes(group, p.head_dim, n_ctx);
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
  const int64_t n_kv_max = pos0 + n_tokens;
  // Tasks are (token, kv head, part of the group). A group is split into parts only when
  // there would otherwise be too few tasks to keep every thread busy (decode, few kv heads).
  const int64_t n_groups = n_tokens * p.n_kv_head;
  const int32_t n_parts = static_cast<int32_t>(std::clamp<int64_t>(
      (2 * pool.n_threads() + n_groups - 1) / n_groups, 1, group));
  const int64_t n_tasks = n_groups * n_parts;
  const size_t per_thread = per_thread_bytes(group, hd, n_kv_max);
  std::byte* base = reinterpret_cast<std::byte*>(
      (reinterpret_cast<uintptr_t>(scratch) + kAlign - 1) / kAlign * kAlign);

  // Tasks are dealt round-robin: with causal masking later tokens have more keys, so
  // contiguous ranges would leave the first thread idle at the end of a prefill.
  // Multiply-adds of the whole call (Q.K and P.V over the causal window), to decide
  // whether more than one thread is worth waking.
  const double work = 2.0 * p.n_head * hd * n_tokens * (pos0 + (n_tokens + 1) / 2.0);
  const int n_active = pool.threads_for(work, 128 * 1024);
  pool.run_on(n_active, [&](int thread_idx, int n_threads) {
    const ThreadScratch ts = carve(base + thread_idx * per_thread, group, hd, n_kv_max);
    for (int64_t task_idx = thread_idx; task_idx < n_tasks; task_idx += n_threads) {
      const int64_t t = task_idx / (p.n_kv_head * n_parts);
      const int32_t g = static_cast<int32_t>(task_idx / n_parts % p.n_kv_head);
      const int32_t part = static_cast<int32_t>(task_idx % n_parts);
      GroupTask task;
      task.q = q + t * p.n_head * hd;
      task.out = out + t * p.n_head * hd;
      task.n_kv = pos0 + t + 1;
      task.kv_head = g;
      task.h_begin = g * group + group * part / n_parts;
      task.h_end = g * group + group * (part + 1) / n_parts;
      if (task.h_begin < task.h_end) attend_group(k, kv, task, p.scale, ts);
    }
  });
}

}  // namespace lumen::kernels
