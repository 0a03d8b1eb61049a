// plan_to_text: the human report of `lumen roofline`.
#include <cstdarg>
#include <cstdio>
#include <string>

#include "roofline/plan.h"

namespace lumen::roofline {

namespace {

#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
void append(std::string& out, const char* fmt, ...) {
  char buf[1024];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, args);
  va_end(args);
  out += buf;
}

std::string tok_s(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, v >= 100 ? "%.0f" : v >= 10 ? "%.1f" : "%.2f", v);
  return buf;
}

void append_header(std::string& out, const Plan& plan) {
  const Units u = plan.units;
  const ModelShape& s = plan.shape;
  const Hardware& hw = plan.hw;
  append(out, "lumen roofline: %s on %s\n", s.name.c_str(), hw.name.c_str());
  append(out, "units      %s\n", units_legend(u).c_str());
  append(out, "hardware   %s\n", hw.description.c_str());
  append(out, "           read %s | %s %s%s | int8 %s | memory %s\n",
         format_bandwidth(hw.read_bytes_per_s, u).c_str(), hw.measured ? "f32 FMA" : "fp16",
         format_rate(hw.flops_fp16, u).c_str(),
         hw.flops_fp16_tensor != hw.flops_fp16
             ? (" (tensor cores " + format_rate(hw.flops_fp16_tensor, u) + ")").c_str()
             : "",
         format_rate(hw.ops_int8, u, "OP").c_str(), format_bytes(hw.memory_bytes, u).c_str());
  if (hw.bandwidth_disturbed)
    append(out, "           (no bandwidth pass ran undisturbed: the machine is busy, the bandwidth is a lower bound)\n");
  const Workload& w = plan.chosen().workload;
  append(out, "           compute roof %s for %s weights%s; ridge at %.1f FLOP/byte\n",
         format_rate(w.matmul_flop_rate, u).c_str(), plan.chosen().precision.name.c_str(),
         hw.measured ? (hw.int8_for_quantized ? " (int8 dot products for quantized weights, f32 FMA otherwise)" : "")
                     : (plan.tensor_cores ? " (tensor cores)" : " (no tensor cores; --tensor-cores to use them)"),
         w.matmul_flop_rate / w.read_bytes_per_s);
  const char* attn = s.is_mla() ? "MLA" : s.n_kv_head == s.n_head ? "MHA" : s.n_kv_head == 1 ? "MQA" : "GQA";
  append(out, "model      hidden %lld | %lld layers | %lld heads, %lld KV heads (%s), head dim %lld | ffn %lld%s | "
              "vocab %lld, lm_head %s%s\n",
         static_cast<long long>(s.n_embd), static_cast<long long>(s.n_layer), static_cast<long long>(s.n_head),
         static_cast<long long>(s.n_kv_head), attn, static_cast<long long>(s.head_dim),
         static_cast<long long>(s.n_ff), s.gated_mlp ? " (gated)" : "", static_cast<long long>(s.n_vocab),
         s.tied_output ? "tied to the embeddings" : "untied", s.has_qkv_bias ? " | q/k/v bias" : "");
  if (s.is_moe())
    append(out, "           mixture of experts: %lld experts of ffn %lld per layer, %lld per token%s\n",
           static_cast<long long>(s.n_expert), static_cast<long long>(s.n_ff_exp),
           static_cast<long long>(s.n_expert_used),
           s.n_ff_shexp > 0 ? (" + a shared expert of ffn " + std::to_string(s.n_ff_shexp)).c_str() : "");
}

void append_params(std::string& out, const Plan& plan) {
  const Units u = plan.units;
  const ParamCounts& c = plan.params;
  if (plan.params_source == "shape") {
    const LayerParams l = layer_params(plan.shape);
    append(out, "params     per layer: attention %s (q %s, k %s, v %s, bias %s, o %s), MLP %s (%s%s, down %s)\n",
           format_count(static_cast<double>(l.attention()), u).c_str(),
           format_count(static_cast<double>(l.attn_q), u).c_str(), format_count(static_cast<double>(l.attn_k), u).c_str(),
           format_count(static_cast<double>(l.attn_v), u).c_str(),
           format_count(static_cast<double>(l.attn_qkv_bias), u).c_str(),
           format_count(static_cast<double>(l.attn_o), u).c_str(), format_count(static_cast<double>(l.mlp()), u).c_str(),
           l.mlp_gate ? ("gate " + format_count(static_cast<double>(l.mlp_gate), u) + ", ").c_str() : "",
           ("up " + format_count(static_cast<double>(l.mlp_up), u)).c_str(),
           format_count(static_cast<double>(l.mlp_down), u).c_str());
  } else {
    append(out, "params     from the file's tensors: attention %s, MLP %s%s over %lld layers\n",
           format_count(static_cast<double>(c.attention), u).c_str(), format_count(static_cast<double>(c.mlp), u).c_str(),
           c.decoder_other ? (", other " + format_count(static_cast<double>(c.decoder_other), u)).c_str() : "",
           static_cast<long long>(plan.shape.n_layer));
  }
  append(out, "           decoder %s (%s) | lm_head %s (%s, read every step%s) | embedding %s (one row per token) | "
              "norms %s | total %s (%s)\n",
         format_count_at(static_cast<double>(c.decoder), u, 3, 2).c_str(), format_grouped(c.decoder).c_str(),
         format_count_at(static_cast<double>(c.lm_head), u, 3, 2).c_str(), format_grouped(c.lm_head).c_str(),
         plan.shape.tied_output ? ", tied" : "", format_count_at(static_cast<double>(c.embedding), u, 3, 2).c_str(),
         format_count(static_cast<double>(c.norms), u).c_str(), format_count_at(static_cast<double>(c.total), u, 3, 2).c_str(),
         format_grouped(c.total).c_str());
  if (c.mlp_inactive > 0)
    append(out, "           active per token: decoder %s of %s (the experts a token does not go through are not "
                "read); a step of many tokens reads more of them\n",
           format_count_at(static_cast<double>(c.decoder - c.mlp_inactive), u, 3, 2).c_str(),
           format_count_at(static_cast<double>(c.decoder), u, 3, 2).c_str());
  const int64_t kv = kv_elems_per_token(plan.shape);
  if (plan.shape.is_mla()) {
    append(out, "kv cache   %s elements per token (%s) = %lld layers x (latent %lld + rope key %lld): latent attention\n",
           format_grouped(kv).c_str(), format_count_at(static_cast<double>(kv), u, 2).c_str(),
           static_cast<long long>(plan.shape.n_layer), static_cast<long long>(plan.shape.kv_lora_rank),
           static_cast<long long>(plan.shape.rope_dims));
  } else {
    append(out, "kv cache   %s elements per token (%s) = %lld layers x 2 x %lld KV heads x %lld\n",
           format_grouped(kv).c_str(), format_count_at(static_cast<double>(kv), u, 2).c_str(),
           static_cast<long long>(plan.shape.n_layer), static_cast<long long>(plan.shape.n_kv_head),
           static_cast<long long>(plan.shape.head_dim));
  }
  if (plan.shape.n_local_layers > 0) {
    const int64_t n_global = plan.shape.n_layer - plan.shape.n_local_layers;
    append(out, "           %lld local layers keep only the last %s tokens (sliding window), %lld global layers all "
                "of them: past the window a token adds %s elements\n",
           static_cast<long long>(plan.shape.n_local_layers), format_grouped(plan.shape.window).c_str(),
           static_cast<long long>(n_global), format_grouped(kv / plan.shape.n_layer * n_global).c_str());
  }
  append(out, "\n");
}

void append_precisions(std::string& out, const Plan& plan) {
  const Units u = plan.units;
  append(out, "%-10s %-11s %-11s %-15s %-10s %-11s %-12s | prefill %-6lld %-10s %-10s %-10s %s\n", "precision",
         "weights", "KV/token", "KV tokens fit", "decode B", "W (tok/ms)", "knee (tok)",
         static_cast<long long>(plan.n_prompt), "memory", "compute", "TTFT", "bound");
  for (size_t i = 0; i < plan.precisions.size(); ++i) {
    const PrecisionPlan& p = plan.precisions[i];
    const std::string name = p.precision.name + (i == plan.chosen_idx ? "*" : "");
    const std::string fit = !p.kv_tokens                       ? "oom"
                            : *p.kv_tokens == kUnboundedTokens ? "unbounded"
                                                               : format_grouped(*p.kv_tokens);
    const std::string knee = p.knee_tokens ? format_grouped(*p.knee_tokens) : "never";
    append(out, "%-10s %-11s %-11s %-15s %-10s %-11.0f %-12s |                %-10s %-10s %-10s %s\n", name.c_str(),
           format_bytes(p.workload.weight_bytes, u).c_str(), format_bytes(p.workload.kv_bytes_per_token, u).c_str(),
           fit.c_str(), format_ms(p.decode.b_ms).c_str(), p.decode.w_tokens_per_ms, knee.c_str(),
           format_ms(p.prefill.memory_s * 1e3).c_str(), format_ms(p.prefill.compute_s * 1e3).c_str(),
           format_ms(p.prefill.time_s * 1e3).c_str(), std::string(roof_name(p.prefill.binding)).c_str());
  }
  append(out, "(* = chosen; weights = decoder + lm_head %sat the weight bits; decode latency(n) = B + (n - 1) / W)\n\n",
         plan.shape.is_moe() ? "one token reads (its experts; memory holds all of them) " : "");
}

void append_batches(std::string& out, const Plan& plan) {
  const Units u = plan.units;
  const PrecisionPlan& p = plan.chosen();
  append(out, "decode at %s, %lld cached tokens per sequence:\n", p.precision.name.c_str(),
         static_cast<long long>(plan.n_context));
  append(out, "  %-7s %-12s %-14s %-11s %-12s %-9s %s\n", "batch", "tokens/s", "per sequence", "step",
         "KV cache", "bound", "");
  for (const BatchEstimate& b : plan.batches) {
    append(out, "  %-7lld %-12s %-14s %-11s %-12s %-9s %s\n", static_cast<long long>(b.n_batch),
           tok_s(b.tok_s).c_str(), tok_s(b.tok_s / static_cast<double>(b.n_batch)).c_str(),
           format_ms(b.step.time_s * 1e3).c_str(), format_bytes(b.kv_bytes, u).c_str(),
           std::string(roof_name(b.step.binding)).c_str(), b.fits ? "" : "oom: weights + KV exceed memory");
  }
  if (plan.batch_knee)
    append(out, "  decode turns compute-bound from batch %s at this context.\n\n", format_grouped(*plan.batch_knee).c_str());
  else
    append(out, "  decode stays memory-bound at any batch at this context (KV reads grow with the FLOPs).\n\n");
}

void append_speculative(std::string& out, const Plan& plan) {
  if (plan.speculative.empty()) return;
  const SpeculativeEstimate& asked = plan.speculative[static_cast<size_t>(plan.spec_k - 1)];
  append(out, "speculative decoding, acceptance %.2f, draft cost %.3f of a target step:\n", asked.alpha, asked.c_draft);
  append(out, "  %-4s %-17s %-10s %s\n", "k", "tokens / verify", "c_verify", "speedup");
  const SpeculativeEstimate* best = &plan.speculative[0];
  for (const SpeculativeEstimate& s : plan.speculative) {
    if (s.speedup > best->speedup) best = &s;
    append(out, "  %-4d %-17.3f %-10.3f %.2fx%s\n", s.k, s.tokens_per_verify, s.c_verify, s.speedup,
           s.k == plan.spec_k ? "  <- asked" : "");
  }
  append(out, "  best: k = %d, %.2fx over plain decoding\n\n", best->k, best->speedup);
}

void append_summary(std::string& out, const Plan& plan) {
  const PrecisionPlan& p = plan.chosen();
  const BatchEstimate& first = plan.batches.front();
  append(out, "which roof binds (%s):\n", p.precision.name.c_str());
  append(out, "  decode, batch %lld, %lld cached tokens: %s-bound, %s per step, %s tokens/s\n",
         static_cast<long long>(first.n_batch), static_cast<long long>(plan.n_context),
         std::string(roof_name(first.step.binding)).c_str(), format_ms(first.step.time_s * 1e3).c_str(),
         tok_s(first.tok_s).c_str());
  append(out, "  prefill, %lld tokens: %s-bound, TTFT %s (%s tokens/s)", static_cast<long long>(plan.n_prompt),
         std::string(roof_name(p.prefill.binding)).c_str(), format_ms(p.prefill.time_s * 1e3).c_str(),
         tok_s(static_cast<double>(plan.n_prompt) / p.prefill.time_s).c_str());
  if (p.knee_tokens)
    append(out, "; prompts of %s tokens and more are compute-bound\n", format_grouped(*p.knee_tokens).c_str());
  else
    append(out, "\n");
  if (!p.kv_tokens)
    append(out, "  memory: the weights alone (%s) do not fit in %s\n", format_bytes(p.workload.weight_bytes, plan.units).c_str(),
           format_bytes(plan.hw.memory_bytes, plan.units).c_str());
  else
    append(out, "  memory: %s KV tokens fit beside the weights\n", format_grouped(*p.kv_tokens).c_str());
}

}  // namespace

std::string plan_to_text(const Plan& plan) {
  std::string out;
  append_header(out, plan);
  append_params(out, plan);
  append_precisions(out, plan);
  append_batches(out, plan);
  append_speculative(out, plan);
  append_summary(out, plan);
  return out;
}

}  // namespace lumen::roofline
