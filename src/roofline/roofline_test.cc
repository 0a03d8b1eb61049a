// Roofline planner: figures recomputed by hand, and the formulas' shape (monotone knees,
// oom, units).
#include <gtest/gtest.h>

#include <cmath>

#include "roofline/hardware.h"
#include "roofline/planner.h"
#include "roofline/shape.h"
#include "roofline/units.h"

namespace lumen::roofline {
namespace {

ModelShape preset(const char* name) {
  Result<ModelShape> s = model_preset(name);
  EXPECT_TRUE(s.ok()) << s.message();
  return *s;
}

Hardware hw(const char* name, Units units) {
  Result<Hardware> h = hardware_preset(name, units);
  EXPECT_TRUE(h.ok()) << h.message();
  return *h;
}

// Qwen1.5-0.5B: hidden 1024, 24 layers, 16 heads of 64 (MHA), ffn 2816, vocab 151936,
// q/k/v bias, untied lm_head.
//   attention per layer: q, k, v, o = 4 x 1024 x 1024 = 4,194,304; bias 3 x 1024 = 3,072
//   MLP per layer:       3 x 1024 x 2816 = 8,650,752
//   layer = 12,848,128; decoder = 24 x 12,848,128 = 308,355,072 = 0.287 x 2^30 -> "0.29 B"
//   lm_head = 151936 x 1024 = 155,582,464 = 0.1449 x 2^30 -> "0.14 B"
//   KV elements per token = 24 x 2 x 16 x 64 = 49,152 = 0.046875 x 2^20 -> "0.046875 M"
TEST(RooflineParams, Qwen15HalfBByHand) {
  const ModelShape s = preset("qwen1.5-0.5b");
  const LayerParams l = layer_params(s);
  EXPECT_EQ(l.attn_q, 1024 * 1024);
  EXPECT_EQ(l.attn_k, 1024 * 1024);
  EXPECT_EQ(l.attn_qkv_bias, 3 * 1024);
  EXPECT_EQ(l.attention(), 4'197'376);
  EXPECT_EQ(l.mlp(), 8'650'752);
  const ParamCounts c = count_params(s);
  EXPECT_EQ(c.decoder, 308'355'072);
  EXPECT_EQ(c.lm_head, 155'582'464);
  EXPECT_EQ(c.embedding, 155'582'464);
  EXPECT_EQ(c.norms, (2 * 24 + 1) * 1024);
  EXPECT_EQ(c.total, c.decoder + c.norms + 2 * c.lm_head);  // untied: both matrices stored
  EXPECT_EQ(kv_elems_per_token(s), 49'152);

  EXPECT_EQ(format_count_at(static_cast<double>(c.decoder), Units::kBinary, 3, 2), "0.29 B");
  EXPECT_EQ(format_count_at(static_cast<double>(c.lm_head), Units::kBinary, 3, 2), "0.14 B");
  EXPECT_EQ(format_count_at(static_cast<double>(kv_elems_per_token(s)), Units::kBinary, 2), "0.046875 M");
  // The same in SI is a different figure: the convention matters.
  EXPECT_EQ(format_count_at(static_cast<double>(c.decoder), Units::kSi, 3, 2), "0.31 B");
}

// 24 GB binary = 25,769,803,776 bytes. Weights at 16 bits: (308,355,072 + 155,582,464) x 2
// = 927,875,072 bytes. KV per token at 16 bits: 49,152 x 2 = 98,304 bytes.
// (25,769,803,776 - 927,875,072) / 98,304 = 252,705.17 -> 252,705 tokens.
TEST(RooflineCapacity, Qwen15HalfBOn24GBBinary) {
  const ModelShape s = preset("qwen1.5-0.5b");
  const Workload w = make_workload(s, count_params(s), make_precision(16, 16), hw("rtx4090", Units::kBinary), false);
  EXPECT_DOUBLE_EQ(w.memory_bytes, 25'769'803'776.0);
  EXPECT_DOUBLE_EQ(w.weight_bytes, 927'875'072.0);
  EXPECT_DOUBLE_EQ(w.kv_bytes_per_token, 98'304.0);
  ASSERT_TRUE(kv_tokens_that_fit(w).has_value());
  EXPECT_EQ(*kv_tokens_that_fit(w), 252'705);
  // In SI the card has 24e9 bytes: fewer tokens.
  const Workload w_si = make_workload(s, count_params(s), make_precision(16, 16), hw("rtx4090", Units::kSi), false);
  EXPECT_EQ(*kv_tokens_that_fit(w_si), static_cast<int64_t>((24e9 - 927'875'072.0) / 98'304.0));
}

TEST(RooflineCapacity, OomWhenWeightsAloneDoNotFit) {
  const ModelShape s = preset("qwen1.5-72b");
  const Hardware gpu = hw("rtx4090", Units::kBinary);
  // 72B x 2 bytes is far above 24 GB; at 4 bits (~36 GB) still above.
  for (const Precision& p : {make_precision(16, 16), make_precision(4, 16)})
    EXPECT_FALSE(kv_tokens_that_fit(make_workload(s, count_params(s), p, gpu, false)).has_value()) << p.name;
  // The 32B at 4 bits (~16 GB of weights) fits a 24 GB card, at 16 bits (~60 GB) it does not.
  const ModelShape s32 = preset("qwen1.5-32b");
  EXPECT_TRUE(kv_tokens_that_fit(make_workload(s32, count_params(s32), make_precision(4, 16), gpu, false)).has_value());
  EXPECT_FALSE(kv_tokens_that_fit(make_workload(s32, count_params(s32), make_precision(16, 16), gpu, false)).has_value());
}

TEST(RooflineCapacity, PrecisionPairsOrderCapacity) {
  const ModelShape s = preset("qwen1.5-7b");
  const Hardware gpu = hw("a100-80g", Units::kSi);
  int64_t last = -1;
  for (const Precision& p : standard_precisions()) {  // w16a16 ... w4a8: less memory each
    const auto fit = kv_tokens_that_fit(make_workload(s, count_params(s), p, gpu, false));
    ASSERT_TRUE(fit.has_value()) << p.name;
    EXPECT_GT(*fit, last) << p.name;
    last = *fit;
  }
}

TEST(RooflineUnits, ConversionAndParsing) {
  EXPECT_DOUBLE_EQ(unit_scale(Units::kBinary, 3), 1073741824.0);
  EXPECT_DOUBLE_EQ(unit_scale(Units::kSi, 3), 1e9);
  EXPECT_DOUBLE_EQ(unit_scale(Units::kBinary, 0), 1.0);
  // A "1008 GB/s" card moves 1008 x 2^30 bytes/s in binary, 1008e9 in SI.
  EXPECT_DOUBLE_EQ(hw("rtx4090", Units::kBinary).read_bytes_per_s, 1008.0 * 1073741824.0);
  EXPECT_DOUBLE_EQ(hw("rtx4090", Units::kSi).read_bytes_per_s, 1008e9);
  EXPECT_DOUBLE_EQ(hw("rtx4090", Units::kSi).flops_fp16, 82.58e12);
  EXPECT_EQ(format_bandwidth(1008.0 * 1073741824.0, Units::kBinary), "1008.00 GiB/s");
  EXPECT_EQ(format_bandwidth(1008e9, Units::kSi), "1008.00 GB/s");
  EXPECT_EQ(format_bytes(1.5 * 1073741824.0, Units::kBinary), "1.50 GiB");
  EXPECT_EQ(format_bytes(512, Units::kSi), "512 B");
  EXPECT_EQ(format_rate(82.58e12, Units::kSi), "82.58 TFLOP/s");
  EXPECT_EQ(format_count(49152, Units::kBinary), "48.00 K");
  EXPECT_EQ(format_count(7, Units::kSi), "7");
  EXPECT_EQ(format_grouped(252705), "252,705");
  EXPECT_EQ(format_grouped(-1234567), "-1,234,567");
  ASSERT_TRUE(parse_units("binary").ok());
  EXPECT_EQ(*parse_units("si"), Units::kSi);
  Result<Units> bad = parse_units("metric");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("--units"), std::string::npos);
  EXPECT_NE(bad.message().find("metric"), std::string::npos);
}

TEST(RooflinePrefill, MatchesTheFormulaByHand) {
  const ModelShape s = preset("qwen1.5-0.5b");
  const ParamCounts c = count_params(s);
  const Hardware gpu = hw("rtx4090", Units::kSi);
  const Workload w = make_workload(s, c, make_precision(16, 16), gpu, false);
  const int64_t n = 1000;
  const StepEstimate e = estimate_prefill(w, n);
  const double bytes = 927'875'072.0 + 2.0 * n * 98'304.0;
  // attention MACs per (query, key) pair: 24 layers x 16 heads x 64 = 24,576
  const double flops = 2.0 * (308'355'072.0 * n + 155'582'464.0) + 2.0 * 2.0 * 24'576.0 * n * (n + 1) / 2.0;
  EXPECT_DOUBLE_EQ(e.bytes, bytes);
  EXPECT_DOUBLE_EQ(e.flops, flops);
  EXPECT_DOUBLE_EQ(e.memory_s, bytes / 1008e9);
  EXPECT_NEAR(e.compute_s, flops / 82.58e12, 1e-15);
  EXPECT_EQ(e.binding, Roof::kCompute);
  EXPECT_DOUBLE_EQ(e.time_s, std::max(e.memory_s, e.compute_s));
}

TEST(RooflinePrefill, KneeIsTheCrossing) {
  const ModelShape s = preset("qwen1.5-7b");
  const Hardware gpu = hw("rtx4090", Units::kSi);
  std::optional<int64_t> last;
  for (double bits : {16.0, 8.0, 6.0, 4.0}) {
    const Workload w = make_workload(s, count_params(s), make_precision(bits, 16), gpu, false);
    const std::optional<int64_t> knee = prefill_knee_tokens(w);
    ASSERT_TRUE(knee.has_value());
    // Memory-bound just below the knee, compute-bound at and beyond it.
    if (*knee > 1) {
      EXPECT_EQ(estimate_prefill(w, *knee - 1).binding, Roof::kMemory);
    }
    for (int64_t n : {*knee, *knee + 1, *knee * 2, *knee * 100})
      EXPECT_EQ(estimate_prefill(w, n).binding, Roof::kCompute) << n;
    // Fewer weight bytes: the memory time shrinks, so the knee comes earlier.
    if (last) {
      EXPECT_LT(*knee, *last) << bits;
    }
    last = knee;
  }
}

TEST(RooflinePrefill, KneeMovesWithTheMachineBalance) {
  const ModelShape s = preset("llama-3-8b");
  const ParamCounts c = count_params(s);
  // A higher FLOP/byte ridge means more tokens are needed to become compute-bound.
  const Workload a100 = make_workload(s, c, make_precision(16, 16), hw("a100-80g", Units::kSi), false);
  const Workload a100_tc = make_workload(s, c, make_precision(16, 16), hw("a100-80g", Units::kSi), true);
  EXPECT_LT(*prefill_knee_tokens(a100), *prefill_knee_tokens(a100_tc));
  // Roughly the ridge / 2 FLOP per weight byte at 2 bytes per weight: ridge = 78e12 / 2039e9.
  const double ridge = 78e12 / 2039e9;
  EXPECT_NEAR(static_cast<double>(*prefill_knee_tokens(a100)), ridge, ridge * 0.15);
}

TEST(RooflineDecode, LatencyLineAndThroughput) {
  const ModelShape s = preset("qwen1.5-0.5b");
  const Hardware gpu = hw("rtx4090", Units::kSi);
  const Workload w = make_workload(s, count_params(s), make_precision(16, 16), gpu, false);
  const DecodeLine line = decode_line(w);
  EXPECT_DOUBLE_EQ(line.b_ms, 927'875'072.0 / 1008e9 * 1e3);
  EXPECT_DOUBLE_EQ(line.w_tokens_per_ms, 1008e9 * 1e-3 / 98'304.0);
  EXPECT_DOUBLE_EQ(line.latency_ms(1), line.b_ms);
  // The n-th token reads the KV of the n - 1 before it: the same as a 1-sequence step.
  EXPECT_NEAR(line.latency_ms(4097), estimate_decode_step(w, 1, 4096).memory_s * 1e3, 1e-9);
  // Throughput at batch b = b / (weights + b KV) x bandwidth while memory-bound.
  for (int64_t b : {1, 8, 32}) {
    const BatchEstimate e = estimate_batch(w, b, 1000);
    ASSERT_EQ(e.step.binding, Roof::kMemory);
    EXPECT_NEAR(e.tok_s, b / (927'875'072.0 + b * 1000 * 98'304.0) * 1008e9, 1e-6 * e.tok_s);
  }
  // Large batches at a short context hit the compute roof, and stay there.
  const std::optional<int64_t> knee = decode_batch_knee(w, 16);
  ASSERT_TRUE(knee.has_value());
  EXPECT_EQ(estimate_decode_step(w, *knee - 1, 16).binding, Roof::kMemory);
  EXPECT_EQ(estimate_decode_step(w, *knee, 16).binding, Roof::kCompute);
  EXPECT_EQ(estimate_decode_step(w, *knee * 4, 16).binding, Roof::kCompute);
  // Throughput grows with the batch up to the roof, never past it.
  double last = 0;
  for (int64_t b = 1; b <= 4096; b *= 2) {
    const BatchEstimate e = estimate_batch(w, b, 16);
    EXPECT_GE(e.tok_s, last);
    EXPECT_LE(e.step.attained_flops(), w.matmul_flop_rate * (1 + 1e-9));
    last = e.tok_s;
  }
}

TEST(RooflineSpeculative, ExpectedTokensAndSpeedup) {
  EXPECT_DOUBLE_EQ(expected_tokens_per_verify(4, 0.0), 1.0);
  EXPECT_DOUBLE_EQ(expected_tokens_per_verify(4, 1.0), 5.0);
  // alpha = 0.5, k = 3: 1 + 0.5 + 0.25 + 0.125 = 1.875
  EXPECT_DOUBLE_EQ(expected_tokens_per_verify(3, 0.5), 1.875);
  const SpeculativeEstimate e = estimate_speculative(3, 0.5, 0.1, 1.0);
  EXPECT_DOUBLE_EQ(e.cost, 1.3);
  EXPECT_DOUBLE_EQ(e.speedup, 1.875 / 1.3);
  // A free verify and draft gives the expected tokens as speedup.
  EXPECT_DOUBLE_EQ(estimate_speculative(5, 0.8, 0.0, 1.0).speedup, expected_tokens_per_verify(5, 0.8));
  // Memory-bound verify of k + 1 tokens costs about one step.
  const ModelShape s = preset("llama-3-8b");
  const Workload w = make_workload(s, count_params(s), make_precision(16, 16), hw("rtx4090", Units::kSi), false);
  const double cv = verify_cost_ratio(w, 4, 512);
  EXPECT_GE(cv, 1.0);
  EXPECT_LT(cv, 1.05);
  const ModelShape d = preset("llama-3.2-1b");
  const double cd = draft_cost_ratio(make_workload(d, count_params(d), make_precision(16, 16),
                                                   hw("rtx4090", Units::kSi), false), w, 512);
  EXPECT_GT(cd, 0.1);
  EXPECT_LT(cd, 0.3);
}

// OLMoE-1B-7B: hidden 2048, 16 layers, 16 heads of 128 (MHA), 64 experts of ffn 1024, 8 per
// token, vocab 50304, untied.
//   attention per layer: 4 x 2048 x 2048 = 16,777,216
//   one expert matrix 2048 x 1024 = 2,097,152; experts 64 x 3 x that = 402,653,184;
//   router 2048 x 64 = 131,072; inactive per token: 56 x 3 x 2,097,152 = 352,321,536
//   decoder = 16 x (16,777,216 + 402,784,256) = 6,712,983,552; inactive 5,637,144,576
//   a token reads decoder - inactive + lm_head = 1,075,838,976 + 103,022,592 (~1.2 B: "1B active")
TEST(RooflineParams, OlmoeCountsTheExpertsATokenReads) {
  const ModelShape s = preset("olmoe-1b-7b");
  ASSERT_TRUE(s.is_moe());
  const LayerParams l = layer_params(s);
  EXPECT_EQ(l.attention(), 16'777'216);
  EXPECT_EQ(l.mlp(), 402'784'256);
  EXPECT_EQ(l.mlp_inactive, 352'321'536);
  const ParamCounts c = count_params(s);
  EXPECT_EQ(c.decoder, 6'712'983'552);
  EXPECT_EQ(c.mlp_inactive, 5'637'144'576);
  EXPECT_EQ(c.read_per_step(), 1'075'838'976 + 103'022'592);
  EXPECT_EQ(c.stored_per_step(), 6'712'983'552 + 103'022'592);
  // At 16 bits: one token reads 2,357,723,136 bytes; memory holds every expert.
  const Workload w = make_workload(s, c, make_precision(16, 16), hw("a100-80g", Units::kSi), false);
  EXPECT_DOUBLE_EQ(w.weight_bytes, 2'357'723'136.0);
  EXPECT_DOUBLE_EQ(w.expert_bytes, 16.0 * 64 * 3 * 2'097'152 * 2);
  EXPECT_DOUBLE_EQ(w.step_weight_bytes(1), w.weight_bytes);
  EXPECT_DOUBLE_EQ(w.resident_weight_bytes(), 2.0 * static_cast<double>(c.stored_per_step()));
  // 8 tokens routed independently touch 1 - (7/8)^8 = 65.6% of the experts, not 8 x 12.5%.
  EXPECT_NEAR(expert_share_touched(64, 8, 8), 1 - std::pow(0.875, 8), 1e-12);
  EXPECT_NEAR(w.step_weight_bytes(8), w.weight_bytes + w.expert_bytes * (1 - std::pow(0.875, 8) - 0.125), 1.0);
  // So batched decode shares expert reads: 8 sequences cost less than 8 times one.
  const StepEstimate one = estimate_decode_step(w, 1, 512, 1);
  const StepEstimate eight = estimate_decode_step(w, 8, 512, 1);
  EXPECT_LT(eight.bytes, 8 * one.bytes);
  EXPECT_GT(eight.bytes, one.bytes);
  EXPECT_EQ(expert_share_touched(0, 0, 8), 1.0);  // dense
}

TEST(RooflinePresets, AllValid) {
  ASSERT_GE(model_presets().size(), 20u);
  for (const ModelPreset& p : model_presets()) {
    Result<ModelShape> s = model_preset(p.name);
    ASSERT_TRUE(s.ok()) << p.name;
    EXPECT_TRUE(validate_shape(*s).ok()) << p.name << ": " << validate_shape(*s).message();
    // head_dim x heads is the hidden size, except where the config gives head_dim (Qwen3,
    // Gemma: the attention is wider or narrower than the residual stream; DeepSeek-2: q/k
    // heads of nope + rope dims).
    const std::string_view arch = p.arch;
    if (!arch.starts_with("qwen3") && !arch.starts_with("gemma") && !arch.starts_with("deepseek")) {
      EXPECT_EQ(s->n_head * s->head_dim, s->n_embd) << p.name;
    }
    EXPECT_EQ(s->name, p.name);
  }
  for (const HardwarePreset& p : hardware_presets()) {
    Result<Hardware> h = hardware_preset(p.name, Units::kSi);
    ASSERT_TRUE(h.ok()) << p.name;
    EXPECT_GT(h->read_bytes_per_s, 1e11) << p.name;
    EXPECT_GT(h->memory_bytes, 1e10) << p.name;
    EXPECT_GT(h->flops_fp16, 1e13) << p.name;
    EXPECT_GE(h->flops_fp16_tensor, h->flops_fp16) << p.name;
    EXPECT_GE(h->ops_int8, h->flops_fp16) << p.name;
  }
  Result<ModelShape> bad = model_preset("qwen9-1t");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("--preset"), std::string::npos);
  EXPECT_NE(bad.message().find("qwen9-1t"), std::string::npos);
  Result<Hardware> bad_hw = hardware_preset("tpu", Units::kSi);
  ASSERT_FALSE(bad_hw.ok());
  EXPECT_NE(bad_hw.message().find("--hw"), std::string::npos);
}

TEST(RooflinePresets, KnownShapes) {
  // The configs the speed issue's synthetic models use.
  const ModelShape q = preset("qwen2.5-0.5b");
  EXPECT_EQ(q.n_embd, 896);
  EXPECT_EQ(q.n_layer, 24);
  EXPECT_EQ(q.n_head, 14);
  EXPECT_EQ(q.n_kv_head, 2);
  EXPECT_EQ(q.n_ff, 4864);
  EXPECT_EQ(q.n_vocab, 151936);
  EXPECT_TRUE(q.tied_output);
  EXPECT_TRUE(q.has_qkv_bias);
  const ModelShape l = preset("llama-3.2-1b");
  EXPECT_EQ(l.n_kv_head, 8);
  EXPECT_EQ(l.head_dim, 64);
  EXPECT_TRUE(l.tied_output);
  EXPECT_FALSE(l.has_qkv_bias);
  const ModelShape m = preset("smollm2-135m");
  EXPECT_EQ(m.n_embd, 576);
  EXPECT_EQ(m.n_layer, 30);
  EXPECT_EQ(m.n_head, 9);
  EXPECT_EQ(m.n_kv_head, 3);
  const ModelShape big = preset("qwen1.5-110b");
  EXPECT_EQ(big.n_kv_head, 8);
  EXPECT_EQ(big.n_ff, 49152);
  EXPECT_EQ(big.n_vocab, 152064);
  // Tied models count lm_head in what a step reads, but store it once.
  const ParamCounts c = count_params(q);
  EXPECT_EQ(c.total, c.decoder + c.norms + c.embedding);
  EXPECT_EQ(c.read_per_step(), c.decoder + c.lm_head);
}

TEST(RooflinePrecision, Names) {
  EXPECT_EQ(precision_name(16, 16), "w16a16");
  EXPECT_EQ(precision_name(4.5, 16), "w4.5a16");
  EXPECT_EQ(precision_name(4.53125, 8), "w4.53a8");
  std::vector<std::string> names;
  for (const Precision& p : standard_precisions()) names.push_back(p.name);
  EXPECT_EQ(names, (std::vector<std::string>{"w16a16", "w8a16", "w6a16", "w4a16", "w4a8"}));
}

}  // namespace
}  // namespace lumen::roofline
