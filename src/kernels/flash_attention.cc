// Flash attention over a paged KV cache (ops.h, AttentionParams::flash): an online softmax
// with f32 accumulation, for every KV cache type (kv_cache_supports()).
//
// Numerics (the ones llama.cpp's -fa has, ggml_compute_forward_flash_attn_ext_f16):
//   * Q is converted to the dot-product type of the K type (its type-table row's activation
//     type: f16 for an f16 cache, bf16 for bf16, q8_0 for q8_0 and q4_0), then each score is
//     that type's vec_dot (integer block dots for q8_0 / q4_0), times the scale;
//   * soft-capping, then the softmax without ever normalising a probability row: scores
//     are exponentiated against a running max, and the value rows are accumulated in f32
//     (llama.cpp accumulates an f16 V in f16; here it is f32, which is closer to exact);
//   * V rows of any type are widened (f16, bf16) or dequantized (q8_0, q4_0) kConvKeys at a
//     time into a small per-thread buffer that the f32 accumulate kernels read from L1;
//     where the table has a group P.V kernel for a q8_0 / q4_0 / f16 V (KernelTable::
//     attn_values_q8_0 / _q4_0 / _f16) and the task's rows are few enough for it to pay (decode:
//     the heads of a GQA group), it forms the same values in registers instead, same bits.
//
// Keys are cut into chunks at absolute multiples of kChunkKeys. Each chunk gives a partial
// (m = max score, l = sum of exp(s - m), acc = sum of exp(s - m) V) computed from zero;
// the partials are merged in chunk order:
//   m' = max(m, m_c), l' = l e^(m - m') + l_c e^(m_c - m'), acc' = acc e^(m - m') + acc_c e^(m_c - m')
// and out = acc / l. A task that walks the chunks itself (prefill, short decode) and the
// split path (decode over several chunks: flash decoding, one task per (kv head, chunk),
// partials merged by the caller) do the same arithmetic, so a token's result depends only
// on its context, never on the batch, the path or the thread count.
//
// GQA: a task holds every query head of a kv head (times kTileTokens tokens in prefill),
// so each K row is dotted and each V row widened once for all of them: the scores come
// from the table's K-scores tile for the K type (KernelTable::attn_key_scores_*: each key
// loaded and unpacked once for every query row) or else the type's gemm; both are bit for
// bit the type's vec_dot, key rows against all query rows.
#include <xmmintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "base/check.h"
#include "kernels/attention_tasks.h"
#include "kernels/kernel_table.h"
#include "kernels/ops.h"
#include "kernels/type_table.h"

namespace lumen::kernels {
namespace {

constexpr size_t kAlign = 64;
constexpr int64_t kChunkKeys = 256;  // keys per partial (see above)
constexpr int64_t kConvKeys = 16;    // V rows widened / dequantized at a time
constexpr int64_t kTileTokens = 8;   // prefill tokens per task (they share K/V rows)
constexpr int32_t kGroupDimMultiple = 32;  // head dims the group kernels take (kernel_table.h)
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }
size_t floats(size_t n) { return align_up(n * sizeof(float)); }
std::byte* aligned(std::byte* p) {
  return reinterpret_cast<std::byte*>((reinterpret_cast<uintptr_t>(p) + kAlign - 1) / kAlign * kAlign);
}
int64_t n_chunks_of(int64_t n_kv) { return (n_kv + kChunkKeys - 1) / kChunkKeys; }

// One (partial or running) softmax state per row: m [rows], l [rows], acc [rows][head_dim].
struct Partial {
  float* m;
  float* l;
  float* acc;
};

// Per-thread buffers; rows = the task's (token, query head) pairs, at most kTileTokens x
// group. qq [rows][head_dim * 4 bytes] the queries converted for the K type's dot;
// scores [rows][kChunkKeys]; vf [kConvKeys][head_dim]; run (the task's running state) and
// part (the chunk being computed).
struct ThreadScratch {
  std::byte* qq;
  float* scores;
  float* vf;
  Partial run;
  Partial part;
};

size_t partial_bytes(int64_t rows, int32_t hd) { return 2 * floats(rows) + floats(static_cast<size_t>(rows) * hd); }

size_t thread_bytes(int32_t group, int32_t hd) {
  const int64_t rows = kTileTokens * group;
  return align_up(static_cast<size_t>(rows) * hd * sizeof(float)) + floats(static_cast<size_t>(rows) * kChunkKeys) +
         floats(static_cast<size_t>(kConvKeys) * hd) + 2 * partial_bytes(rows, hd);
}

Partial carve_partial(std::byte*& base, int64_t rows, int32_t hd) {
  Partial p{};
  p.m = reinterpret_cast<float*>(base);
  base += floats(rows);
  p.l = reinterpret_cast<float*>(base);
  base += floats(rows);
  p.acc = reinterpret_cast<float*>(base);
  base += floats(static_cast<size_t>(rows) * hd);
  return p;
}

ThreadScratch carve_thread(std::byte* base, int32_t group, int32_t hd) {
  const int64_t rows = kTileTokens * group;
  ThreadScratch ts{};
  ts.qq = base;
  base += align_up(static_cast<size_t>(rows) * hd * sizeof(float));
  ts.scores = reinterpret_cast<float*>(base);
  base += floats(static_cast<size_t>(rows) * kChunkKeys);
  ts.vf = reinterpret_cast<float*>(base);
  base += floats(static_cast<size_t>(kConvKeys) * hd);
  ts.run = carve_partial(base, rows, hd);
  ts.part = carve_partial(base, rows, hd);
  return ts;
}

// The split path's partials of every (query head, chunk), shared by the threads:
// m, l [n_head][n_chunks], acc [n_head][n_chunks][head_dim].
size_t split_bytes(int32_t n_head, int32_t hd, int64_t n_ctx) {
  return partial_bytes(static_cast<int64_t>(n_head) * n_chunks_of(n_ctx), hd);
}

// The rows of a task: query heads [h_begin, h_begin + n_heads) of kv head kv_head, for
// n_tok consecutive tokens; row i is token i / n_heads, head h_begin + i % n_heads. Token t
// is at position pos0 + t and sees keys [key_lo(pos0 + t), pos0 + t + 1).
struct Rows {
  const float* q;  // [n_head][head_dim] of the first token; tokens q_tok_stride apart
  int32_t h_begin = 0;
  int32_t n_heads = 0;
  int32_t kv_head = 0;
  int32_t n_tok = 1;
  int64_t q_tok_stride = 0;
  int64_t pos0 = 0;
  int32_t n_rows() const { return n_tok * n_heads; }
};

int64_t key_lo(const AttentionParams& p, int64_t pos) {
  return p.window > 0 ? std::max<int64_t>(0, pos - p.window + 1) : 0;
}

// What a call needs of the K and V types: the K type's dot kernels and the bytes of one
// converted query row.
struct TypeKernels {
  const MatmulKernels* k_mm;
  GemmFn k_scores;  // the table's K-scores tile for the K type where it has one, else k_mm->gemm
  size_t q_row_bytes;
  size_t k_row_bytes, v_row_bytes;  // kv.k_row_bytes() / v_row_bytes(), looked up once
  DequantizeRowFn v_dequantize;  // V types other than f32 / f16
  AttnValuesKernels v_values;  // q8_0 / q4_0 V straight from the cache (accum_group may be null)
};

TypeKernels type_kernels(const KernelTable& k, const PagedKvView& kv) {
  TypeKernels t{};
  t.k_mm = find_matmul_kernels(k, kv.k_dtype);
  LUMEN_CHECK(t.k_mm != nullptr && t.k_mm->gemm != nullptr);
  t.q_row_bytes = t.k_mm->quantize_act ? row_bytes(t.k_mm->act_dtype, kv.head_dim) : kv.head_dim * sizeof(float);
  t.k_row_bytes = kv.k_row_bytes();
  t.v_row_bytes = kv.v_row_bytes();
  GemmFn scores = nullptr;
  switch (kv.k_dtype) {
    case DType::kF16: scores = k.attn_key_scores_f16; break;
    case DType::kQ8_0: scores = k.attn_key_scores_q8_0; break;
    case DType::kQ4_0: scores = k.attn_key_scores_q4_0; break;
    default: break;
  }
  const bool fits = kv.head_dim % kGroupDimMultiple == 0 && kv.head_dim <= kAttnKeyScoresMaxDim;
  t.k_scores = scores != nullptr && fits ? scores : t.k_mm->gemm;
  switch (kv.v_dtype) {
    case DType::kQ8_0: t.v_dequantize = k.dequantize_q8_0; break;
    case DType::kQ4_0: t.v_dequantize = k.dequantize_q4_0; break;
    default: {
      const TypeRow* vr = find_type_row(kv.v_dtype);
      LUMEN_CHECK(vr != nullptr);
      t.v_dequantize = vr->dequantize;
    }
  }
  LUMEN_CHECK(t.v_dequantize != nullptr);
  if (kv.head_dim % kGroupDimMultiple == 0) {
    if (kv.v_dtype == DType::kQ8_0) t.v_values = k.attn_values_q8_0;
    if (kv.v_dtype == DType::kQ4_0) t.v_values = k.attn_values_q4_0;
    if (kv.v_dtype == DType::kF16) t.v_values = k.attn_values_f16;
  }
  return t;
}

// qq row i = the query of row i in the K type's dot-product type.
void convert_queries(const TypeKernels& tk, int32_t hd, const Rows& rs, std::byte* qq) {
  for (int32_t i = 0; i < rs.n_rows(); ++i) {
    const float* q = rs.q + (i / rs.n_heads) * rs.q_tok_stride + static_cast<int64_t>(rs.h_begin + i % rs.n_heads) * hd;
    std::byte* dst = qq + i * tk.q_row_bytes;
    if (tk.k_mm->quantize_act) tk.k_mm->quantize_act(q, dst, hd);
    else std::memcpy(dst, q, hd * sizeof(float));
  }
}

// Calls fn(j, n, k_rows, v_rows) for keys [j0, j1) of kv head h, one block at a time, after
// asking for the rows of the block kPrefetchBlocks ahead if it holds keys below
// prefetch_end (the cache is paged: the hardware prefetcher cannot guess the next block).
// The K pass over a chunk (kKeysAndValues) fetches K into L1 and V into L2, past the
// chunk's end into the next chunk, which the same task (or, in flash decoding, the same
// thread's next task) reads next; the V pass that follows (kValues) brings its V rows from
// L2 into L1 ahead of the accumulate (a chunk's K and V rows together outgrow L1).
enum class Fetch : uint8_t { kKeysAndValues, kValues };

// kv.k_addr / kv.v_addr with tk's row sizes (PagedKvView's look the dtype up on every call,
// which per block showed as 1-2% of decode attention).
const std::byte* k_addr(const PagedKvView& kv, const TypeKernels& tk, int64_t pos, int32_t h) {
  return kv.k_base + kv.block_table[pos / kv.block_size] * kv.k_block_stride_bytes +
         (static_cast<size_t>(h) * kv.block_size + pos % kv.block_size) * tk.k_row_bytes;
}
const std::byte* v_addr(const PagedKvView& kv, const TypeKernels& tk, int64_t pos, int32_t h) {
  return kv.v_base + kv.block_table[pos / kv.block_size] * kv.v_block_stride_bytes +
         (static_cast<size_t>(h) * kv.block_size + pos % kv.block_size) * tk.v_row_bytes;
}

template <typename Fn>
void for_blocks(const PagedKvView& kv, const TypeKernels& tk, int32_t h, int64_t j0, int64_t j1,
                int64_t prefetch_end, Fetch fetch, Fn&& fn) {
  constexpr int64_t kPrefetchBlocks = 2;
  const int32_t bs = kv.block_size;
  const size_t k_bytes = static_cast<size_t>(bs) * tk.k_row_bytes, v_bytes = static_cast<size_t>(bs) * tk.v_row_bytes;
  for (int64_t j = j0; j < j1;) {
    const int64_t n = std::min<int64_t>(j1 - j, bs - j % bs);
    const int64_t j_ahead = (j / bs + kPrefetchBlocks) * bs;
    if (j_ahead < prefetch_end) {
      const char* pv = reinterpret_cast<const char*>(v_addr(kv, tk, j_ahead, h));
      if (fetch == Fetch::kKeysAndValues) {
        const char* pk = reinterpret_cast<const char*>(k_addr(kv, tk, j_ahead, h));
        for (size_t off = 0; off < k_bytes; off += 64) _mm_prefetch(pk + off, _MM_HINT_T0);
        for (size_t off = 0; off < v_bytes; off += 64) _mm_prefetch(pv + off, _MM_HINT_T1);
      } else {
        for (size_t off = 0; off < v_bytes; off += 64) _mm_prefetch(pv + off, _MM_HINT_T0);
      }
    }
    fn(j, n, k_addr(kv, tk, j, h), v_addr(kv, tk, j, h));
    j += n;
  }
}

// V rows [n][head_dim] as f32: the cache itself (f32) or widened into vf. A block's rows of
// one head are contiguous (paged_kv_view.h), so n rows convert as one run of n * head_dim.
const float* v_rows_f32(const KernelTable& k, const TypeKernels& tk, const PagedKvView& kv, const std::byte* src,
                        int64_t n, float* vf) {
  const int32_t hd = kv.head_dim;
  switch (kv.v_dtype) {
    case DType::kF32: return reinterpret_cast<const float*>(src);
    case DType::kF16: k.f16_to_f32(reinterpret_cast<const uint16_t*>(src), vf, n * hd); return vf;
    default: tk.v_dequantize(src, vf, n * hd); return vf;
  }
}

// The partial of chunk [j0, j1) for every row of rs (into ts.part). Row i sees keys
// [a_i, b_i) of the chunk (its own range cut to the chunk); an empty range gives the empty
// partial (m = -inf, l = 0, acc = 0). Keys outside a row's range get p = 0 in the shared
// P.V, which adds exact zeros.
void chunk_partial(const KernelTable& k, const TypeKernels& tk, const AttentionParams& p, const PagedKvView& kv,
                   const Rows& rs, int64_t j0, int64_t j1, const ThreadScratch& ts) {
  const int32_t hd = kv.head_dim;
  const int32_t n_rows = rs.n_rows();
  const int64_t last_pos = rs.pos0 + rs.n_tok - 1;
  // Keys any row of the task sees in this chunk.
  const int64_t u0 = std::max(j0, key_lo(p, rs.pos0)), u1 = std::min(j1, last_pos + 1);
  std::fill(ts.part.acc, ts.part.acc + static_cast<size_t>(n_rows) * hd, 0.0f);
  if (u0 >= u1) {
    std::fill(ts.part.m, ts.part.m + n_rows, kNegInf);
    std::fill(ts.part.l, ts.part.l + n_rows, 0.0f);
    return;
  }
  // sc(i, j): row i's score (then p) of key j in [u0, u1).
  auto sc = [&](int64_t i, int64_t j) { return ts.scores + i * kChunkKeys + (j - u0); };
  for_blocks(kv, tk, rs.kv_head, u0, u1, last_pos + 1, Fetch::kKeysAndValues, [&](int64_t j, int64_t n, const std::byte* k_rows, const std::byte*) {
    tk.k_scores(hd, k_rows, tk.k_row_bytes, n, ts.qq, tk.q_row_bytes, n_rows, sc(0, j), kChunkKeys);
  });
  for (int32_t i = 0; i < n_rows; ++i) {
    const int64_t pos = rs.pos0 + i / rs.n_heads;
    const int64_t a = std::max(u0, key_lo(p, pos)), b = std::min(u1, pos + 1);
    if (a >= b) {
      ts.part.m[i] = kNegInf;
      ts.part.l[i] = 0.0f;
      std::fill(sc(i, u0), sc(i, u1), 0.0f);
      continue;
    }
    k.scale_round(sc(i, a), b - a, p.scale, false);
    if (p.softcap > 0.0f) k.softcap(sc(i, a), b - a, p.softcap);
    const float max = k.row_max(sc(i, a), b - a);
    ts.part.m[i] = max;
    ts.part.l[i] = static_cast<float>(k.exp_sum(sc(i, a), b - a, max));
    std::fill(sc(i, u0), sc(i, a), 0.0f);
    std::fill(sc(i, b), sc(i, u1), 0.0f);
  }
  if (tk.v_values.accum_group != nullptr && n_rows <= tk.v_values.max_heads) {  // a block's rows at once
    for_blocks(kv, tk, rs.kv_head, u0, u1, u1, Fetch::kValues, [&](int64_t j, int64_t n, const std::byte*, const std::byte* v_block) {
      tk.v_values.accum_group(sc(0, j), kChunkKeys, v_block, tk.v_row_bytes, n, n_rows, hd, ts.part.acc, hd);
    });
    return;
  }
  const bool group = hd % kGroupDimMultiple == 0;
  for_blocks(kv, tk, rs.kv_head, u0, u1, u1, Fetch::kValues, [&](int64_t jb, int64_t nb, const std::byte*, const std::byte* v_block) {
    for (int64_t j = jb; j < jb + nb; j += kConvKeys) {
      const int64_t n = std::min(kConvKeys, jb + nb - j);
      const float* v = v_rows_f32(k, tk, kv, v_block + (j - jb) * tk.v_row_bytes, n, ts.vf);
      if (group) {
        k.attn_accum_group_f32(sc(0, j), kChunkKeys, v, n, n_rows, hd, ts.part.acc, hd);
      } else {
        for (int32_t i = 0; i < n_rows; ++i)
          k.attn_accum_f32(sc(i, j), v, n, hd, ts.part.acc + static_cast<int64_t>(i) * hd);
      }
    }
  });
}

// Row r of `run` absorbs row c of `part` (the merge of the file comment).
void merge_row(Partial run, int64_t r, Partial part, int64_t c, int32_t hd) {
  if (part.l[c] == 0.0f) return;  // an empty chunk (or all of it underflowed)
  float* acc = run.acc + r * hd;
  const float* pacc = part.acc + c * hd;
  if (run.l[r] == 0.0f) {
    run.m[r] = part.m[c];
    run.l[r] = part.l[c];
    std::memcpy(acc, pacc, hd * sizeof(float));
    return;
  }
  const float m = std::max(run.m[r], part.m[c]);
  const float a = std::exp(run.m[r] - m), b = std::exp(part.m[c] - m);
  run.m[r] = m;
  run.l[r] = run.l[r] * a + part.l[c] * b;
  for (int32_t d = 0; d < hd; ++d) acc[d] = acc[d] * a + pacc[d] * b;
}

void reset_rows(Partial run, int64_t n_rows, int32_t hd) {
  std::fill(run.m, run.m + n_rows, kNegInf);
  std::fill(run.l, run.l + n_rows, 0.0f);
  std::fill(run.acc, run.acc + n_rows * hd, 0.0f);
}

// out = acc / l (zeros for a row that saw no key, which a causal mask never leaves).
void finish_row(const float* acc, float l, int32_t hd, float* out) {
  const float inv = l > 0.0f ? 1.0f / l : 0.0f;
  for (int32_t d = 0; d < hd; ++d) out[d] = acc[d] * inv;
}

// ---- one task walks its chunks (prefill, short decode) --------------------------------------

void attend_rows(const KernelTable& k, const TypeKernels& tk, const AttentionParams& p, const PagedKvView& kv,
                 const Rows& rs, float* out, int64_t out_tok_stride, const ThreadScratch& ts) {
  const int32_t hd = kv.head_dim;
  const int64_t lo = key_lo(p, rs.pos0), hi = rs.pos0 + rs.n_tok;
  convert_queries(tk, hd, rs, ts.qq);
  reset_rows(ts.run, rs.n_rows(), hd);
  for (int64_t c = lo / kChunkKeys; c * kChunkKeys < hi; ++c) {
    chunk_partial(k, tk, p, kv, rs, c * kChunkKeys, (c + 1) * kChunkKeys, ts);
    for (int32_t i = 0; i < rs.n_rows(); ++i) merge_row(ts.run, i, ts.part, i, hd);
  }
  for (int32_t i = 0; i < rs.n_rows(); ++i)
    finish_row(ts.run.acc + static_cast<int64_t>(i) * hd, ts.run.l[i], hd,
               out + (i / rs.n_heads) * out_tok_stride + static_cast<int64_t>(rs.h_begin + i % rs.n_heads) * hd);
}

// ---- flash decoding: one token, tasks = (kv head, chunk) ------------------------------------

void attend_split(const KernelTable& k, const TypeKernels& tk, ThreadPool& pool, int n_active,
                  const AttentionParams& p, const PagedKvView& kv, const float* q, int64_t pos, float* out,
                  std::byte* scratch) {
  const int32_t hd = p.head_dim;
  const int32_t group = p.n_head / p.n_kv_head;
  const int64_t c0 = key_lo(p, pos) / kChunkKeys;
  const int64_t n_chunks = pos / kChunkKeys + 1 - c0;
  std::byte* base = aligned(scratch);
  std::byte* split_base = base;
  const Partial all = carve_partial(split_base, static_cast<int64_t>(p.n_head) * n_chunks, hd);
  base += split_bytes(p.n_head, hd, pos + 1);
  const size_t per_thread = thread_bytes(group, hd);
  pool.for_ranges(n_active, static_cast<int64_t>(p.n_kv_head) * n_chunks, 1, [&](int64_t b, int64_t e, int thread_idx) {
    const ThreadScratch ts = carve_thread(base + thread_idx * per_thread, group, hd);
    int32_t converted = -1;  // the kv head whose queries ts.qq holds
    for (int64_t t = b; t < e; ++t) {
      const int32_t g = static_cast<int32_t>(t / n_chunks);
      const int64_t ci = t % n_chunks;
      Rows rs{q, g * group, group, g};
      rs.pos0 = pos;
      if (converted != g) convert_queries(tk, hd, rs, ts.qq);
      converted = g;
      const int64_t c = c0 + ci;
      chunk_partial(k, tk, p, kv, rs, c * kChunkKeys, (c + 1) * kChunkKeys, ts);
      for (int32_t i = 0; i < group; ++i) {  // into slot (head, chunk)
        const int64_t slot = static_cast<int64_t>(rs.h_begin + i) * n_chunks + ci;
        all.m[slot] = ts.part.m[i];
        all.l[slot] = ts.part.l[i];
        std::memcpy(all.acc + slot * hd, ts.part.acc + static_cast<int64_t>(i) * hd, hd * sizeof(float));
      }
    }
  });
  // Merge each head's chunks in order, as attend_rows does; the heads split over the
  // threads (at depth 16384 a layer has n_head x 64 merges).
  pool.for_ranges(n_active, p.n_head, 1, [&](int64_t b, int64_t e, int thread_idx) {
    const ThreadScratch ts = carve_thread(base + thread_idx * per_thread, group, hd);
    for (int64_t h = b; h < e; ++h) {
      reset_rows(ts.run, 1, hd);
      for (int64_t ci = 0; ci < n_chunks; ++ci) merge_row(ts.run, 0, all, h * n_chunks + ci, hd);
      finish_row(ts.run.acc, ts.run.l[0], hd, out + h * hd);
    }
  });
}

}  // namespace

bool kv_cache_supports(DType dtype) {
  switch (dtype) {
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16:
    case DType::kQ8_0:
    case DType::kQ4_0: return true;
    default: return false;
  }
}

std::string kv_cache_type_names() { return "f32, f16, bf16, q8_0, q4_0"; }

bool kv_type_needs_flash(DType dtype) { return dtype != DType::kF16 && dtype != DType::kF32; }

size_t flash_attention_scratch_bytes(const AttentionParams& p, int64_t n_ctx, int n_threads) {
  const int32_t group = p.n_kv_head > 0 ? p.n_head / p.n_kv_head : 1;
  return kAlign + split_bytes(p.n_head, p.head_dim, n_ctx) + static_cast<size_t>(n_threads) * thread_bytes(group, p.head_dim);
}

void flash_attention(const KernelTable& k, ThreadPool& pool, const AttentionParams& p, const PagedKvView& kv,
                     const float* q, int64_t pos0, int64_t n_tokens, float* out, std::byte* scratch) {
  LUMEN_CHECK(kv_cache_supports(kv.k_dtype) && kv_cache_supports(kv.v_dtype));
  const int32_t hd = p.head_dim;
  const int32_t group = p.n_head / p.n_kv_head;
  const TypeKernels tk = type_kernels(k, kv);
  const int64_t n_kv_max = pos0 + n_tokens;
  const double keys_per_token = p.window > 0 ? std::min<double>(p.window, pos0 + (n_tokens + 1) / 2.0)
                                             : pos0 + (n_tokens + 1) / 2.0;
  const double work = 2.0 * p.n_head * hd * n_tokens * keys_per_token;
  const int n_active = pool.threads_for(work, 128 * 1024);
  if (n_tokens == 1 && pos0 / kChunkKeys > key_lo(p, pos0) / kChunkKeys && n_active > 1) {
    attend_split(k, tk, pool, n_active, p, kv, q, pos0, out, scratch);
    return;
  }
  // Tasks: attention_tasks.h.
  const size_t per_thread = thread_bytes(group, hd);
  std::byte* base = aligned(scratch) + split_bytes(p.n_head, hd, n_kv_max);
  const int64_t tok_stride = static_cast<int64_t>(p.n_head) * hd;
  for_head_tasks(pool, n_active, n_tokens, kTileTokens, p.n_kv_head, group, [&](const HeadTask& t, int thread_idx) {
    Rows rs{q + t.t0 * tok_stride, t.h_begin, t.h_end - t.h_begin, t.kv_head};
    rs.n_tok = t.n_tok;
    rs.q_tok_stride = tok_stride;
    rs.pos0 = pos0 + t.t0;
    const ThreadScratch ts = carve_thread(base + thread_idx * per_thread, group, hd);
    attend_rows(k, tk, p, kv, rs, out + t.t0 * tok_stride, tok_stride, ts);
  });
}

}  // namespace lumen::kernels
