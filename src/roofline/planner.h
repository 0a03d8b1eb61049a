// The roofline formulas: what one model at one precision costs on one machine.
//
// Everything here is arithmetic on a Workload (base units: bytes, FLOP, seconds), so it
// is exact and testable without hardware. Each estimate takes the larger of two times —
// moving the bytes at the memory bandwidth, doing the FLOPs at the compute rate — and
// says which one binds. They are upper bounds on speed: real kernels reach a fraction.
//
//   prefill of N prompt tokens (one pass, causal attention)
//     bytes  = weights + 2 N kv                      (KV written once, read once)
//     FLOPs  = 2 (decoder N + lm_head + attention(N)),  lm_head for the last token only,
//              attention(N) = 2 a N (N + 1) / 2       (QK^T and PV; a = attn_macs_per_pair)
//
//   Sliding windows: a model with local layers (Workload::n_local_layers of n_layer) counts
//   each group apart wherever context appears: a local layer holds and scores at most
//   `window` positions. "N kv" above is then kv_bytes_at(N) and the attention sums are
//   attn_macs_at / attn_macs_prefill (shape.h); without local layers they reduce to the
//   formulas as written.
//     TTFT   = max(bytes / bandwidth, FLOPs / rate);  knee = smallest N where compute >= memory
//
//   decode, per step: b sequences, each with `n_past` cached tokens, each adds n_new tokens
//     bytes  = weights + b n_past kv
//     FLOPs  = 2 b n_new (decoder + lm_head) + 2 b 2 a (n_new n_past + n_new (n_new + 1) / 2)
//     tok/s  = b n_new / max(bytes / bandwidth, FLOPs / rate)
//
//   latency of the n-th generated token at batch 1:  latency(n) = B + (n - 1) / W
//     B = weights / bandwidth      (ms: every weight read once)
//     W = bandwidth x 1 ms / kv    (tokens of context that add one ms)
//
//   speculative decoding, draft length k, acceptance rate alpha (i.i.d. per token):
//     E[tokens per verify] = (1 - alpha^(k+1)) / (1 - alpha)      (k + 1 when alpha = 1)
//     speedup = E[tokens] / (c_draft k + c_verify)
//     c_draft  = one draft step / one plain target decode step
//     c_verify = one (k+1)-token target verify step / one plain target decode step
//
//            draft d1 d2 d3 d4 (k = 4)      verify [t, d1, d2, d3, d4] in one target step
//            accept d1 d2, reject d3   ->   emit d1 d2 + the target's own token = 3 tokens
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "roofline/hardware.h"
#include "roofline/shape.h"

namespace lumen::roofline {

enum class Roof : uint8_t { kMemory, kCompute };
std::string_view roof_name(Roof roof);  // "memory" | "compute"

// A weight / KV-cache precision pair, "w4a16" = 4-bit weights, 16-bit KV cache.
struct Precision {
  std::string name;
  double weight_bits = 16;
  double kv_bits = 16;
  // When > 0: the exact bytes a one-token step reads (a file's stored tensor types) instead
  // of (decoder + lm_head) x weight_bits / 8, and (MoE) the bytes of all its experts.
  double weight_bytes = 0;
  double expert_bytes = 0;
};
// "w16a16", "w4.5a16" (bits with at most 2 decimals, trailing zeros dropped).
std::string precision_name(double weight_bits, double kv_bits);
Precision make_precision(double weight_bits, double kv_bits);
// w16a16, w8a16, w6a16, w4a16, w4a8: the pairs the capacity table always shows.
std::vector<Precision> standard_precisions();

// The roofline inputs for one model at one precision on one machine.
struct Workload {
  double weight_bytes = 0;        // read per one-token forward step: decoder + lm_head (MoE:
                                  // the experts one token goes through)
  // Mixture of experts: the bytes of every expert, and the share a one-token step reads
  // (used / n_expert); a step of n tokens reads step_weight_bytes(n).
  double expert_bytes = 0;
  int64_t n_expert = 0;
  int64_t n_expert_used = 0;
  double kv_bytes_per_token = 0;  // K and V of one position over all layers
  double decoder_macs = 0;        // multiply-adds per token in the decoder matrices
  double lm_head_macs = 0;        // multiply-adds per token of lm_head
  double attn_macs_per_pair = 0;  // per (query, key) pair for QK^T; PV the same again
  double read_bytes_per_s = 0;    // memory roof
  double matmul_flop_rate = 0;    // compute roof of the weight matmuls
  double attn_flop_rate = 0;      // compute roof of attention
  double memory_bytes = 0;        // weights + KV cache must fit in this
  // Sliding-window layers: of n_layer layers (0: not given, all global), n_local_layers keep
  // and attend over at most `window` positions.
  int64_t n_layer = 0;
  int64_t n_local_layers = 0;
  double window = 0;

  // Weights a step of n_tokens reads: weight_bytes + the experts the other tokens touch
  // (shape.h, expert_share_touched); weight_bytes for a dense model.
  double step_weight_bytes(double n_tokens) const;
  // Weights held in memory: every expert.
  double resident_weight_bytes() const;
  // KV bytes one sequence holds at n_ctx tokens.
  double kv_bytes_at(double n_ctx) const;
  // QK^T multiply-adds of one query at context n_ctx (PV the same again).
  double attn_macs_at(double n_ctx) const;
  // QK^T multiply-adds of n queries after d cached tokens (query i at context d + i).
  double attn_macs_prefill(double n_depth, double n_new) const;
};
Workload make_workload(const ModelShape& shape, const ParamCounts& params, const Precision& precision,
                       const Hardware& hw, bool tensor_cores);

// KV-cache tokens that fit beside the weights: the longest context one sequence can hold,
// floor((memory - weights) / kv per token) without local layers (local layers count at
// most their window); kUnboundedTokens when every layer is local and a full window fits;
// nullopt ("oom") when the weights alone do not fit.
inline constexpr int64_t kUnboundedTokens = INT64_MAX;
std::optional<int64_t> kv_tokens_that_fit(const Workload& w);

struct StepEstimate {
  double bytes = 0;      // memory traffic
  double flops = 0;      // arithmetic
  double memory_s = 0;   // bytes / bandwidth
  double compute_s = 0;  // FLOPs / rate (matmul and attention at their own rates)
  double time_s = 0;     // max of the two
  Roof binding = Roof::kMemory;
  double intensity() const { return bytes > 0 ? flops / bytes : 0; }  // FLOP / byte
  // FLOP/s this step attains at the roof: flops / time_s.
  double attained_flops() const { return time_s > 0 ? flops / time_s : 0; }
};

// Prefill of n_prompt tokens (precondition: n_prompt >= 1).
StepEstimate estimate_prefill(const Workload& w, int64_t n_prompt);
// Smallest prompt length whose prefill is compute-bound (compute >= memory time). The gap
// compute - memory is a convex quadratic in N that is negative at N = 0, so the crossing
// is unique; nullopt only when the model has no attention and the linear terms never cross.
std::optional<int64_t> prefill_knee_tokens(const Workload& w);

// One decode step: n_seqs sequences with n_past cached tokens each, n_new tokens each
// (1 for plain decoding, k + 1 for a speculative verify).
StepEstimate estimate_decode_step(const Workload& w, int64_t n_seqs, int64_t n_past, int64_t n_new = 1);

struct DecodeLine {
  double b_ms = 0;              // latency of a step that reads only the weights
  double w_tokens_per_ms = 0;   // context tokens whose KV reads add one millisecond
  // With local layers the line bends at their window: past it only the global layers'
  // KV grows (W2 tokens per ms; infinite when every layer is local).
  double window = 0;            // 0: a straight line
  double w2_tokens_per_ms = 0;
  // Latency of the n-th token (n >= 1): B + (n - 1) / W, past the window
  // B + window / W + (n - 1 - window) / W2.
  double latency_ms(int64_t n) const {
    const double c = static_cast<double>(n - 1);
    if (window <= 0 || c <= window) return b_ms + c / w_tokens_per_ms;
    return b_ms + window / w_tokens_per_ms + (c - window) / w2_tokens_per_ms;
  }
};
DecodeLine decode_line(const Workload& w);

struct BatchEstimate {
  int64_t n_batch = 0;
  int64_t n_past = 0;
  StepEstimate step;
  double tok_s = 0;        // all sequences together
  double kv_bytes = 0;     // KV cache of the whole batch after the step
  bool fits = true;        // weights + kv_bytes <= memory
};
BatchEstimate estimate_batch(const Workload& w, int64_t n_batch, int64_t n_past);
// Smallest batch at which a decode step at n_past becomes compute-bound; nullopt when
// none up to 2^24 (long contexts: KV reads grow as fast as the FLOPs).
std::optional<int64_t> decode_batch_knee(const Workload& w, int64_t n_past);

// ---- speculative decoding ----

// Precondition: k >= 0, 0 <= alpha <= 1.
double expected_tokens_per_verify(int k, double alpha);

struct SpeculativeEstimate {
  int k = 0;
  double alpha = 0;
  double c_draft = 0;
  double c_verify = 0;
  double tokens_per_verify = 0;  // expected tokens emitted per draft + verify round
  double cost = 0;               // c_draft k + c_verify, in plain target decode steps
  double speedup = 0;            // tokens_per_verify / cost
};
SpeculativeEstimate estimate_speculative(int k, double alpha, double c_draft, double c_verify);
// c_verify from the roofline: a (k+1)-token step over n_past cached tokens, relative to a
// 1-token step. Close to 1 while decode is memory-bound.
double verify_cost_ratio(const Workload& target, int k, int64_t n_past);
// c_draft from the roofline: a draft decode step relative to a target decode step.
double draft_cost_ratio(const Workload& draft, const Workload& target, int64_t n_past);

}  // namespace lumen::roofline
