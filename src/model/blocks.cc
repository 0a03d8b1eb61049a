#include "model/blocks.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <initializer_list>

#include "base/check.h"

namespace lumen::model {
namespace {

kernels::RopeParams rope_params(const HParams& hp, const RopeSpec& r, const ModelWeights& w) {
  kernels::RopeParams p;
  p.head_dim = hp.is_mla() ? hp.mla_row() : hp.head_dim;  // MLA: q and k rotated in latent-sized rows
  p.n_rot = r.n_rot;
  p.theta = r.theta;
  p.freq_scale = r.freq_scale;
  p.attn_factor = r.attn_factor;
  p.freq_factors = r.freq_factors && !w.rope_freq_factors.empty() ? w.rope_freq_factors.data() : nullptr;
  p.layout = hp.rope_layout;
  p.ext_factor = r.ext_factor;
  p.corr_low = r.corr_low;
  p.corr_high = r.corr_high;
  return p;
}

bool same_rope(const kernels::RopeParams& a, const kernels::RopeParams& b) {
  return a.n_rot == b.n_rot && a.theta == b.theta && a.freq_scale == b.freq_scale &&
         a.attn_factor == b.attn_factor && a.freq_factors == b.freq_factors && a.layout == b.layout &&
         a.ext_factor == b.ext_factor && a.corr_low == b.corr_low && a.corr_high == b.corr_high;
}

// Per-head norm of x [T][n_heads][head_dim]: one weight row for all heads, or one per head.
void head_norm(const Pass& p, NormKind kind, float* x, const float* w, bool per_head, int32_t n_heads) {
  const int32_t hd = p.hp.head_dim;
  if (!per_head) {
    norm(p, kind, x, w, nullptr, p.n_tokens * n_heads, x, hd);
    return;
  }
  for (int64_t t = 0; t < p.n_tokens; ++t)
    for (int32_t h = 0; h < n_heads; ++h) {
      float* row = x + (t * n_heads + h) * hd;
      norm(p, kind, row, w + static_cast<int64_t>(h) * hd, nullptr, 1, row, hd);
    }
}

}  // namespace

// Weights that share one input go through one matmul_fused call (the input is quantized
// once, one dispatch over all their rows) when they have the same dtype; a file that mixes
// dtypes (e.g. q4_K with a q6_K attn_v) gets one call per run of equal dtypes.
void matmul_group(const kernels::KernelTable& k, ThreadPool& pool,
                  std::initializer_list<kernels::MatmulTarget> targets, const float* x, int64_t n_tokens,
                  std::byte* scratch) {
  const kernels::MatmulTarget* t = targets.begin();
  while (t != targets.end()) {
    const kernels::MatmulTarget* run_end = t + 1;
    while (run_end != targets.end() && run_end->w->dtype == t->w->dtype) ++run_end;
    kernels::matmul_fused(k, pool, std::span<const kernels::MatmulTarget>(t, run_end), x, n_tokens, scratch);
    t = run_end;
  }
}

void matmul_group_warm(const kernels::KernelTable& k, ThreadPool& pool,
                       std::initializer_list<kernels::MatmulTarget> targets, int64_t n_tokens) {
  const kernels::MatmulTarget* run_end = targets.begin() + 1;
  while (run_end != targets.end() && run_end->w->dtype == targets.begin()->w->dtype) ++run_end;
  kernels::matmul_warm(k, pool, std::span<const kernels::MatmulTarget>(targets.begin(), run_end), n_tokens);
}

Workspace make_workspace(const HParams& hp, const std::vector<LayerSpec>& specs, const ModelWeights& w,
                         const ModelLimits& limits) {
  Workspace ws;
  const size_t T = limits.max_batch_tokens, R = limits.max_logit_rows;
  ws.x.resize(T * hp.n_embd);
  ws.xn.resize(T * hp.n_embd);
  ws.y.resize(T * hp.n_embd);
  ws.y2.resize(T * hp.n_embd);
  ws.q.resize(T * hp.n_q_dim());
  ws.k.resize(T * hp.n_kv_dim());
  ws.v.resize(T * hp.n_kv_dim());
  ws.attn.resize(T * std::max(hp.n_q_dim(), hp.n_head * hp.head_dim_v));
  // MoE: the experts' sizes (and the dense size, when leading layers are dense: DeepSeek-2)
  const size_t n_ff = hp.is_moe() ? std::max({hp.n_ff_exp, hp.n_ff_shexp, hp.n_layer_dense_lead > 0 ? hp.n_ff : 0})
                                  : hp.n_ff;
  ws.gate.resize(T * n_ff);
  ws.up.resize(T * n_ff);
  if (hp.is_moe()) {
    ws.router.resize(T * hp.n_expert);
    ws.expert_ids.resize(T * hp.n_expert_used);
    ws.expert_w.resize(T * hp.n_expert_used);
    ws.expert_begin.resize(hp.n_expert + 1);
    ws.expert_rows.resize(T * hp.n_expert_used);
    ws.xe.resize(T * hp.n_embd);
    ws.ye.resize(T * hp.n_embd);
    const size_t P = std::min<size_t>(T * hp.n_expert_used, kMoeBatchedPairs);
    ws.moe_x.resize(P * hp.n_embd);
    ws.moe_gate.resize(P * hp.n_ff_exp);
    ws.moe_up.resize(P * hp.n_ff_exp);
    ws.moe_y.resize(P * hp.n_embd);
    ws.moe_jobs.resize(2 * (hp.n_expert + 1));
  }
  if (hp.is_mla()) {
    const size_t row = hp.mla_row(), L = hp.n_lora_kv;
    ws.mla_ql.resize(T * hp.n_lora_q);
    ws.mla_kv.resize(T * row);
    ws.mla_q.resize(T * hp.n_head * row);
    ws.mla_o.resize(T * hp.n_head * row);
    const size_t rows = std::max(T, static_cast<size_t>(std::max(limits.n_threads, 1)) *
                                        std::min<size_t>(T, kMlaHeadJobTokens));
    ws.mla_in.resize(rows * std::max<size_t>(hp.qk_nope_dim(), L));
    ws.mla_out.resize(rows * std::max<size_t>(L, hp.head_dim_v));
    ws.mla_expand_tokens = limits.mla_expand_tokens == 0 ? kMlaExpandTokens : limits.mla_expand_tokens;
    if (ws.mla_expand_tokens > 0 && static_cast<size_t>(ws.mla_expand_tokens) <= T) {
      const size_t Nc = kMlaExpandKeys, H = hp.n_head, qk = hp.head_dim, v = hp.head_dim_v;
      ws.mlx_lat.resize(Nc * L);
      ws.mlx_kr.resize(Nc * hp.rope_dims);
      ws.mlx_kv.resize(Nc * std::max(H * (hp.qk_nope_dim() + v), row));  // also the cache rows' staging
      ws.mlx_k.resize(H * Nc * qk);
      ws.mlx_v.resize(H * Nc * v);
      ws.mlx_max.resize(T * H);
      ws.mlx_sum.resize(T * H);
      ws.mlx_tile.resize(static_cast<size_t>(std::max(limits.n_threads, 1)) * kMlaExpandTileTokens * (qk + Nc));
    }
  }
  ws.sel.resize(R * hp.n_embd);
  ws.pos.resize(T);
  ws.logits.resize(R * hp.n_vocab);
  ws.embd.resize(static_cast<size_t>(limits.max_embd_rows) * hp.n_embd);
  for (const LayerSpec& s : specs) {
    int32_t set = -1;
    if (s.rope.n_rot > 0) {
      const kernels::RopeParams rp = rope_params(hp, s.rope, w);
      for (size_t i = 0; i < ws.rope_sets.size() && set < 0; ++i)
        if (same_rope(ws.rope_sets[i], rp)) set = static_cast<int32_t>(i);
      if (set < 0) {
        set = static_cast<int32_t>(ws.rope_sets.size());
        ws.rope_sets.push_back(rp);
        ws.rope_cos.emplace_back(T * (rp.rotated_dims() / 2));
        ws.rope_sin.emplace_back(T * (rp.rotated_dims() / 2));
      }
    }
    ws.rope_set_of_layer.push_back(set);
  }
  // ggml's GELU table is built on its first use: build it now, not inside a forward pass.
  float probe = 0.0f;
  kernels::gelu_mul(kernels::reference_kernel_table(), &probe, nullptr, 1);
  size_t scratch = 0;
  for (const TensorView* m : matrices(w))
    scratch = std::max(scratch, kernels::matmul_scratch_bytes(m->dtype, m->ne[0], m == &w.output ? R : T,
                                                              limits.n_threads));
  for (const LayerWeights& l : w.layers)
    for (const TensorView& m : l.w_uk)
      scratch = std::max(scratch, kernels::matmul_scratch_bytes(m.dtype, m.ne[0], T, limits.n_threads));
  if (!ws.mlx_kv.empty())  // MLA's expansion: kMlaExpandKeys latents times wkv_b
    for (const LayerWeights& l : w.layers)
      scratch = std::max(scratch, kernels::matmul_scratch_bytes(l.wkv_b.dtype, l.wkv_b.ne[0], kMlaExpandKeys,
                                                                limits.n_threads));
  // MLA heads as one-thread jobs (at most kMlaHeadJobTokens rows); MoE experts as
  // matmul_jobs (their gate / up, then down, over at most P pairs and T_b tokens).
  size_t per_thread = 0;
  const int64_t T_heads = std::min<int64_t>(T, kMlaHeadJobTokens);
  const int64_t P = std::min<int64_t>(T * hp.n_expert_used, kMoeBatchedPairs);
  const int64_t T_b = std::min<int64_t>(T, P);
  for (const LayerWeights& l : w.layers) {
    for (const std::vector<TensorView>* heads : {&l.w_uk, &l.w_uv})
      for (const TensorView& m : *heads)
        per_thread = std::max(per_thread, kernels::matmul_scratch_bytes(m.dtype, m.ne[0], T_heads, 1));
    if (l.w_gate_exp.empty()) continue;
    const bool sh = l.w_gate_shexp.data != nullptr;
    const kernels::MatmulJobRows in_rows[] = {{l.w_gate_exp[0].dtype, hp.n_embd, P},
                                              {l.w_up_exp[0].dtype, hp.n_embd, P},
                                              {l.w_gate_shexp.dtype, hp.n_embd, sh ? T_b : 0},
                                              {l.w_up_shexp.dtype, hp.n_embd, sh ? T_b : 0}};
    const kernels::MatmulJobRows down_rows[] = {{l.w_down_exp[0].dtype, hp.n_ff_exp, P},
                                                {l.w_down_shexp.dtype, hp.n_ff_shexp, sh ? T_b : 0}};
    const int64_t n_jobs = 2 * (hp.n_expert + 1);
    scratch = std::max({scratch, kernels::matmul_jobs_scratch_bytes(n_jobs, std::span(in_rows, sh ? 4 : 2)),
                        kernels::matmul_jobs_scratch_bytes(n_jobs, std::span(down_rows, sh ? 2 : 1))});
  }
  ws.serial = std::make_unique<ThreadPool>(1);
  ws.thread_scratch_bytes = (per_thread + 63) / 64 * 64;
  ws.thread_scratch.resize(static_cast<size_t>(std::max(limits.n_threads, 1)) * ws.thread_scratch_bytes);
  kernels::AttentionParams ap{hp.n_head, hp.n_kv_head, hp.head_dim, 1.0f};
  if (hp.is_mla()) ap = kernels::AttentionParams{hp.n_head, 1, hp.mla_row(), 1.0f};
  scratch = std::max(scratch, kernels::attention_scratch_bytes(ap, T, limits.max_ctx, limits.n_threads));
  ws.scratch.resize(scratch + 64);
  ws.flash_attn = limits.flash_attn;
  if (limits.rotate_qk) ws.qk_rotation_signs = kernels::hadamard_signs(hp.head_dim);
  return ws;
}

void embed_tokens(Pass& p) {
  Workspace& ws = p.ws;
  const int64_t T = p.n_tokens, E = p.hp.n_embd;
  for (const ForwardSeq& s : p.batch.seqs)
    for (int32_t i = 0; i < s.n_tokens; ++i) ws.pos[s.token_begin + i] = static_cast<int32_t>(s.pos0 + i);
  for (size_t i = 0; i < ws.rope_sets.size(); ++i)
    kernels::rope_angles(ws.rope_sets[i], ws.pos.data(), T, ws.rope_cos[i].data(), ws.rope_sin[i].data());
  kernels::get_rows(p.w.tok_embd, p.batch.token_ids.data(), T, ws.x.data());
  if (p.hp.embd_scale != 1.0f) kernels::scale_in_place(ws.x.data(), T * E, p.hp.embd_scale);
  p.tap("embd", -1, ws.x.data(), T * E);
}

void norm(const Pass& p, NormKind kind, const float* x, const float* w, const float* b, int64_t n_rows, float* out,
          int64_t n) {
  if (n == 0) n = p.hp.n_embd;
  if (kind == NormKind::kLayer) {
    kernels::layer_norm(p.k, x, w, b, n_rows, n, p.hp.norm_eps, out);
    return;
  }
  kernels::rms_norm(p.k, x, w, n_rows, n, p.hp.rms_eps, out);
  if (b) kernels::add_bias(out, b, n_rows, n);
}

void attention_block(Pass& p, int32_t il, const float* xn, float* out) {
  const HParams& hp = p.hp;
  const LayerSpec& s = p.specs[il];
  const LayerWeights& l = p.w.layers[il];
  Workspace& ws = p.ws;
  const int64_t T = p.n_tokens, Q = hp.n_q_dim(), KV = hp.n_kv_dim();
  std::byte* scratch = ws.scratch.data();
  const bool own_kv = s.kv_source_layer < 0;

  // q = xn Wq^T + bq [T][n_head][head_dim]; k, v likewise [T][n_kv_head][head_dim], unless
  // the layer reads another layer's K/V.
  if (own_kv) {
    matmul_group(p.k, p.pool, {{&l.wq, ws.q.data()}, {&l.wk, ws.k.data()}, {&l.wv, ws.v.data()}}, xn, T, scratch);
  } else {
    kernels::matmul(p.k, p.pool, l.wq, xn, T, ws.q.data(), scratch);
  }
  kernels::matmul_warm(p.k, p.pool, l.wo, T);  // during the attention below
  if (l.bq) kernels::add_bias(ws.q.data(), l.bq, T, Q);
  if (own_kv && l.bk) kernels::add_bias(ws.k.data(), l.bk, T, KV);
  if (own_kv && l.bv) kernels::add_bias(ws.v.data(), l.bv, T, KV);
  // Per-head q/k norms (Qwen3, Gemma 3: RMSNorm; StableLM: LayerNorm without bias).
  if (s.qk_norm && s.qk_norm_whole) {  // OLMoE: one norm over the whole q (k) of a token
    norm(p, s.norm, ws.q.data(), l.q_norm, nullptr, T, ws.q.data(), Q);
    if (own_kv) norm(p, s.norm, ws.k.data(), l.k_norm, nullptr, T, ws.k.data(), KV);
  } else if (s.qk_norm) {
    head_norm(p, s.norm, ws.q.data(), l.q_norm, l.qk_norm_per_head, hp.n_head);
    if (own_kv) head_norm(p, s.norm, ws.k.data(), l.k_norm, l.qk_norm_per_head, hp.n_kv_head);
  }
  // RoPE on the first n_rot dims of every head (none on a NoPE layer).
  if (const int32_t set = ws.rope_set_of_layer[il]; set >= 0) {
    const kernels::RopeParams& rp = ws.rope_sets[set];
    kernels::rope_rotate(rp, ws.rope_cos[set].data(), ws.rope_sin[set].data(), ws.q.data(), T, hp.n_head);
    if (own_kv) kernels::rope_rotate(rp, ws.rope_cos[set].data(), ws.rope_sin[set].data(), ws.k.data(), T, hp.n_kv_head);
  }
  p.tap("q_rope", il, ws.q.data(), T * Q);
  if (own_kv) p.tap("k_rope", il, ws.k.data(), T * KV);
  if (!ws.qk_rotation_signs.empty()) {  // the same rotation of q and k: q k^T stays
    kernels::hadamard_rotate(ws.q.data(), T * hp.n_head, hp.head_dim, ws.qk_rotation_signs.data());
    if (own_kv) kernels::hadamard_rotate(ws.k.data(), T * hp.n_kv_head, hp.head_dim, ws.qk_rotation_signs.data());
  }

  // softmax(q k^T * scale [soft-capped], causal [window]) v per sequence, GQA head mapping.
  kernels::AttentionParams ap{hp.n_head, hp.n_kv_head, hp.head_dim, s.attn_scale};
  if (s.scale_q) {
    kernels::scale_in_place(ws.q.data(), T * Q, s.attn_scale);
    ap.scale = 1.0f;
  }
  ap.window = s.attn == AttnKind::kSliding ? s.window : 0;
  ap.softcap = s.attn_softcap;
  ap.flash = ws.flash_attn;
  // This layer's rows in its KV group (a CLA layer: its source layer's rows).
  const KvLayout::LayerKv& lkv = p.kv_layout.layers[il];
  LUMEN_DCHECK(own_kv == (lkv.source_layer < 0));
  for (const ForwardSeq& seq : p.batch.seqs) {
    const PagedKvView view = p.kv_groups[lkv.group].layer_view(lkv.slot, seq.block_tables[lkv.group]);
    const int64_t t0 = seq.token_begin;
    if (own_kv) kernels::kv_store(p.k, view, seq.pos0, seq.n_tokens, ws.k.data() + t0 * KV, ws.v.data() + t0 * KV);
    kernels::attention(p.k, p.pool, ap, view, ws.q.data() + t0 * Q, seq.pos0, seq.n_tokens, ws.attn.data() + t0 * Q,
                       scratch);
  }
  p.tap("attn_out", il, ws.attn.data(), T * Q);

  // out = attn Wo^T + bo
  kernels::matmul(p.k, p.pool, l.wo, ws.attn.data(), T, out, scratch);
  if (l.bo) kernels::add_bias(out, l.bo, T, hp.n_embd);
}

void warm_attention_input(Pass& p, int32_t il) {
  const LayerSpec& s = p.specs[il];
  const LayerWeights& l = p.w.layers[il];
  if (s.mla) return;
  if (s.kv_source_layer < 0) matmul_group_warm(p.k, p.pool, {{&l.wq, nullptr}, {&l.wk, nullptr}, {&l.wv, nullptr}}, p.n_tokens);
  else kernels::matmul_warm(p.k, p.pool, l.wq, p.n_tokens);
}

void warm_mlp_input(Pass& p, int32_t il) {
  const LayerSpec& s = p.specs[il];
  const LayerWeights& l = p.w.layers[il];
  if (s.moe) return;
  if (s.mlp == MlpKind::kGelu) kernels::matmul_warm(p.k, p.pool, l.w_up, p.n_tokens);
  else matmul_group_warm(p.k, p.pool, {{&l.w_gate, nullptr}, {&l.w_up, nullptr}}, p.n_tokens);
}

void mlp_block(Pass& p, int32_t il, const float* xn, float* out) {
  const LayerSpec& s = p.specs[il];
  const LayerWeights& l = p.w.layers[il];
  Workspace& ws = p.ws;
  const int64_t T = p.n_tokens, F = p.hp.n_ff;
  std::byte* scratch = ws.scratch.data();
  p.tap("ffn_norm", il, xn, T * p.hp.n_embd);  // the input of ffn_gate / ffn_up
  switch (s.mlp) {
    case MlpKind::kSiluGated:  // down(silu(xn Wgate^T) * (xn Wup^T))
    case MlpKind::kGeluGated:  // down(gelu(xn Wgate^T) * (xn Wup^T))
      matmul_group(p.k, p.pool, {{&l.w_gate, ws.gate.data()}, {&l.w_up, ws.up.data()}}, xn, T, scratch);
      kernels::matmul_warm(p.k, p.pool, l.w_down, T);  // during the activation below
      if (l.b_up) kernels::add_bias(ws.up.data(), l.b_up, T, F);
      if (s.mlp == MlpKind::kSiluGated) kernels::silu_mul(p.k, ws.gate.data(), ws.up.data(), T * F);
      else kernels::gelu_mul(p.k, ws.gate.data(), ws.up.data(), T * F);
      break;
    case MlpKind::kGelu:  // down(gelu(xn Wup^T + b_up))
      kernels::matmul(p.k, p.pool, l.w_up, xn, T, ws.gate.data(), scratch);
      kernels::matmul_warm(p.k, p.pool, l.w_down, T);
      if (l.b_up) kernels::add_bias(ws.gate.data(), l.b_up, T, F);
      kernels::gelu_mul(p.k, ws.gate.data(), nullptr, T * F);
      break;
  }
  p.tap("ffn_act", il, ws.gate.data(), T * F);  // the input of ffn_down
  kernels::matmul(p.k, p.pool, l.w_down, ws.gate.data(), T, out, scratch);
  if (l.b_down) kernels::add_bias(out, l.b_down, T, p.hp.n_embd);
}

std::span<const float> output_logits(Pass& p) {
  Workspace& ws = p.ws;
  const int64_t R = static_cast<int64_t>(p.batch.logit_rows.size()), E = p.hp.n_embd, V = p.hp.n_vocab;
  const NormKind kind = p.specs.empty() ? NormKind::kRms : p.specs[0].norm;
  // Hidden states for embeddings: the rows the output head would read, normed the same way.
  ws.n_embd_rows = static_cast<int64_t>(p.batch.embd_rows.size());
  for (int64_t r = 0; r < ws.n_embd_rows; ++r) {
    const int32_t row = p.batch.embd_rows[r];
    LUMEN_CHECK(row >= 0 && row < p.n_tokens);
    std::memcpy(ws.embd.data() + r * E, ws.x.data() + int64_t{row} * E, E * sizeof(float));
  }
  if (ws.n_embd_rows > 0)
    norm(p, kind, ws.embd.data(), p.w.output_norm, p.w.output_norm_b, ws.n_embd_rows, ws.embd.data());
  if (R == 0) return {};
  for (int64_t r = 0; r < R; ++r) {
    const int32_t row = p.batch.logit_rows[r];
    LUMEN_CHECK(row >= 0 && row < p.n_tokens);
    std::memcpy(ws.sel.data() + r * E, ws.x.data() + int64_t{row} * E, E * sizeof(float));
  }
  norm(p, kind, ws.sel.data(), p.w.output_norm, p.w.output_norm_b, R, ws.xn.data());
  kernels::matmul(p.k, p.pool, p.w.output, ws.xn.data(), R, ws.logits.data(), ws.scratch.data());
  if (p.w.output_b) kernels::add_bias(ws.logits.data(), p.w.output_b, R, V);
  kernels::softcap(p.k, ws.logits.data(), R * V, p.hp.final_softcap);
  return std::span<const float>(ws.logits.data(), R * V);
}

}  // namespace lumen::model
