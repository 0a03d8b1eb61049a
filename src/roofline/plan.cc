#include "roofline/plan.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include <nlohmann/json.hpp>

#include "base/check.h"

namespace lumen::roofline {

namespace {

PrecisionPlan plan_precision(const Plan& plan, const Precision& precision) {
  PrecisionPlan p;
  p.precision = precision;
  p.workload = make_workload(plan.shape, plan.params, precision, plan.hw, plan.tensor_cores);
  p.kv_tokens = kv_tokens_that_fit(p.workload);
  p.decode = decode_line(p.workload);
  p.prefill = estimate_prefill(p.workload, plan.n_prompt);
  p.knee_tokens = prefill_knee_tokens(p.workload);
  return p;
}

}  // namespace

Plan make_plan(const ModelShape& shape, const ParamCounts& params, const Hardware& hw,
               const PlanOptions& options) {
  LUMEN_CHECK(options.n_prompt >= 1 && !options.batches.empty());
  LUMEN_CHECK(hw.read_bytes_per_s > 0 && hw.flops_fp16 > 0);
  Plan plan;
  plan.shape = shape;
  plan.params = params;
  plan.params_source = "shape";
  plan.hw = hw;
  plan.units = options.units;
  plan.tensor_cores = options.tensor_cores;
  plan.n_prompt = options.n_prompt;
  plan.n_context = options.n_context >= 0 ? options.n_context : options.n_prompt;

  const Precision chosen = options.chosen.value_or(make_precision(16, 16));
  // The chosen pair takes the place of a standard pair of the same name (a file stored at
  // exactly 8 bits per weight replaces the nominal w8a16 with its exact bytes), else it
  // comes last.
  plan.chosen_idx = SIZE_MAX;
  for (const Precision& p : standard_precisions()) {
    if (p.name == chosen.name) {
      plan.chosen_idx = plan.precisions.size();
      plan.precisions.push_back(plan_precision(plan, chosen));
    } else {
      plan.precisions.push_back(plan_precision(plan, p));
    }
  }
  if (plan.chosen_idx == SIZE_MAX) {
    plan.chosen_idx = plan.precisions.size();
    plan.precisions.push_back(plan_precision(plan, chosen));
  }

  const Workload& w = plan.chosen().workload;
  for (int64_t b : options.batches) {
    LUMEN_CHECK(b >= 1);
    plan.batches.push_back(estimate_batch(w, b, plan.n_context));
  }
  plan.batch_knee = decode_batch_knee(w, plan.n_context);

  if (options.speculative) {
    const SpeculativeOptions& so = *options.speculative;
    plan.spec_k = so.k;
    double c_draft = so.c_draft.value_or(0.0);
    if (!so.c_draft && so.draft) {
      const Workload draft = make_workload(*so.draft, count_params(*so.draft), chosen, hw, options.tensor_cores);
      c_draft = draft_cost_ratio(draft, w, plan.n_context);
    }
    const int max_k = std::max(kMaxSpecK, so.k);
    for (int k = 1; k <= max_k; ++k) {
      const double c_verify = so.c_verify.value_or(verify_cost_ratio(w, k, plan.n_context));
      plan.speculative.push_back(estimate_speculative(k, so.alpha, c_draft, c_verify));
    }
  }
  return plan;
}

nlohmann::json plan_to_json(const Plan& plan) {
  using nlohmann::json;
  json j;
  j["model"] = {{"name", plan.shape.name},
                {"hidden", plan.shape.n_embd},
                {"layers", plan.shape.n_layer},
                {"heads", plan.shape.n_head},
                {"kv_heads", plan.shape.n_kv_head},
                {"head_dim", plan.shape.head_dim},
                {"ffn", plan.shape.n_ff},
                {"vocab", plan.shape.n_vocab},
                {"tied", plan.shape.tied_output},
                {"qkv_bias", plan.shape.has_qkv_bias},
                {"gated_mlp", plan.shape.gated_mlp},
                {"experts", plan.shape.n_expert},
                {"experts_used", plan.shape.n_expert_used},
                {"expert_ffn", plan.shape.n_ff_exp},
                {"shared_expert_ffn", plan.shape.n_ff_shexp},
                {"params_from", plan.params_source}};
  if (plan.shape.is_mla())
    j["model"]["mla"] = {{"kv_lora_rank", plan.shape.kv_lora_rank}, {"q_lora_rank", plan.shape.q_lora_rank},
                         {"rope_dims", plan.shape.rope_dims}, {"v_head_dim", plan.shape.head_dim_v},
                         {"dense_leading_layers", plan.shape.n_dense_lead}};
  j["params"] = {{"decoder", plan.params.decoder},
                 {"lm_head", plan.params.lm_head},
                 {"embedding", plan.params.embedding},
                 {"total", plan.params.total},
                 {"attention", plan.params.attention},
                 {"mlp", plan.params.mlp},
                 {"mlp_inactive", plan.params.mlp_inactive},
                 {"norms", plan.params.norms}};
  j["kv_elems_per_token"] = kv_elems_per_token(plan.shape);
  if (plan.shape.n_local_layers > 0)
    j["sliding_window"] = {{"local_layers", plan.shape.n_local_layers},
                           {"global_layers", plan.shape.n_layer - plan.shape.n_local_layers},
                           {"window", plan.shape.window}};

  json capacity = json::object(), prefill = json::object();
  for (const PrecisionPlan& p : plan.precisions) {
    const std::string& name = p.precision.name;
    capacity[name] = !p.kv_tokens ? json("oom") : *p.kv_tokens == kUnboundedTokens ? json("unbounded")
                                                                                   : json(*p.kv_tokens);
    prefill[name] = {{"knee_tokens", p.knee_tokens ? json(*p.knee_tokens) : json(nullptr)},
                     {"prompt_tokens", plan.n_prompt},
                     {"memory_ms", p.prefill.memory_s * 1e3},
                     {"compute_ms", p.prefill.compute_s * 1e3},
                     {"ttft_ms", p.prefill.time_s * 1e3},
                     {"binding", roof_name(p.prefill.binding)}};
  }
  j["capacity"] = capacity;

  // Decode per weight precision, at the chosen KV precision.
  const double kv_bits = plan.chosen().precision.kv_bits;
  json decode = json::object();
  for (double bits : {16.0, 8.0, 4.0}) {
    const Workload w = make_workload(plan.shape, plan.params, make_precision(bits, kv_bits), plan.hw,
                                     plan.tensor_cores);
    const DecodeLine line = decode_line(w);
    decode["w" + std::to_string(static_cast<int>(bits))] = {
        {"B_ms", line.b_ms}, {"W_tokens_per_ms", line.w_tokens_per_ms}, {"kv_bits", kv_bits}};
    if (line.window > 0) {
      decode["w" + std::to_string(static_cast<int>(bits))]["window"] = line.window;
      decode["w" + std::to_string(static_cast<int>(bits))]["W2_tokens_per_ms"] =
          std::isinf(line.w2_tokens_per_ms) ? json("unbounded") : json(line.w2_tokens_per_ms);
    }
  }
  j["decode"] = decode;
  j["prefill"] = prefill;

  const PrecisionPlan& chosen = plan.chosen();
  json batches = json::array();
  for (const BatchEstimate& b : plan.batches)
    batches.push_back({{"batch", b.n_batch},
                       {"context_tokens", b.n_past},
                       {"tokens_per_s", b.step.time_s > 0 ? b.tok_s : 0.0},
                       {"step_ms", b.step.time_s * 1e3},
                       {"kv_bytes", b.kv_bytes},
                       {"fits", b.fits},
                       {"binding", roof_name(b.step.binding)}});
  j["chosen"] = {{"precision", chosen.precision.name},
                 {"weight_bits", chosen.precision.weight_bits},
                 {"kv_bits", chosen.precision.kv_bits},
                 {"weight_bytes", chosen.workload.weight_bytes},
                 {"kv_bytes_per_token", chosen.workload.kv_bytes_per_token},
                 {"batches", batches},
                 {"batch_knee", plan.batch_knee ? json(*plan.batch_knee) : json(nullptr)}};
  if (!plan.speculative.empty()) {
    json rows = json::array();
    for (const SpeculativeEstimate& s : plan.speculative)
      rows.push_back({{"k", s.k}, {"alpha", s.alpha}, {"c_draft", s.c_draft}, {"c_verify", s.c_verify},
                      {"tokens_per_verify", s.tokens_per_verify}, {"speedup", s.speedup}});
    j["speculative"] = {{"k", plan.spec_k}, {"by_k", rows}};
  }

  const double g = unit_scale(plan.units, 3), t = unit_scale(plan.units, 4);
  j["hw"] = {{"name", plan.hw.name},
             {"description", plan.hw.description},
             {"measured", plan.hw.measured},
             {"bandwidth_GB_s", plan.hw.read_bytes_per_s / g},
             {"memory_GB", plan.hw.memory_bytes / g},
             {"fp16_TFLOPS", plan.hw.flops_fp16 / t},
             {"fp16_tensor_TFLOPS", plan.hw.flops_fp16_tensor / t},
             {"int8_TOPS", plan.hw.ops_int8 / t},
             {"tensor_cores", plan.tensor_cores}};
  if (plan.hw.measured) j["hw"]["threads"] = plan.hw.n_threads;
  j["units"] = std::string(units_name(plan.units));
  return j;
}

}  // namespace lumen::roofline
