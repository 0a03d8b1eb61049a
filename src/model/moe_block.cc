// The mixture-of-experts MLP (Mixtral, Qwen2-MoE, Qwen3-MoE, OLMoE, DeepSeek-2):
//
//   r      = xn Wrouter^T                       [T][n_expert] router logits
//   p      = softmax(r)                         per token (DeepSeek-V3: sigmoid(r))
//   S(t)   = the K experts of largest p         K = n_expert_used (ties: lower index;
//                                               DeepSeek-V3: of largest p + exp_probs_b)
//   g(t,e) = p[e]            e in S(t)          (Mixtral, Qwen3-MoE: / sum of p over S(t))
//                                               (DeepSeek-2: * expert_weights_scale)
//   out[t] = sum over e in S(t) of g(t,e) * down_e(silu(gate_e(xn[t])) * up_e(xn[t]))
//   Qwen2-MoE: out[t] += sigmoid(xn[t] . w_shexp_gate) * down_s(silu(gate_s(xn[t])) * up_s(xn[t]))
//   DeepSeek-2: out[t] += down_s(silu(gate_s(xn[t])) * up_s(xn[t]))   (shared experts, no gate)
//
// Batched by expert, not by token: the (token, slot) pairs of the step are grouped by the
// expert they chose (a counting sort), then each expert with at least one token runs once
// over its tokens' rows, gathered into one block, and its outputs are added back, scaled,
// to their tokens' rows:
//
//   tokens t0 t1 t2, K = 2       t0 -> {3, 5}   t1 -> {5, 0}   t2 -> {3, 5}
//   grouped by expert            e0: [t1]   e3: [t0, t2]   e5: [t0, t1, t2]
//   expert 5's weights are read once for the three tokens; experts 1, 2, 4, 6, 7 not at all
//
// so a step with many tokens (prefill, many sequences decoding) reads each selected expert
// once, and decode reads only the K selected ones. How the experts' matmuls are issued
// depends on the step's size:
//
//   at most kMoeBatchedPairs (token, slot) pairs (decode, a few sequences): every expert's
//     gate and up rows as one parallel job, then every down row as another
//     (kernels::matmul_jobs), the shared expert in the same jobs: 2 dispatches a layer
//     instead of 2-3 per expert;
//   more (prefill): expert by expert, each matmul split over the threads (each expert has
//     enough rows to keep them busy, and the dispatches are a small share).
//
// Both sum the experts' outputs into a token's row in the same order (by expert), so a
// token gets the same bits whichever path its step took. Nothing allocates: every buffer
// is in the Workspace, sized at load for max_batch_tokens.
//
// Taps (model.h), only when a tap is set: each expert with rows taps the rows it ran on
// (ffn_moe_in: its gathered xn rows; ffn_moe_act: silu(gate) * up, its down projection's
// input), after the expert has run, from the buffers that still hold them.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/check.h"
#include "model/blocks.h"

namespace lumen::model {
namespace {

// How a layer's router turns logits into weights (HParams).
struct Router {
  int32_t n = 0, k = 0;
  bool sigmoid = false;           // probabilities sigmoid(logit) instead of softmax
  const float* bias = nullptr;    // [n] added to the probabilities for the selection only
  bool normalise = false;         // the k weights divided by their sum
  float scale = 1.0f;             // then multiplied by it
};

// probs [n] = softmax(logits [n]) (in place; ggml's order: max, exp(x - max), sum in double,
// scale) or sigmoid(logits); ids [k] = the k largest (plus the bias, if any; ties: the lower
// index first), w [k] = their probabilities, divided by their sum when `normalise`, times
// `scale`.
void route_token(const Router& r, float* probs, int32_t* ids, float* w) {
  const int32_t n = r.n, k = r.k;
  if (r.sigmoid) {
    for (int32_t e = 0; e < n; ++e) probs[e] = 1.0f / (1.0f + std::exp(-probs[e]));
  } else {
    float max_logit = probs[0];
    for (int32_t e = 1; e < n; ++e) max_logit = std::max(max_logit, probs[e]);
    double sum = 0.0;
    for (int32_t e = 0; e < n; ++e) {
      probs[e] = std::exp(probs[e] - max_logit);
      sum += probs[e];
    }
    const float inv = static_cast<float>(1.0 / sum);
    for (int32_t e = 0; e < n; ++e) probs[e] *= inv;
  }
  auto score = [&](int32_t e) { return r.bias ? probs[e] + r.bias[e] : probs[e]; };
  for (int32_t j = 0; j < k; ++j) {  // k selection passes: k and n are small (8 of 128)
    int32_t best = -1;
    for (int32_t e = 0; e < n; ++e) {
      if (std::find(ids, ids + j, e) != ids + j) continue;
      if (best < 0 || score(e) > score(best)) best = e;
    }
    ids[j] = best;
    w[j] = probs[best];
  }
  if (r.normalise) {
    float w_sum = 0.0f;
    for (int32_t j = 0; j < k; ++j) w_sum += w[j];
    for (int32_t j = 0; j < k; ++j) w[j] /= w_sum;
  }
  if (r.scale != 1.0f)
    for (int32_t j = 0; j < k; ++j) w[j] *= r.scale;
}

// out [n] += w * y [n]
void add_scaled(float* out, const float* y, float w, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] += w * y[i];
}

// y [n][n_embd] = down(silu(x Wgate^T) * (x Wup^T)) of n rows x [n][n_embd], through
// gate / up [n][n_ff] and `scratch` (matmul scratch for n rows on `pool`).
void swiglu(const kernels::KernelTable& k, ThreadPool& pool, const TensorView& w_gate, const TensorView& w_up,
            const TensorView& w_down, const float* x, int64_t n, float* y, float* gate, float* up,
            std::byte* scratch) {
  const int64_t f = w_gate.ne[1];
  matmul_group(k, pool, {{&w_gate, gate}, {&w_up, up}}, x, n, scratch);
  kernels::silu_mul(k, gate, up, n * f);
  kernels::matmul(k, pool, w_down, gate, n, y, scratch);
}

// The taps of one expert that ran on n rows: its input x [n][n_embd] and its down
// projection's input act [n][n_ff_exp].
void tap_expert_rows(const Pass& p, int32_t il, int32_t e, const float* x, const float* act, int64_t n) {
  p.tap_expert("ffn_moe_in", il, e, x, n * p.hp.n_embd);
  p.tap_expert("ffn_moe_act", il, e, act, n * p.hp.n_ff_exp);
}

// The experts of a small step (decode, a few sequences: at most kMoeBatchedPairs pairs)
// as two parallel jobs (kernels::matmul_jobs): the gate and up rows of every expert with
// tokens (and of the shared expert), then their down rows, instead of two or three
// dispatches per expert. Pair i's output row goes to moe_y row i (expert_rows order),
// unweighted; the shared expert's to ye. A matmul row's result does not depend on how the
// work was split (kernels/ops.h), so this gives the same bits as the expert-by-expert path.
void experts_batched(Pass& p, const LayerWeights& l, bool shared, const float* xn) {
  Workspace& ws = p.ws;
  const int64_t T = p.n_tokens, E = p.hp.n_embd, F = p.hp.n_ff_exp;
  const int32_t n_expert = p.hp.n_expert, K = p.hp.n_expert_used;
  const int32_t* begin = ws.expert_begin.data();
  for (int64_t i = 0; i < T * K; ++i)
    std::memcpy(ws.moe_x.data() + i * E, xn + (ws.expert_rows[i] / K) * E, E * sizeof(float));
  kernels::MatmulJob* jobs = ws.moe_jobs.data();
  int64_t n_jobs = 0;
  for (int32_t e = 0; e < n_expert; ++e) {
    const int32_t r0 = begin[e], n = begin[e + 1] - r0;
    if (n == 0) continue;
    const float* x = ws.moe_x.data() + int64_t{r0} * E;
    jobs[n_jobs++] = {&l.w_gate_exp[e], x, n, ws.moe_gate.data() + int64_t{r0} * F};
    jobs[n_jobs++] = {&l.w_up_exp[e], x, n, ws.moe_up.data() + int64_t{r0} * F};
  }
  if (shared) {
    jobs[n_jobs++] = {&l.w_gate_shexp, xn, T, ws.gate.data()};
    jobs[n_jobs++] = {&l.w_up_shexp, xn, T, ws.up.data()};
  }
  kernels::matmul_jobs(p.k, p.pool, {jobs, static_cast<size_t>(n_jobs)}, ws.scratch.data(), ws.scratch.size());
  kernels::silu_mul(p.k, ws.moe_gate.data(), ws.moe_up.data(), T * K * F);
  if (shared) kernels::silu_mul(p.k, ws.gate.data(), ws.up.data(), T * p.hp.n_ff_shexp);
  n_jobs = 0;
  for (int32_t e = 0; e < n_expert; ++e) {
    const int32_t r0 = begin[e], n = begin[e + 1] - r0;
    if (n > 0) jobs[n_jobs++] = {&l.w_down_exp[e], ws.moe_gate.data() + int64_t{r0} * F, n, ws.moe_y.data() + int64_t{r0} * E};
  }
  if (shared) jobs[n_jobs++] = {&l.w_down_shexp, ws.gate.data(), T, ws.ye.data()};
  kernels::matmul_jobs(p.k, p.pool, {jobs, static_cast<size_t>(n_jobs)}, ws.scratch.data(), ws.scratch.size());
}

}  // namespace

void moe_mlp(Pass& p, int32_t il, const float* xn, float* out) {
  const HParams& hp = p.hp;
  const LayerSpec& s = p.specs[il];
  const LayerWeights& l = p.w.layers[il];
  Workspace& ws = p.ws;
  const int64_t T = p.n_tokens, E = hp.n_embd;
  const int32_t n_expert = hp.n_expert, K = hp.n_expert_used;
  LUMEN_DCHECK(s.moe && static_cast<int32_t>(l.w_gate_exp.size()) == n_expert);
  p.tap("ffn_norm", il, xn, T * E);

  // Router: logits, probabilities, each token's K experts and their weights.
  kernels::matmul(p.k, p.pool, l.ffn_gate_inp, xn, T, ws.router.data(), ws.scratch.data());
  p.tap("ffn_moe_logits", il, ws.router.data(), T * n_expert);
  const Router router{n_expert, K, hp.expert_gating_sigmoid, l.exp_probs_b, hp.expert_weights_norm,
                      hp.expert_weights_scale};
  for (int64_t t = 0; t < T; ++t)
    route_token(router, ws.router.data() + t * n_expert, ws.expert_ids.data() + t * K, ws.expert_w.data() + t * K);

  // Group the T * K (token, slot) pairs by expert: a counting sort into expert_rows.
  int32_t* begin = ws.expert_begin.data();
  std::fill(begin, begin + n_expert + 1, 0);
  for (int64_t i = 0; i < T * K; ++i) ++begin[ws.expert_ids[i] + 1];
  for (int32_t e = 0; e < n_expert; ++e) begin[e + 1] += begin[e];
  // Filling moves each expert's cursor (begin[e]) to its end; begin[e] - count restores it.
  for (int64_t i = 0; i < T * K; ++i) ws.expert_rows[begin[ws.expert_ids[i]]++] = static_cast<int32_t>(i);
  for (int32_t e = n_expert; e > 0; --e) begin[e] = begin[e - 1];
  begin[0] = 0;

  // Each expert with tokens: gather their rows, run the expert once, add back scaled (in
  // expert order, whichever path ran them).
  std::fill(out, out + T * E, 0.0f);
  const bool batched = T * K <= kMoeBatchedPairs;
  if (batched) {
    experts_batched(p, l, s.shared_expert, xn);
    for (int32_t e = 0; e < n_expert && p.tap_fn; ++e) {
      const int32_t r0 = begin[e], n = begin[e + 1] - r0;
      if (n > 0)
        tap_expert_rows(p, il, e, ws.moe_x.data() + int64_t{r0} * E, ws.moe_gate.data() + int64_t{r0} * hp.n_ff_exp, n);
    }
    for (int64_t i = 0; i < T * K; ++i) {
      const int32_t pair = ws.expert_rows[i];
      add_scaled(out + (pair / K) * E, ws.moe_y.data() + i * E, ws.expert_w[pair], E);
    }
  }
  for (int32_t e = 0; e < n_expert && !batched; ++e) {
    const int32_t r0 = begin[e], n = begin[e + 1] - r0;
    if (n == 0) continue;
    for (int32_t i = 0; i < n; ++i)
      std::memcpy(ws.xe.data() + int64_t{i} * E, xn + (ws.expert_rows[r0 + i] / K) * E, E * sizeof(float));
    swiglu(p.k, p.pool, l.w_gate_exp[e], l.w_up_exp[e], l.w_down_exp[e], ws.xe.data(), n, ws.ye.data(),
           ws.gate.data(), ws.up.data(), ws.scratch.data());
    tap_expert_rows(p, il, e, ws.xe.data(), ws.gate.data(), n);  // swiglu left silu(gate) * up in ws.gate
    for (int32_t i = 0; i < n; ++i) {
      const int32_t pair = ws.expert_rows[r0 + i];
      add_scaled(out + (pair / K) * E, ws.ye.data() + int64_t{i} * E, ws.expert_w[pair], E);
    }
  }

  // The shared expert: every token; Qwen2-MoE's scaled by a sigmoid gate of its own.
  if (s.shared_expert) {
    if (!batched)
      swiglu(p.k, p.pool, l.w_gate_shexp, l.w_up_shexp, l.w_down_shexp, xn, T, ws.ye.data(), ws.gate.data(),
             ws.up.data(), ws.scratch.data());
    p.tap("ffn_act_shexp", il, ws.gate.data(), T * hp.n_ff_shexp);  // the input of ffn_down_shexp
    if (l.gate_inp_shexp == nullptr) kernels::add_in_place(p.k, out, ws.ye.data(), T * E);
    for (int64_t t = 0; t < T && l.gate_inp_shexp != nullptr; ++t) {
      float g = 0.0f;
      for (int64_t i = 0; i < E; ++i) g += xn[t * E + i] * l.gate_inp_shexp[i];
      add_scaled(out + t * E, ws.ye.data() + t * E, 1.0f / (1.0f + std::exp(-g)), E);
    }
  }
  p.tap("ffn_moe_out", il, out, T * E);
}

}  // namespace lumen::model
