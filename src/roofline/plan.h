// A capacity plan: one model on one machine at the standard precision pairs plus the one
// the user chose, with prefill, decode, batch and speculative estimates — the data behind
// `lumen roofline`'s table, --json and --plot. Plain data; building it does no I/O.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "roofline/hardware.h"
#include "roofline/planner.h"
#include "roofline/shape.h"
#include "roofline/units.h"

namespace lumen::roofline {

struct SpeculativeOptions {
  int k = 4;                        // draft length to report (rows for 1..kMaxK are shown too)
  double alpha = 0.7;               // acceptance rate per drafted token
  std::optional<double> c_draft;    // draft step / target step; default from `draft`
  std::optional<double> c_verify;   // (k+1)-token verify / target step; default: roofline
  std::optional<ModelShape> draft;  // draft model shape (same precision as the target)
};

struct PlanOptions {
  std::optional<Precision> chosen;  // default w16a16
  int64_t n_prompt = 512;           // prefill length for TTFT
  int64_t n_context = -1;           // cached tokens for the decode batch table; -1: n_prompt
  std::vector<int64_t> batches = {1, 8, 32};
  Units units = Units::kSi;
  bool tensor_cores = false;        // use the fp16 tensor-core rate as the compute roof
  std::optional<SpeculativeOptions> speculative;
};

struct PrecisionPlan {
  Precision precision;
  Workload workload;
  std::optional<int64_t> kv_tokens;     // capacity; nullopt = the weights alone do not fit
  DecodeLine decode;
  StepEstimate prefill;                 // at n_prompt
  std::optional<int64_t> knee_tokens;   // prefill becomes compute-bound from here
};

struct Plan {
  ModelShape shape;
  ParamCounts params;
  std::string params_source;            // "shape" or "file tensors"
  Hardware hw;
  Units units = Units::kSi;
  bool tensor_cores = false;
  int64_t n_prompt = 0;
  int64_t n_context = 0;
  std::vector<PrecisionPlan> precisions;  // standard pairs, then the chosen one if new
  size_t chosen_idx = 0;
  std::vector<BatchEstimate> batches;     // chosen precision, n_context cached tokens each
  std::optional<int64_t> batch_knee;      // decode becomes compute-bound from this batch
  std::vector<SpeculativeEstimate> speculative;  // k = 1..kMaxSpecK (empty when not asked)
  int spec_k = 0;                         // the k the user asked about

  const PrecisionPlan& chosen() const { return precisions[chosen_idx]; }
};

inline constexpr int kMaxSpecK = 8;

// Preconditions: shape validated, hw rates > 0, n_prompt >= 1, batches non-empty and >= 1.
Plan make_plan(const ModelShape& shape, const ParamCounts& params, const Hardware& hw,
               const PlanOptions& options);

// The --json object (schema in the issue; extra keys are additions, never renames):
//   params {decoder, lm_head, embedding, total}, kv_elems_per_token,
//   capacity {w16a16 ...: tokens | "oom"}, decode {w16, w8, w4: {B_ms, W_tokens_per_ms}},
//   prefill {w16a16 ...: {knee_tokens, memory_ms, compute_ms, ttft_ms}}, hw, units
nlohmann::json plan_to_json(const Plan& plan);

// The human report: shape, parameters, one row per precision, the batch table, and which
// roof binds where.
std::string plan_to_text(const Plan& plan);

}  // namespace lumen::roofline
