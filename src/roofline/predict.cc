#include "roofline/predict.h"

#include <algorithm>
#include <cmath>

#include "base/check.h"
#include "roofline/peak_flops.h"

namespace lumen::roofline {

MachineRates measure_machine_rates(ThreadPool& pool, size_t membw_bytes, bool huge_pages) {
  MachineRates r;
  r.read_bytes_per_s = measure_read_bandwidth_detailed(pool, membw_bytes, huge_pages).best_bytes_per_s;
  const PeakRates peak = measure_peak_rates(pool);
  r.flops_f32 = peak.flops_f32;
  r.ops_int8 = peak.ops_int8;
  return r;
}

namespace {

struct StepTimes {
  double memory_s = 0;
  double compute_s = 0;
  double bytes = 0;
};

// Seconds of matmul arithmetic for n_tokens tokens through the decoder (+ lm_head for
// n_logits of them), each matrix at the rate of its stored type.
double matmul_seconds(const FileWeights& w, const MachineRates& r, double n_tokens, double n_logits) {
  const double int8_s = 2.0 * static_cast<double>(w.decoder_macs_int8) * n_tokens / r.ops_int8;
  const double f32_s = 2.0 * static_cast<double>(w.decoder_macs_float) * n_tokens / r.flops_f32;
  const double lm_rate = w.lm_head_int8 ? r.ops_int8 : r.flops_f32;
  const double lm_s = 2.0 * static_cast<double>(w.params.lm_head) * n_logits / lm_rate;
  return int8_s + f32_s + lm_s;
}

// Every byte of every matrix and norm as stored, plus one embedding row (already counted
// in the matrices when lm_head is the tied embedding).
double weight_bytes_per_token(const ModelShape& shape, const FileWeights& w) {
  return static_cast<double>(w.read_per_step_bytes() + w.norm_bytes +
                             (shape.tied_output ? 0 : w.embedding_row_bytes));
}

// One prefill pass of n tokens after d cached ones: reads the weights and the cached and
// new KV (local layers: their window), writes the new KV; computes the decoder for every
// token, lm_head for the last.
StepTimes prefill_times(const ModelShape& shape, const FileWeights& w, const MachineRates& r,
                        double weight_bytes, double kv_bytes_per_elem, int64_t n_prompt, int64_t n_depth) {
  const double n = static_cast<double>(n_prompt);
  const double d = static_cast<double>(n_depth);
  StepTimes t;
  const double kv_elems = kv_elems_at(shape, d + n) + n * static_cast<double>(kv_elems_per_token(shape));
  t.bytes = weight_bytes + kv_elems * kv_bytes_per_elem;  // read depth + prompt, write prompt
  t.memory_s = t.bytes / r.read_bytes_per_s;
  t.compute_s = matmul_seconds(w, r, n, 1) + 2.0 * 2.0 * attn_macs_prefill(shape, d, n) / r.flops_f32;
  return t;
}

}  // namespace

Prediction predict_lumen(const ModelShape& shape, const FileWeights& w, const MachineRates& r,
                         const PredictOptions& o) {
  LUMEN_CHECK(o.n_prompt >= 1 && o.n_gen >= 1 && o.n_depth >= 0);
  LUMEN_CHECK(r.read_bytes_per_s > 0 && r.flops_f32 > 0 && r.ops_int8 > 0);
  Prediction p;
  p.weight_bytes_per_token = weight_bytes_per_token(shape, w);
  p.kv_bytes_per_token = static_cast<double>(kv_elems_per_token(shape)) * o.kv_bytes_per_elem;

  // tg: one token at a time, the context growing from n_depth. A step is two phases that
  // run one after the other, each at its own roof: the matrices (the weights read once,
  // multiply-adds at the int8 or f32 rate) and attention (the KV cache read once, Q.K and
  // P.V at the f32 rate). A step's time is the sum of the two phases' times, not the max
  // of its totals: at long context attention's arithmetic can bind while the weights'
  // read still does, and neither hides the other. The binding roof is the one that bound
  // for more of the time.
  const double matmul_s = matmul_seconds(w, r, 1, 1);
  const double weights_mem_s = p.weight_bytes_per_token / r.read_bytes_per_s;
  double mem_bound_s = 0, comp_bound_s = 0, bytes = 0;
  for (int64_t i = 0; i < o.n_gen; ++i) {
    const double n_ctx = static_cast<double>(o.n_depth + i) + 1;  // past + the new token
    const double kv_bytes = kv_elems_at(shape, n_ctx) * o.kv_bytes_per_elem;  // read past, write new
    const double kv_mem_s = kv_bytes / r.read_bytes_per_s;
    const double attn_s = 2.0 * 2.0 * attn_macs_at(shape, n_ctx) / r.flops_f32;
    (matmul_s > weights_mem_s ? comp_bound_s : mem_bound_s) += std::max(weights_mem_s, matmul_s);
    (attn_s > kv_mem_s ? comp_bound_s : mem_bound_s) += std::max(kv_mem_s, attn_s);
    bytes += p.weight_bytes_per_token + kv_bytes;
  }
  const double time_s = mem_bound_s + comp_bound_s;
  p.tg_ms = time_s * 1e3;
  p.tg_tok_s = static_cast<double>(o.n_gen) / time_s;
  p.tg_bytes_per_s = bytes / time_s;
  p.binding_roof = comp_bound_s > mem_bound_s ? "compute" : "memory";

  // pp: the whole prompt in one pass over the weights, after n_depth cached tokens.
  // A prompt's tokens together touch more experts than one token (shape.h).
  const double pp_weight_bytes =
      p.weight_bytes_per_token +
      static_cast<double>(w.expert_bytes) *
          (1.0 - std::pow(1.0 - w.expert_share, static_cast<double>(o.n_prompt)) - w.expert_share);
  const StepTimes pp = prefill_times(shape, w, r, pp_weight_bytes, o.kv_bytes_per_elem, o.n_prompt, o.n_depth);
  p.pp_ms = std::max(pp.memory_s, pp.compute_s) * 1e3;
  p.pp_tok_s = static_cast<double>(o.n_prompt) / std::max(pp.memory_s, pp.compute_s);
  p.pp_binding_roof = pp.compute_s > pp.memory_s ? "compute" : "memory";
  return p;
}

int64_t prefill_knee_tokens(const ModelShape& shape, const FileWeights& w, const MachineRates& r,
                            double kv_bytes_per_elem) {
  LUMEN_CHECK(r.read_bytes_per_s > 0 && r.flops_f32 > 0 && r.ops_int8 > 0);
  const double weight_bytes = weight_bytes_per_token(shape, w);
  constexpr int64_t kCap = 65536;
  // compute - memory grows with n (quadratically through attention), so the first n where
  // it is >= 0 is found by doubling, then bisection.
  auto compute_bound = [&](int64_t n) {
    const StepTimes t = prefill_times(shape, w, r, weight_bytes, kv_bytes_per_elem, n, 0);
    return t.compute_s >= t.memory_s;
  };
  if (compute_bound(1)) return 1;
  int64_t lo = 1, hi = 2;  // lo is memory-bound
  while (hi < kCap && !compute_bound(hi)) {
    lo = hi;
    hi *= 2;
  }
  if (hi >= kCap) return kCap;
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    (compute_bound(mid) ? hi : lo) = mid;
  }
  return hi;
}

Result<int64_t> prefill_knee_tokens(const gguf::ModelFile& file, const MachineRates& rates,
                                    double kv_bytes_per_elem) {
  LUMEN_ASSIGN_OR_RETURN(ModelShape shape, shape_from_model_file(file));
  LUMEN_ASSIGN_OR_RETURN(FileWeights weights, count_file_weights(file));
  return prefill_knee_tokens(shape, weights, rates, kv_bytes_per_elem);
}

Result<Prediction> predict_lumen(const gguf::ModelFile& file, const MachineRates& rates,
                                 const PredictOptions& options) {
  LUMEN_ASSIGN_OR_RETURN(ModelShape shape, shape_from_model_file(file));
  LUMEN_ASSIGN_OR_RETURN(FileWeights weights, count_file_weights(file));
  return predict_lumen(shape, weights, rates, options);
}

}  // namespace lumen::roofline
