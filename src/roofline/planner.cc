#include "roofline/planner.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "base/check.h"

namespace lumen::roofline {

std::string_view roof_name(Roof roof) { return roof == Roof::kCompute ? "compute" : "memory"; }

std::string precision_name(double weight_bits, double kv_bits) {
  auto bits = [](double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.2f", v);
    std::string s = buf;
    while (s.back() == '0') s.pop_back();
    if (s.back() == '.') s.pop_back();
    return s;
  };
  return "w" + bits(weight_bits) + "a" + bits(kv_bits);
}

Precision make_precision(double weight_bits, double kv_bits) {
  return Precision{precision_name(weight_bits, kv_bits), weight_bits, kv_bits, 0};
}

std::vector<Precision> standard_precisions() {
  return {make_precision(16, 16), make_precision(8, 16), make_precision(6, 16),
          make_precision(4, 16), make_precision(4, 8)};
}

Workload make_workload(const ModelShape& shape, const ParamCounts& params, const Precision& precision,
                       const Hardware& hw, bool tensor_cores) {
  Workload w;
  w.weight_bytes = precision.weight_bytes > 0
                       ? precision.weight_bytes
                       : static_cast<double>(params.read_per_step()) * precision.weight_bits / 8.0;
  w.kv_bytes_per_token = static_cast<double>(kv_elems_per_token(shape)) * precision.kv_bits / 8.0;
  w.decoder_macs = static_cast<double>(params.decoder - params.mlp_inactive);  // a token's experts only
  if (shape.is_moe()) {
    w.n_expert = shape.n_expert;
    w.n_expert_used = shape.n_expert_used;
    w.expert_bytes = precision.weight_bytes > 0 ? precision.expert_bytes
                                                : static_cast<double>(shape.n_layer * shape.n_expert * 3 * shape.n_embd *
                                                                      shape.n_ff_exp) * precision.weight_bits / 8.0;
  }
  w.lm_head_macs = static_cast<double>(params.lm_head);
  w.attn_macs_per_pair = static_cast<double>(attn_macs_per_pair(shape));
  w.read_bytes_per_s = hw.read_bytes_per_s;
  w.matmul_flop_rate = matmul_flop_rate(hw, precision.weight_bits, tensor_cores);
  w.attn_flop_rate = attention_flop_rate(hw, tensor_cores);
  w.memory_bytes = hw.memory_bytes;
  w.n_layer = shape.n_layer;
  w.n_local_layers = shape.n_local_layers;
  w.window = static_cast<double>(shape.window);
  return w;
}

namespace {

// The share of the layers that slide, and the positions one of them holds at n_ctx.
double local_share(const Workload& w) {
  return w.n_layer > 0 && w.n_local_layers > 0 ? static_cast<double>(w.n_local_layers) / w.n_layer : 0.0;
}

}  // namespace

double Workload::step_weight_bytes(double n_tokens) const {
  if (n_expert <= 0) return weight_bytes;
  const double one = static_cast<double>(n_expert_used) / static_cast<double>(n_expert);
  return weight_bytes + expert_bytes * (expert_share_touched(n_expert, n_expert_used, n_tokens) - one);
}

double Workload::resident_weight_bytes() const {
  if (n_expert <= 0) return weight_bytes;
  return weight_bytes + expert_bytes * (1.0 - static_cast<double>(n_expert_used) / static_cast<double>(n_expert));
}

double Workload::kv_bytes_at(double n_ctx) const {
  const double f = local_share(*this);
  return kv_bytes_per_token * ((1 - f) * n_ctx + f * std::min(n_ctx, window));
}

double Workload::attn_macs_at(double n_ctx) const {
  const double f = local_share(*this);
  return attn_macs_per_pair * ((1 - f) * n_ctx + f * std::min(n_ctx, window));
}

double Workload::attn_macs_prefill(double d, double n) const {
  const double f = local_share(*this);
  const double full = n * d + n * (n + 1) / 2;
  if (f == 0) return attn_macs_per_pair * full;
  const double until = std::clamp(window - d, 0.0, n);  // queries whose context fits the window
  const double local = until * d + until * (until + 1) / 2 + (n - until) * window;
  return attn_macs_per_pair * ((1 - f) * full + f * local);
}

std::optional<int64_t> kv_tokens_that_fit(const Workload& w) {
  const double left = w.memory_bytes - w.resident_weight_bytes();
  if (left < 0) return std::nullopt;
  if (w.kv_bytes_per_token <= 0) return std::nullopt;
  const double f = local_share(w);
  if (f == 0 || left < w.kv_bytes_at(w.window)) return static_cast<int64_t>(std::floor(left / w.kv_bytes_per_token));
  // Past the window only the global layers grow.
  if (f == 1) return kUnboundedTokens;
  const double beyond = (left - w.kv_bytes_at(w.window)) / (w.kv_bytes_per_token * (1 - f));
  return static_cast<int64_t>(std::floor(w.window + beyond));
}

namespace {

StepEstimate finish(const Workload& w, double bytes, double matmul_flops, double attn_flops) {
  LUMEN_DCHECK(w.read_bytes_per_s > 0 && w.matmul_flop_rate > 0 && w.attn_flop_rate > 0);
  StepEstimate s;
  s.bytes = bytes;
  s.flops = matmul_flops + attn_flops;
  s.memory_s = bytes / w.read_bytes_per_s;
  s.compute_s = matmul_flops / w.matmul_flop_rate + attn_flops / w.attn_flop_rate;
  s.binding = s.compute_s >= s.memory_s ? Roof::kCompute : Roof::kMemory;
  s.time_s = std::max(s.memory_s, s.compute_s);
  return s;
}

}  // namespace

StepEstimate estimate_prefill(const Workload& w, int64_t n_prompt) {
  LUMEN_DCHECK(n_prompt >= 1);
  const double n = static_cast<double>(n_prompt);
  const double bytes = w.step_weight_bytes(n) + w.kv_bytes_at(n) + n * w.kv_bytes_per_token;
  const double matmul_flops = 2.0 * (w.decoder_macs * n + w.lm_head_macs);
  // Causal: query i scores i + 1 keys (a local layer at most its window); QK^T and PV.
  const double attn_flops = 2.0 * 2.0 * w.attn_macs_prefill(0, n);
  return finish(w, bytes, matmul_flops, attn_flops);
}

std::optional<int64_t> prefill_knee_tokens(const Workload& w) {
  auto compute_bound = [&](int64_t n) {
    const StepEstimate s = estimate_prefill(w, n);
    return s.compute_s >= s.memory_s;
  };
  // compute - memory is convex in N and negative at N = 0 (the weights must be read),
  // so "compute-bound" is false then true: double, then bisect.
  constexpr int64_t kMax = int64_t{1} << 40;
  int64_t hi = 1;
  while (!compute_bound(hi)) {
    if (hi >= kMax) return std::nullopt;
    hi *= 2;
  }
  int64_t lo = hi / 2;  // not compute-bound (or 0)
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    (compute_bound(mid) ? hi : lo) = mid;
  }
  return hi;
}

StepEstimate estimate_decode_step(const Workload& w, int64_t n_seqs, int64_t n_past, int64_t n_new) {
  LUMEN_DCHECK(n_seqs >= 1 && n_past >= 0 && n_new >= 1);
  const double b = static_cast<double>(n_seqs);
  const double p = static_cast<double>(n_past);
  const double q = static_cast<double>(n_new);
  const double bytes = w.step_weight_bytes(b * q) + b * w.kv_bytes_at(p);
  const double matmul_flops = 2.0 * b * q * (w.decoder_macs + w.lm_head_macs);
  const double attn_flops = 2.0 * b * 2.0 * w.attn_macs_prefill(p, q);
  return finish(w, bytes, matmul_flops, attn_flops);
}

DecodeLine decode_line(const Workload& w) {
  DecodeLine line;
  line.b_ms = w.weight_bytes / w.read_bytes_per_s * 1e3;
  line.w_tokens_per_ms = w.read_bytes_per_s * 1e-3 / w.kv_bytes_per_token;
  if (const double f = local_share(w); f > 0) {
    line.window = w.window;
    line.w2_tokens_per_ms = f < 1 ? line.w_tokens_per_ms / (1 - f) : std::numeric_limits<double>::infinity();
  }
  return line;
}

BatchEstimate estimate_batch(const Workload& w, int64_t n_batch, int64_t n_past) {
  BatchEstimate e;
  e.n_batch = n_batch;
  e.n_past = n_past;
  e.step = estimate_decode_step(w, n_batch, n_past, 1);
  e.tok_s = static_cast<double>(n_batch) / e.step.time_s;
  e.kv_bytes = static_cast<double>(n_batch) * w.kv_bytes_at(static_cast<double>(n_past + 1));
  e.fits = w.resident_weight_bytes() + e.kv_bytes <= w.memory_bytes;
  return e;
}

std::optional<int64_t> decode_batch_knee(const Workload& w, int64_t n_past) {
  // compute - memory is linear in the batch size: one sign change at most.
  auto compute_bound = [&](int64_t b) { return estimate_decode_step(w, b, n_past).binding == Roof::kCompute; };
  constexpr int64_t kMax = int64_t{1} << 24;
  if (!compute_bound(kMax)) return std::nullopt;
  int64_t lo = 0, hi = kMax;
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    (mid >= 1 && compute_bound(mid) ? hi : lo) = mid;
  }
  return hi;
}

double expected_tokens_per_verify(int k, double alpha) {
  LUMEN_DCHECK(k >= 0 && alpha >= 0 && alpha <= 1);
  if (alpha >= 1.0) return k + 1.0;
  return (1.0 - std::pow(alpha, k + 1)) / (1.0 - alpha);
}

SpeculativeEstimate estimate_speculative(int k, double alpha, double c_draft, double c_verify) {
  SpeculativeEstimate e;
  e.k = k;
  e.alpha = alpha;
  e.c_draft = c_draft;
  e.c_verify = c_verify;
  e.tokens_per_verify = expected_tokens_per_verify(k, alpha);
  e.cost = c_draft * k + c_verify;
  e.speedup = e.cost > 0 ? e.tokens_per_verify / e.cost : 0;
  return e;
}

double verify_cost_ratio(const Workload& target, int k, int64_t n_past) {
  return estimate_decode_step(target, 1, n_past, k + 1).time_s /
         estimate_decode_step(target, 1, n_past, 1).time_s;
}

double draft_cost_ratio(const Workload& draft, const Workload& target, int64_t n_past) {
  return estimate_decode_step(draft, 1, n_past, 1).time_s / estimate_decode_step(target, 1, n_past, 1).time_s;
}

}  // namespace lumen::roofline
