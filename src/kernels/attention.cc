// Causal attention over a paged KV cache (ops.h), emulating ggml-cpu's non-flash path.
//
// ggml computes, per (token, head):
//   s_j = (K_j . Q) * scale              K·Q matmul: F16 x F16 with f32 accumulation when the
//                                        cache is F16 (Q is rounded to F16 on the way in)
//   p_j = expf(s_j - max_j s) * (1 / sum_j expf(s_j - max))   softmax in f32, sum in double
//   out = sum_j p_j * V_j                P·V matmul: P rounded to F16 when the cache is F16
// P is normalised *before* it is rounded to F16, so an online (flash) softmax cannot give
// the same numbers. We keep one row of scores per query head (n_ctx floats, never an S x S
// matrix) and run three steps over it: scores and their max, exponentials and their sum,
// then P.V.
//
// Keys are cut into chunks of kChunkKeys. The double sum of the exponentials is summed per
// chunk, then over chunks in order; P.V is accumulated per chunk from zero, then the chunk
// results are added in order. A context of one chunk is therefore the plain sequential
// computation, and a long one has the same arithmetic whichever path runs it:
//
//   per-token path   (prefill, short decode) one task = (token, kv head, part of its query
//                    heads); the task walks every chunk itself.
//   split path       (decode of one token over > 1 chunk: flash-decoding) one task =
//                    (kv head, chunk), in three dispatches: A scores + chunk max, B exp +
//                    chunk sum (with the global max), C P.V of the chunk (with the global
//                    sum); the caller adds the chunk results. Every thread reads a
//                    disjoint part of the cache, so the cache is read once per token
//                    however many threads share it.
//
// So a token's result depends only on its context length, never on the batch it came in,
// the path, or the thread count.
//
// Sliding windows (AttentionParams::window): a token at position q sees keys
// [q - window + 1, q]; both paths run over exactly those keys (chunks still cut at absolute
// multiples of kChunkKeys), so a sliding layer's decode reads window keys, not the whole
// context, and never touches a block the KV manager has released. Soft-capping
// (AttentionParams::softcap) is applied to the scaled scores before the max.
//
// GQA: all query heads that read one kv head go through a task together, so each K/V row
// is fetched and (F16 cache) widened to f32 once for the whole group. Tables with f16
// group kernels (AVX-512) widen the rows in registers as they load them; the others widen
// kConvKeys keys at a time into a small per-thread buffer, which the f32 score / accumulate
// kernels then read from L1 for every head of the group. Widening is exact, so both give
// the f32 kernels' arithmetic on widened values, the same as the F16 ones.
//
// Keys and values of one (block, kv head) are contiguous (head-major blocks, see
// paged_kv_view.h).
#include <xmmintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/check.h"
#include "base/fp16.h"
#include "kernels/attention_tasks.h"
#include "kernels/kernel_table.h"
#include "kernels/ops.h"

namespace lumen::kernels {
namespace {

constexpr size_t kAlign = 64;
constexpr int64_t kChunkKeys = 256;  // keys per softmax-sum / P.V chunk (see above)
constexpr int64_t kConvKeys = 16;    // keys widened f16 -> f32 at a time
constexpr int32_t kGroupDimMultiple = 32;  // head dims the group kernels take (kernel_table.h)
constexpr int64_t kPrefetchBlocks = 2;     // cache blocks fetched ahead of the one in use
// Prefill: consecutive tokens of a task share every K/V row they read (causal: the last
// token's keys cover the others'), so each row is widened and loaded once per tile.
constexpr int64_t kTileTokens = 4;

size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }
size_t floats(size_t n) { return align_up(n * sizeof(float)); }

int64_t n_chunks_of(int64_t n_kv) { return (n_kv + kChunkKeys - 1) / kChunkKeys; }

// Per-thread buffers of both paths; a row is one (token, query head) of a task, at most
// kTileTokens x group rows (per-token path) or group rows (split path).
//   kf, vf [kConvKeys][head_dim]   widened keys / values (F16 cache)
//   qf     [rows][head_dim]        the rows' queries (rounded to F16 first if F16 cache)
//   scores [rows][n_ctx]           per-token path only
//   part   [rows][head_dim]        per-token path: one chunk's P.V
//   out    [rows][head_dim]        per-token path: sum of the chunks' P.V
struct ThreadScratch {
  float* kf;
  float* vf;
  float* qf;
  float* scores;
  float* part;
  float* out;
  size_t scores_stride;  // floats between two heads' score rows
};

int64_t max_rows(int32_t group, bool per_token) { return per_token ? kTileTokens * group : group; }

size_t thread_bytes(int32_t group, int32_t hd, int64_t n_ctx, bool per_token) {
  const int64_t rows = max_rows(group, per_token);
  size_t b = 2 * floats(kConvKeys * hd) + floats(static_cast<size_t>(rows) * hd);
  if (per_token) b += rows * floats(n_ctx) + 2 * floats(static_cast<size_t>(rows) * hd);
  return b;
}

ThreadScratch carve_thread(std::byte* base, int32_t group, int32_t hd, int64_t n_ctx, bool per_token) {
  const int64_t rows = max_rows(group, per_token);
  ThreadScratch ts{};
  auto take = [&](size_t bytes) {
    float* p = reinterpret_cast<float*>(base);
    base += bytes;
    return p;
  };
  ts.kf = take(floats(kConvKeys * hd));
  ts.vf = take(floats(kConvKeys * hd));
  ts.qf = take(floats(static_cast<size_t>(rows) * hd));
  if (per_token) {
    ts.scores_stride = floats(n_ctx) / sizeof(float);
    ts.scores = take(rows * floats(n_ctx));
    ts.part = take(floats(static_cast<size_t>(rows) * hd));
    ts.out = take(floats(static_cast<size_t>(rows) * hd));
  }
  return ts;
}

// Split-path buffers shared by all threads.
//   scores [n_head][n_ctx], cmax [n_head][n_chunks], csum [n_head][n_chunks] (double),
//   cacc [n_head][n_chunks][head_dim]
struct SplitScratch {
  float* scores;
  float* cmax;
  double* csum;
  float* cacc;
  size_t scores_stride;
  int64_t n_chunks_max;
};

size_t split_bytes(int32_t n_head, int32_t hd, int64_t n_ctx) {
  const int64_t nc = n_chunks_of(n_ctx);
  return n_head * floats(n_ctx) + floats(static_cast<size_t>(n_head) * nc) +
         align_up(static_cast<size_t>(n_head) * nc * sizeof(double)) +
         floats(static_cast<size_t>(n_head) * nc * hd);
}

SplitScratch carve_split(std::byte* base, int32_t n_head, int32_t hd, int64_t n_ctx) {
  SplitScratch ss{};
  ss.n_chunks_max = n_chunks_of(n_ctx);
  ss.scores_stride = floats(n_ctx) / sizeof(float);
  ss.scores = reinterpret_cast<float*>(base);
  base += n_head * floats(n_ctx);
  ss.cmax = reinterpret_cast<float*>(base);
  base += floats(static_cast<size_t>(n_head) * ss.n_chunks_max);
  ss.csum = reinterpret_cast<double*>(base);
  base += align_up(static_cast<size_t>(n_head) * ss.n_chunks_max * sizeof(double));
  ss.cacc = reinterpret_cast<float*>(base);
  return ss;
}

std::byte* aligned(std::byte* p) {
  return reinterpret_cast<std::byte*>((reinterpret_cast<uintptr_t>(p) + kAlign - 1) / kAlign * kAlign);
}

// The query heads [h_begin, h_begin + n_heads) of n_tok consecutive tokens, all reading kv
// head kv_head. Row i of a task is token i / n_heads, head h_begin + i % n_heads.
struct Heads {
  const float* q;  // [n_head][head_dim] of the first token; tokens q_tok_stride apart
  int32_t h_begin;
  int32_t n_heads;
  int32_t kv_head;
  int32_t n_tok = 1;
  int64_t q_tok_stride = 0;
  int32_t n_rows() const { return n_tok * n_heads; }
};

// qf row i = its query, rounded to F16 (and widened back, exactly) for an F16 cache.
void load_queries(const KernelTable& k, const PagedKvView& kv, const Heads& hs, float* qf) {
  const int64_t n = static_cast<int64_t>(hs.n_heads) * kv.head_dim;
  for (int32_t t = 0; t < hs.n_tok; ++t)
    std::memcpy(qf + t * n, hs.q + t * hs.q_tok_stride + static_cast<int64_t>(hs.h_begin) * kv.head_dim,
                n * sizeof(float));
  if (kv.k_dtype == DType::kF16) k.scale_round(qf, n * hs.n_tok, 1.0f, true);  // x * 1 is exact
}

// Calls fn(j, n, src) for keys [j0, j1) of kv head h, at most kConvKeys and one block at a
// time, with src = those n keys (or values, when `values`) as the cache stores them.
template <typename Fn>
void for_blocks(const PagedKvView& kv, int32_t h, int64_t j0, int64_t j1, bool values, Fn&& fn) {
  const int32_t bs = kv.block_size;
  const size_t block_bytes = static_cast<size_t>(bs) * kv.k_row_bytes();  // K and V: one type
  for (int64_t j = j0; j < j1;) {
    const int64_t n = std::min({kConvKeys, j1 - j, bs - j % bs});
    const std::byte* src = values ? kv.v_addr(j, h) : kv.k_addr(j, h);
    // The cache is paged: the hardware prefetcher cannot guess the next block. Fetch this
    // head's rows of the block two ahead while this one is computed.
    const int64_t j_ahead = (j / bs + kPrefetchBlocks) * bs;
    if (j % bs == 0 && j_ahead < j1) {
      const std::byte* pf = values ? kv.v_addr(j_ahead, h) : kv.k_addr(j_ahead, h);
      for (size_t off = 0; off < block_bytes; off += 64) _mm_prefetch(reinterpret_cast<const char*>(pf + off), _MM_HINT_T0);
    }
    fn(j, n, src);
    j += n;
  }
}

// for_blocks with the rows as contiguous f32 (widened into conv for an f16 cache).
template <typename Fn>
void for_rows(const KernelTable& k, const PagedKvView& kv, int32_t h, int64_t j0, int64_t j1, bool values,
              float* conv, Fn&& fn) {
  for_blocks(kv, h, j0, j1, values, [&](int64_t j, int64_t n, const std::byte* src) {
    if (kv.k_dtype == DType::kF16) {
      k.f16_to_f32(reinterpret_cast<const uint16_t*>(src), conv, n * kv.head_dim);
      fn(j, n, static_cast<const float*>(conv));
    } else {
      fn(j, n, reinterpret_cast<const float*>(src));
    }
  });
}

// scores[i][j] for the heads and keys [j0, j1), i.e. rows qf[i] . K_j * scale.
void chunk_scores(const KernelTable& k, const PagedKvView& kv, const Heads& hs, const float* qf,
                  int64_t j0, int64_t j1, float scale, float* scores, size_t scores_stride, float* kf) {
  const int32_t hd = kv.head_dim;
  const bool group = hd % kGroupDimMultiple == 0;
  if (group && kv.k_dtype == DType::kF16 && k.attn_scores_group_f16 != nullptr) {
    for_blocks(kv, hs.kv_head, j0, j1, false, [&](int64_t j, int64_t n, const std::byte* src) {
      k.attn_scores_group_f16(reinterpret_cast<const uint16_t*>(src), n, qf, hs.n_rows(), hd, scale, scores + j,
                              scores_stride);
    });
    return;
  }
  for_rows(k, kv, hs.kv_head, j0, j1, false, kf, [&](int64_t j, int64_t n, const float* rows) {
    if (group) {
      k.attn_scores_group_f32(rows, n, qf, hs.n_rows(), hd, scale, scores + j, scores_stride);
      return;
    }
    for (int32_t i = 0; i < hs.n_rows(); ++i)
      k.attn_scores_f32(rows, n, qf + static_cast<int64_t>(i) * hd, hd, scale, scores + i * scores_stride + j);
  });
}

// acc[i] += sum_j p[i][j] V_j over keys [j0, j1), in key order.
void chunk_pv(const KernelTable& k, const PagedKvView& kv, const Heads& hs, const float* p, size_t p_stride,
              int64_t j0, int64_t j1, float* acc, size_t acc_stride, float* vf) {
  const int32_t hd = kv.head_dim;
  const bool group = hd % kGroupDimMultiple == 0;
  if (group && kv.k_dtype == DType::kF16 && k.attn_accum_group_f16 != nullptr) {
    for_blocks(kv, hs.kv_head, j0, j1, true, [&](int64_t j, int64_t n, const std::byte* src) {
      k.attn_accum_group_f16(p + j, p_stride, reinterpret_cast<const uint16_t*>(src), n, hs.n_rows(), hd, acc,
                             acc_stride);
    });
    return;
  }
  for_rows(k, kv, hs.kv_head, j0, j1, true, vf, [&](int64_t j, int64_t n, const float* rows) {
    if (group) {
      k.attn_accum_group_f32(p + j, p_stride, rows, n, hs.n_rows(), hd, acc, acc_stride);
      return;
    }
    for (int32_t i = 0; i < hs.n_rows(); ++i) k.attn_accum_f32(p + i * p_stride + j, rows, n, hd, acc + i * acc_stride);
  });
}


// ---- key ranges ------------------------------------------------------------------------

// Keys visible to the query at position pos: [key_begin(p, pos), pos + 1). Chunks are cut at
// absolute key indices (multiples of kChunkKeys), so a token's chunks, and with them its
// arithmetic, depend only on its own key range.
int64_t key_begin(const AttentionParams& p, int64_t pos) {
  return p.window > 0 ? std::max<int64_t>(0, pos - p.window + 1) : 0;
}

// Calls fn(j0, j1) for the pieces of [lo, hi) cut at chunk boundaries, in key order.
template <typename Fn>
void for_chunks_in(int64_t lo, int64_t hi, Fn&& fn) {
  for (int64_t c = lo / kChunkKeys; c * kChunkKeys < hi; ++c)
    fn(std::max(lo, c * kChunkKeys), std::min(hi, (c + 1) * kChunkKeys));
}

// Softmax of one row's scores over its keys [lo, hi), in place: soft-capping, max, the
// exponentials' double sum per chunk then over chunks in order, P = e / sum (rounded to
// F16 for an F16 cache, as ggml's P.V sees it).
void softmax_row(const KernelTable& k, const AttentionParams& p, float* sc, int64_t lo, int64_t hi, bool f16) {
  if (p.softcap > 0.0f) k.softcap(sc + lo, hi - lo, p.softcap);
  const float max = k.row_max(sc + lo, hi - lo);
  double sum = 0;
  for_chunks_in(lo, hi, [&](int64_t j0, int64_t j1) { sum += k.exp_sum(sc + j0, j1 - j0, max); });
  k.scale_round(sc + lo, hi - lo, static_cast<float>(1.0 / sum), f16);
}

// ---- per-token path --------------------------------------------------------------------

// Row i (token t = i / n_heads, at position n_kv0 - 1 + t) sees keys [lo_t, n_kv0 + t). The
// tile's scores and P.V run over the union of its rows' keys; a row's keys outside its own
// range get p = 0, which adds exact zeros: every row's result is bit for bit that of its
// token alone.
void attend_tile(const KernelTable& k, const AttentionParams& p, const PagedKvView& kv, const Heads& hs,
                 int64_t n_kv0, float* out, int64_t out_tok_stride, const ThreadScratch& ts) {
  const int32_t hd = kv.head_dim;
  const bool f16 = kv.k_dtype == DType::kF16;
  const int64_t j_begin = key_begin(p, n_kv0 - 1), j_end = n_kv0 + hs.n_tok - 1;
  load_queries(k, kv, hs, ts.qf);
  chunk_scores(k, kv, hs, ts.qf, j_begin, j_end, p.scale, ts.scores, ts.scores_stride, ts.kf);
  for (int32_t i = 0; i < hs.n_rows(); ++i) {
    const int64_t hi = n_kv0 + i / hs.n_heads, lo = key_begin(p, hi - 1);
    float* sc = ts.scores + i * ts.scores_stride;
    softmax_row(k, p, sc, lo, hi, f16);
    std::fill(sc + j_begin, sc + lo, 0.0f);
    std::fill(sc + hi, sc + j_end, 0.0f);
  }
  const size_t n_out = static_cast<size_t>(hs.n_rows()) * hd;
  bool first = true;
  for_chunks_in(j_begin, j_end, [&](int64_t j0, int64_t j1) {
    float* acc = first ? ts.out : ts.part;
    std::fill(acc, acc + n_out, 0.0f);
    chunk_pv(k, kv, hs, ts.scores, ts.scores_stride, j0, j1, acc, hd, ts.vf);
    if (!first)
      for (size_t d = 0; d < n_out; ++d) ts.out[d] += ts.part[d];
    first = false;
  });
  const size_t n_tok_out = static_cast<size_t>(hs.n_heads) * hd;
  for (int32_t t = 0; t < hs.n_tok; ++t)
    std::memcpy(out + t * out_tok_stride + static_cast<int64_t>(hs.h_begin) * hd, ts.out + t * n_tok_out,
                n_tok_out * sizeof(float));
}

// ---- split path (flash-decoding) -------------------------------------------------------

// One token at position n_kv - 1 over its keys [lo, n_kv), cut into chunks c0, c0 + 1, ...
void attend_split(const KernelTable& k, ThreadPool& pool, int n_active, const AttentionParams& p,
                  const PagedKvView& kv, const float* q, int64_t lo, int64_t n_kv, float* out, std::byte* scratch) {
  const int32_t hd = p.head_dim;
  const int32_t group = p.n_head / p.n_kv_head;
  const bool f16 = kv.k_dtype == DType::kF16;
  const int64_t c0 = lo / kChunkKeys;
  const int64_t n_chunks = (n_kv - 1) / kChunkKeys + 1 - c0;
  std::byte* base = aligned(scratch);
  const SplitScratch ss = carve_split(base, p.n_head, hd, n_kv);
  base += split_bytes(p.n_head, hd, n_kv);
  const size_t per_thread = thread_bytes(group, hd, n_kv, false);
  const int64_t n_tasks = p.n_kv_head * n_chunks;
  auto task = [&](int64_t t, int thread_idx, auto&& step) {
    const int32_t g = static_cast<int32_t>(t / n_chunks);
    const int64_t ci = t % n_chunks;  // the task's chunk, counted from c0
    const Heads hs{q, g * group, group, g};
    const ThreadScratch ts = carve_thread(base + thread_idx * per_thread, group, hd, n_kv, false);
    const int64_t c = c0 + ci;
    step(hs, ci, std::max(lo, c * kChunkKeys), std::min(n_kv, (c + 1) * kChunkKeys), ts);
  };
  // The three steps split the tasks the same way (a contiguous range per thread, one task
  // claimed at a time, the ends stolen): unless a thread falls behind, each thread's
  // steps B and C find the scores its step A wrote in its own cache.
  auto for_tasks = [&](auto&& fn) {
    pool.for_ranges(n_active, n_tasks, 1, [&](int64_t b, int64_t e, int thread_idx) {
      for (int64_t t = b; t < e; ++t) fn(t, thread_idx);
    });
  };
  // A: scores of the chunk (soft-capped), and the chunk's max per head.
  for_tasks([&](int64_t t, int thread_idx) {
    task(t, thread_idx, [&](const Heads& hs, int64_t c, int64_t j0, int64_t j1, const ThreadScratch& ts) {
      load_queries(k, kv, hs, ts.qf);
      float* sc = ss.scores + hs.h_begin * ss.scores_stride;
      chunk_scores(k, kv, hs, ts.qf, j0, j1, p.scale, sc, ss.scores_stride, ts.kf);
      for (int32_t i = 0; i < hs.n_heads; ++i) {
        float* row = sc + i * ss.scores_stride + j0;
        if (p.softcap > 0.0f) k.softcap(row, j1 - j0, p.softcap);
        ss.cmax[(hs.h_begin + i) * ss.n_chunks_max + c] = k.row_max(row, j1 - j0);
      }
    });
  });
  // B: exponentials with the global max, and the chunk's sum per head.
  for_tasks([&](int64_t t, int thread_idx) {
    task(t, thread_idx, [&](const Heads& hs, int64_t c, int64_t j0, int64_t j1, const ThreadScratch&) {
      for (int32_t i = 0; i < hs.n_heads; ++i) {
        const int32_t h = hs.h_begin + i;
        const float max = k.row_max(ss.cmax + h * ss.n_chunks_max, n_chunks);
        ss.csum[h * ss.n_chunks_max + c] = k.exp_sum(ss.scores + h * ss.scores_stride + j0, j1 - j0, max);
      }
    });
  });
  // C: normalised P (global sum, chunks in order) and the chunk's P.V per head.
  for_tasks([&](int64_t t, int thread_idx) {
    task(t, thread_idx, [&](const Heads& hs, int64_t c, int64_t j0, int64_t j1, const ThreadScratch& ts) {
      for (int32_t i = 0; i < hs.n_heads; ++i) {
        const int32_t h = hs.h_begin + i;
        double sum = 0;
        for (int64_t cc = 0; cc < n_chunks; ++cc) sum += ss.csum[h * ss.n_chunks_max + cc];
        k.scale_round(ss.scores + h * ss.scores_stride + j0, j1 - j0, static_cast<float>(1.0 / sum), f16);
        float* acc = ss.cacc + (static_cast<int64_t>(h) * ss.n_chunks_max + c) * hd;
        std::fill(acc, acc + hd, 0.0f);
      }
      float* acc0 = ss.cacc + (static_cast<int64_t>(hs.h_begin) * ss.n_chunks_max + c) * hd;
      chunk_pv(k, kv, hs, ss.scores + hs.h_begin * ss.scores_stride, ss.scores_stride, j0, j1, acc0,
               ss.n_chunks_max * hd, ts.vf);
    });
  });
  // D: the chunks' P.V in chunk order.
  for (int32_t h = 0; h < p.n_head; ++h) {
    const float* acc = ss.cacc + static_cast<int64_t>(h) * ss.n_chunks_max * hd;
    float* o = out + static_cast<int64_t>(h) * hd;
    std::memcpy(o, acc, hd * sizeof(float));
    for (int64_t c = 1; c < n_chunks; ++c)
      for (int32_t d = 0; d < hd; ++d) o[d] += acc[c * hd + d];
  }
}

}  // namespace

size_t attention_scratch_bytes(const AttentionParams& p, int64_t n_tokens, int64_t n_ctx,
                               int n_threads) {
  const int32_t group = p.n_kv_head > 0 ? p.n_head / p.n_kv_head : 1;
  const size_t per_token = static_cast<size_t>(n_threads) * thread_bytes(group, p.head_dim, n_ctx, true);
  const size_t split = split_bytes(p.n_head, p.head_dim, n_ctx) +
                       static_cast<size_t>(n_threads) * thread_bytes(group, p.head_dim, n_ctx, false);
  return std::max(kAlign + std::max(per_token, split), flash_attention_scratch_bytes(p, n_ctx, n_threads));
}

// Precondition: scratch holds attention_scratch_bytes(p, n_tokens, n_ctx, n_threads) bytes
// with n_ctx >= pos0 + n_tokens and n_threads >= pool.n_threads().
void attention(const KernelTable& k, ThreadPool& pool, const AttentionParams& p,
               const PagedKvView& kv, const float* q, int64_t pos0, int64_t n_tokens,
               float* out, std::byte* scratch) {
  LUMEN_CHECK(p.n_kv_head > 0 && p.n_head % p.n_kv_head == 0);
  LUMEN_CHECK(kv.n_kv_head == p.n_kv_head && kv.head_dim == p.head_dim);
  if (p.flash) {
    flash_attention(k, pool, p, kv, q, pos0, n_tokens, out, scratch);
    return;
  }
  LUMEN_CHECK((kv.k_dtype == DType::kF16 || kv.k_dtype == DType::kF32) && kv.v_dtype == kv.k_dtype);
  LUMEN_DCHECK((pos0 + n_tokens + kv.block_size - 1) / kv.block_size <=
               static_cast<int64_t>(kv.block_table.size()));
  LUMEN_CHECK(p.window >= 0 && p.softcap >= 0.0f);
  const int32_t hd = p.head_dim;
  const int32_t group = p.n_head / p.n_kv_head;
  const int64_t n_kv_max = pos0 + n_tokens;
  // Multiply-adds of the whole call (Q.K and P.V over each token's keys), to decide
  // whether more than one thread is worth waking.
  const double keys_per_token = p.window > 0 ? std::min<double>(p.window, pos0 + (n_tokens + 1) / 2.0)
                                             : pos0 + (n_tokens + 1) / 2.0;
  const double work = 2.0 * p.n_head * hd * n_tokens * keys_per_token;
  const int n_active = pool.threads_for(work, 128 * 1024);

  const int64_t lo = key_begin(p, pos0);
  if (n_tokens == 1 && (n_kv_max - 1) / kChunkKeys > lo / kChunkKeys && n_active > 1) {
    attend_split(k, pool, n_active, p, kv, q, lo, n_kv_max, out, scratch);
    return;
  }

  const size_t per_thread = thread_bytes(group, hd, n_kv_max, true);
  std::byte* base = aligned(scratch);
  const int64_t tok_stride = static_cast<int64_t>(p.n_head) * hd;
  for_head_tasks(pool, n_active, n_tokens, kTileTokens, p.n_kv_head, group, [&](const HeadTask& t, int thread_idx) {
    Heads hs{q + t.t0 * tok_stride, t.h_begin, t.h_end - t.h_begin, t.kv_head};
    hs.n_tok = t.n_tok;
    hs.q_tok_stride = tok_stride;
    const ThreadScratch ts = carve_thread(base + thread_idx * per_thread, group, hd, n_kv_max, true);
    attend_tile(k, p, kv, hs, pos0 + t.t0 + 1, out + t.t0 * tok_stride, tok_stride, ts);
  });
}

}  // namespace lumen::kernels
