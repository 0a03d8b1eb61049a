// Multi-head latent attention (DeepSeek-V2/V3): the absorbed form for short steps (decode,
// small chunks), the expanded form (mla_expanded.cc) for a sequence's long steps (prefill).
//
// H heads; per head a query/key of head_dim = nope + R dims (R rotated by RoPE) and a value
// of v dims; a latent of L = kv_lora_rank dims. Per token x (normed):
//
//   q      = x Wq^T                 or  rmsnorm(x Wq_a^T) * q_a_norm  Wq_b^T      [H][nope + R]
//   c | kr = x Wkv_a^T                                                            [L] | [R]
//   c      = rmsnorm(c) * kv_a_norm        kr = rope(kr)        one kr for all heads
//
// The cache holds [c | kr] (L + R values per token and layer) in both forms; the rows go
// through the paged cache like any K row (KvLayout::k_only: V aliases K), so prefix
// sharing, copy-on-write and preemption work on them unchanged.
//
// Expanded form (the paper's; llama.cpp c392e5094 caches its keys and values): each head's
// key and value are made from the latent, k_h = [c Wuk_h^T | kr], v_h = c Wuv_h^T (Wuk_h,
// Wuv_h: head h's k_nope and v rows of wkv_b), and attention is ordinary multi-head
// attention. lumen makes them per step, from the cached latents of every key the step sees
// (keys in chunks of 256, one matmul of the chunk's latents by wkv_b for all heads).
//
// Absorbed form: since
//
//   q_h . k_h = (q_nope_h Wuk_h) . c + rope(q_pe_h) . kr
//   sum_j p_j v_h(j) = (sum_j p_j c(j)) Wuv_h^T
//
// the attention can run over the cached rows directly, MQA-like: one "kv head" of L + R dims
// read by all H heads,
//
//   qa_h  = [q_nope_h Wuk_h | rope(q_pe_h)]                                       [H][L + R]
//   o_h   = softmax(scale * qa_h . row(j)) . row(j)       over the cached rows     [H][L + R]
//   a_h   = o_h[0:L] Wuv_h^T                                                      [H][v]
//   out   = a Wo^T
//
// (o_h's last R dims, the attention-weighted rope keys, are not used), with the common
// attention kernel (kernels::attention with n_kv_head 1 and head_dim L + R: flash-decoding,
// flash attention with -fa, the cache types of --kv-type; V takes K's type). Wuk_h is a
// transposed copy made at load (ModelWeights::owned_matrices), Wuv_h a view of wkv_b's rows.
//
// Which runs: per (query, key) pair and head the absorbed form does 2 (L + R) multiply-adds
// (1152 for DeepSeek-V2-Lite), the expanded one nope + R + v (320); per key of the step the
// expanded form spends L (nope + v) per head on the expansion (131 k), per query token the
// absorbed form as much on its two projections. A step of T queries over N keys (N >= T)
// thus saves ~T N x 832 per head and spends (N - T) x 131 k, the same trade at every depth
// once N >> T: the expanded form wins from some T on (158 if every multiply-add cost the
// same), whatever N, and at N = T (a fresh prompt) always. The expansion runs in the
// weight type's matmul tiles (q4_0: integer dots), the absorbed attention in f32 / f16 FMAs
// over 576-wide rows, which moves the break-even down: measured at DeepSeek-V2-Lite's shapes
// (docs/perf.md, "MLA's expanded form"), between 32 and 48 tokens a step at depth, and
// below 32 for a fresh prompt. kMlaExpandTokens (blocks.h, 64) comes from that, and
// --mla-expand N|off (ModelLimits::mla_expand_tokens) moves it. Decode (T = 1) stays
// absorbed: there the expansion would cost 131 k per key and head against 1152.
//
// Each form alone is batch invariant (a token's bits depend only on its context); a mix is
// not: a token computed in a long step (expanded) and in a short one (absorbed) differs by
// rounding. Both are checked against the llama.cpp goldens (tests/arch_golden_test.cc,
// ArchGoldenMla) and against a double-precision expanded reference (tests/mla_test.cc).
#include <algorithm>
#include <cstring>
#include <span>
#include <vector>

#include "base/check.h"
#include "model/blocks.h"

namespace lumen::model {
namespace {

// dst [T][n] (contiguous) = columns [off, off + n) of src [T][stride]
void gather_cols(const float* src, int64_t T, int64_t stride, int64_t off, int64_t n, float* dst) {
  for (int64_t t = 0; t < T; ++t) std::memcpy(dst + t * n, src + t * stride + off, n * sizeof(float));
}

// columns [off, off + n) of dst [T][stride] = src [T][n]
void scatter_cols(const float* src, int64_t T, int64_t n, float* dst, int64_t stride, int64_t off) {
  for (int64_t t = 0; t < T; ++t) std::memcpy(dst + t * stride + off, src + t * n, n * sizeof(float));
}

// fn(h, in, proj, pool, scratch) for every head h, over the n tokens of a span of the
// batch. A small span (at most kMlaHeadJobTokens tokens: decode) shares the heads out over
// the pool's threads in one job, each head's projection whole on its thread (pool =
// Workspace::serial) with that thread's rows of mla_in / mla_out and its scratch: one
// dispatch per projection instead of one per head (16 heads x 2 projections x 27 layers of
// DeepSeek-V2-Lite per token). A bigger span runs the heads one by one, each split over the
// threads. The same bits either way.
template <typename Fn>
void for_heads(Pass& p, int64_t n, Fn&& fn) {
  Workspace& ws = p.ws;
  const int64_t H = p.hp.n_head, L = p.hp.n_lora_kv;
  const int64_t in_stride = n * std::max<int64_t>(p.hp.qk_nope_dim(), L);
  const int64_t out_stride = n * std::max<int64_t>(L, p.hp.head_dim_v);
  if (n > kMlaHeadJobTokens) {  // big enough to split each head over the threads
    for (int64_t h = 0; h < H; ++h) fn(h, ws.mla_in.data(), ws.mla_out.data(), p.pool, ws.scratch.data());
    return;
  }
  p.pool.for_chunks(p.pool.n_threads(), H, [&](int64_t h, int thread_idx) {
    fn(h, ws.mla_in.data() + thread_idx * in_stride, ws.mla_out.data() + thread_idx * out_stride, *ws.serial,
       ws.scratch_of_thread(thread_idx));
  });
}

// The absorbed form for the sequences `seqs` (consecutive in the batch, so their tokens are
// one span [t0, t0 + n)): their rows of ws.attn [.][H * v] from the roped ws.q.
void mla_absorbed_attention(Pass& p, int32_t il, std::span<const ForwardSeq> seqs) {
  const HParams& hp = p.hp;
  const LayerSpec& s = p.specs[il];
  const LayerWeights& l = p.w.layers[il];
  Workspace& ws = p.ws;
  const int64_t H = hp.n_head, L = hp.n_lora_kv, R = hp.rope_dims, row = hp.mla_row();
  const int64_t qk = hp.head_dim, nope = hp.qk_nope_dim(), V = hp.head_dim_v;
  const int64_t t0 = seqs.front().token_begin, n = seqs.back().token_begin + seqs.back().n_tokens - t0;
  const float* q = ws.q.data() + t0 * H * qk;
  float* qa = ws.mla_q.data() + t0 * H * row;
  float* o = ws.mla_o.data() + t0 * H * row;

  // Absorbed queries: qa_h = [q_nope_h Wuk_h | q_pe_h] (q_pe already roped).
  for_heads(p, n, [&](int64_t h, float* in, float* proj, ThreadPool& pool, std::byte* head_scratch) {
    gather_cols(q, n, H * qk, h * qk, nope, in);
    kernels::matmul(p.k, pool, l.w_uk[h], in, n, proj, head_scratch);
    scatter_cols(proj, n, L, qa, H * row, h * row);
    for (int64_t t = 0; t < n; ++t)
      std::memcpy(qa + (t * H + h) * row + L, q + (t * H + h) * qk + nope, R * sizeof(float));
  });

  // Attention over the cached rows: one kv head of L + R dims, its values the same rows.
  kernels::AttentionParams ap{static_cast<int32_t>(H), 1, static_cast<int32_t>(row), s.attn_scale};
  ap.flash = ws.flash_attn;
  const KvLayout::LayerKv& lkv = p.kv_layout.layers[il];
  for (const ForwardSeq& seq : seqs) {
    const PagedKvView view = p.kv_groups[lkv.group].layer_view(lkv.slot, seq.block_tables[lkv.group]);
    const int64_t i = seq.token_begin - t0;
    kernels::attention(p.k, p.pool, ap, view, qa + i * H * row, seq.pos0, seq.n_tokens, o + i * H * row,
                       ws.scratch.data());
  }

  // Back from the latent: a_h = o_h[0:L] Wuv_h^T.
  float* a = ws.attn.data() + t0 * H * V;
  for_heads(p, n, [&](int64_t h, float* in, float* proj, ThreadPool& pool, std::byte* head_scratch) {
    gather_cols(o, n, H * row, h * row, L, in);
    kernels::matmul(p.k, pool, l.w_uv[h], in, n, proj, head_scratch);
    scatter_cols(proj, n, V, a, H * V, h * V);
  });
}

}  // namespace

void mla_attention_block(Pass& p, int32_t il, const float* xn, float* out) {
  const HParams& hp = p.hp;
  const LayerSpec& s = p.specs[il];
  const LayerWeights& l = p.w.layers[il];
  Workspace& ws = p.ws;
  const int64_t T = p.n_tokens, H = hp.n_head, L = hp.n_lora_kv, row = hp.mla_row();
  const int64_t qk = hp.head_dim, nope = hp.qk_nope_dim(), V = hp.head_dim_v;
  std::byte* scratch = ws.scratch.data();
  LUMEN_DCHECK(s.mla && s.kv_source_layer < 0);

  // q [T][H][nope + R] and the cache rows [T][L + R].
  if (l.wq_a.data != nullptr) {
    matmul_group(p.k, p.pool, {{&l.wq_a, ws.mla_ql.data()}, {&l.wkv_a, ws.mla_kv.data()}}, xn, T, scratch);
    norm(p, NormKind::kRms, ws.mla_ql.data(), l.q_a_norm, nullptr, T, ws.mla_ql.data(), hp.n_lora_q);
    p.tap("attn_q_a_norm", il, ws.mla_ql.data(), T * hp.n_lora_q);  // the input of wq_b
    kernels::matmul(p.k, p.pool, l.wq_b, ws.mla_ql.data(), T, ws.q.data(), scratch);
  } else {
    matmul_group(p.k, p.pool, {{&l.wq, ws.q.data()}, {&l.wkv_a, ws.mla_kv.data()}}, xn, T, scratch);
  }
  for (int64_t t = 0; t < T; ++t) {  // the latent's norm, in place (the rope key follows it)
    float* c = ws.mla_kv.data() + t * row;
    norm(p, NormKind::kRms, c, l.kv_a_norm, nullptr, 1, c, L);
  }
  if (p.tap_fn) {  // the normed latents [T][L], the input wkv_b multiplies (calibration only)
    std::vector<float> c(static_cast<size_t>(T * L));
    for (int64_t t = 0; t < T; ++t) std::memcpy(c.data() + t * L, ws.mla_kv.data() + t * row, L * sizeof(float));
    p.tap("attn_kv_a_norm", il, c.data(), T * L);
  }

  // RoPE on every head's q_pe (dims [nope, qk) of rows of qk) and on the key (dims [L, L + R)
  // of the cache rows), then the rows into the cache: the expanded form reads them back.
  const int32_t set = ws.rope_set_of_layer[il];
  LUMEN_CHECK(set >= 0);
  const kernels::RopeParams& rp = ws.rope_sets[set];
  kernels::RopeParams rq = rp;
  rq.head_dim = static_cast<int32_t>(qk);
  kernels::rope_rotate(rq, ws.rope_cos[set].data(), ws.rope_sin[set].data(), ws.q.data() + nope, T,
                       static_cast<int32_t>(H));
  kernels::rope_rotate(rp, ws.rope_cos[set].data(), ws.rope_sin[set].data(), ws.mla_kv.data() + L, T, 1);
  p.tap("kv_latent", il, ws.mla_kv.data(), T * row);
  const KvLayout::LayerKv& lkv = p.kv_layout.layers[il];
  auto view_of = [&](const ForwardSeq& seq) {
    return p.kv_groups[lkv.group].layer_view(lkv.slot, seq.block_tables[lkv.group]);
  };
  for (const ForwardSeq& seq : p.batch.seqs)
    kernels::kv_store(p.k, view_of(seq), seq.pos0, seq.n_tokens, ws.mla_kv.data() + seq.token_begin * row, nullptr);

  // Each sequence's attention into ws.attn [T][H * v]: the expanded form for a step of
  // mla_expand_tokens or more, the absorbed form for runs of the others.
  const std::span<const ForwardSeq> seqs = p.batch.seqs;
  auto expanded = [&](const ForwardSeq& seq) { return seq.n_tokens >= ws.mla_expand_tokens && !ws.mlx_kv.empty(); };
  for (size_t i = 0; i < seqs.size();) {
    if (expanded(seqs[i])) {
      mla_expanded_attention(p, il, seqs[i], view_of(seqs[i]));
      ++i;
      continue;
    }
    size_t e = i + 1;
    while (e < seqs.size() && !expanded(seqs[e])) ++e;
    mla_absorbed_attention(p, il, seqs.subspan(i, e - i));
    i = e;
  }
  p.tap("attn_out", il, ws.attn.data(), T * H * V);
  kernels::matmul(p.k, p.pool, l.wo, ws.attn.data(), T, out, scratch);
}

}  // namespace lumen::model
