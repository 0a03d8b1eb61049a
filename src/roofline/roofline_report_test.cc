// Roofline plan outputs (JSON schema, text, SVG), counting a file's tensors, the
// prediction API, and the bandwidth test's plumbing (not its speed: benchmarks are programs).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "gguf/gguf_writer.h"
#include "roofline/membw.h"
#include "roofline/plan.h"
#include "roofline/predict.h"
#include "roofline/svg.h"

namespace lumen::roofline {
namespace {

Plan qwen15_on_4090(Units units, PlanOptions options = {}) {
  Result<ModelShape> s = model_preset("qwen1.5-0.5b");
  Result<Hardware> hw = hardware_preset("rtx4090", units);
  EXPECT_TRUE(s.ok() && hw.ok());
  options.units = units;
  return make_plan(*s, count_params(*s), *hw, options);
}

TEST(RooflineJson, SchemaKeys) {
  PlanOptions o;
  o.n_prompt = 1000;
  o.speculative = SpeculativeOptions{};
  const nlohmann::json j = plan_to_json(qwen15_on_4090(Units::kBinary, o));
  for (const char* key : {"params", "kv_elems_per_token", "capacity", "decode", "prefill", "hw", "units"})
    EXPECT_TRUE(j.contains(key)) << key;
  for (const char* key : {"decoder", "lm_head", "embedding", "total"}) EXPECT_TRUE(j["params"][key].is_number_integer()) << key;
  EXPECT_EQ(j["params"]["decoder"], 308'355'072);
  EXPECT_EQ(j["params"]["lm_head"], 155'582'464);
  EXPECT_EQ(j["kv_elems_per_token"], 49'152);
  for (const char* key : {"w16a16", "w8a16", "w6a16", "w4a16", "w4a8"}) {
    EXPECT_TRUE(j["capacity"][key].is_number_integer()) << key;
    for (const char* field : {"knee_tokens", "memory_ms", "compute_ms", "ttft_ms"})
      EXPECT_TRUE(j["prefill"][key].contains(field)) << key << "." << field;
  }
  EXPECT_EQ(j["capacity"]["w16a16"], 252'705);
  for (const char* key : {"w16", "w8", "w4"}) {
    EXPECT_TRUE(j["decode"][key]["B_ms"].is_number()) << key;
    EXPECT_TRUE(j["decode"][key]["W_tokens_per_ms"].is_number()) << key;
  }
  EXPECT_LT(j["decode"]["w4"]["B_ms"].get<double>(), j["decode"]["w16"]["B_ms"].get<double>());
  EXPECT_EQ(j["units"], "binary");
  EXPECT_EQ(j["hw"]["name"], "rtx4090");
  EXPECT_DOUBLE_EQ(j["hw"]["bandwidth_GB_s"].get<double>(), 1008.0);  // read back in its own units
  EXPECT_TRUE(j.contains("speculative"));
  const double ttft = j["prefill"]["w16a16"]["ttft_ms"];
  EXPECT_DOUBLE_EQ(ttft, std::max(j["prefill"]["w16a16"]["memory_ms"].get<double>(),
                                  j["prefill"]["w16a16"]["compute_ms"].get<double>()));
}

TEST(RooflineJson, OomIsAString) {
  Result<ModelShape> s = model_preset("qwen1.5-110b");
  Result<Hardware> hw = hardware_preset("rtx4090", Units::kSi);
  ASSERT_TRUE(s.ok() && hw.ok());
  const nlohmann::json j = plan_to_json(make_plan(*s, count_params(*s), *hw, {}));
  for (const char* key : {"w16a16", "w8a16", "w6a16", "w4a16", "w4a8"}) EXPECT_EQ(j["capacity"][key], "oom") << key;
}

TEST(RooflinePlan, ChosenPrecisionAndBatches) {
  PlanOptions o;
  o.chosen = make_precision(4.5, 16);
  o.batches = {1, 8, 32};
  const Plan plan = qwen15_on_4090(Units::kSi, o);
  EXPECT_EQ(plan.precisions.size(), 6u);
  EXPECT_EQ(plan.chosen().precision.name, "w4.5a16");
  ASSERT_EQ(plan.batches.size(), 3u);
  EXPECT_LT(plan.batches[0].tok_s, plan.batches[2].tok_s);
  // A standard pair chosen again does not duplicate its row.
  o.chosen = make_precision(8, 16);
  const Plan plan8 = qwen15_on_4090(Units::kSi, o);
  EXPECT_EQ(plan8.precisions.size(), 5u);
  EXPECT_EQ(plan8.chosen().precision.name, "w8a16");
}

TEST(RooflineText, SaysWhichRoofBinds) {
  const std::string text = plan_to_text(qwen15_on_4090(Units::kBinary));
  for (const char* needle : {"w16a16", "w4a8", "252,705", "memory-bound", "compute-bound", "0.29 B", "0.14 B",
                             "0.046875 M", "1008.00 GiB/s", "which roof binds"})
    EXPECT_NE(text.find(needle), std::string::npos) << needle << "\n" << text;
}

TEST(RooflineSvg, WellFormedWithLabels) {
  const std::string svg = plan_to_svg(qwen15_on_4090(Units::kSi));
  ASSERT_TRUE(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
  EXPECT_TRUE(svg.ends_with("</svg>\n"));
  for (const char* needle : {"memory roof: 1008.00 GB/s", "compute roof", "82.58 TFLOP/s", "arithmetic intensity",
                             "attainable FLOP/s", "context length", "decode latency per token", "pp512", "pp16",
                             "tg b=1", "tg b=32", "ridge", "w16a16", "w4a8"})
    EXPECT_NE(svg.find(needle), std::string::npos) << needle;
  // Parse-ish: every element opened is closed, no NaN or infinity leaked into coordinates.
  EXPECT_EQ(svg.find("nan"), std::string::npos);
  EXPECT_EQ(svg.find("inf"), std::string::npos);
  auto count = [&](const std::string& s) {
    size_t n = 0;
    for (size_t pos = svg.find(s); pos != std::string::npos; pos = svg.find(s, pos + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count("<text"), count("</text>"));
  EXPECT_EQ(count("<svg"), 1u);
  EXPECT_EQ(count("<"), count(">"));
}

TEST(RooflineSvg, EscapesNamesAndHandlesOom) {
  Result<ModelShape> s = model_preset("qwen1.5-110b");
  Result<Hardware> hw = hardware_preset("rtx4090", Units::kSi);
  ASSERT_TRUE(s.ok() && hw.ok());
  s->name = "a<b>&\"c\"";
  const std::string svg = plan_to_svg(make_plan(*s, count_params(*s), *hw, {}));
  EXPECT_NE(svg.find("a&lt;b&gt;&amp;&quot;c&quot;"), std::string::npos);
  EXPECT_NE(svg.find("weights do not fit"), std::string::npos);
  EXPECT_EQ(svg.find("nan"), std::string::npos);
}

// A tiny qwen2-shaped GGUF: hidden 64, 2 layers, 4 heads of 16, 2 KV heads, ffn 128,
// vocab 256, tied; matrices in q8_0 (34 bytes per 32 weights), norms and biases in f32.
gguf::ModelFile tiny_qwen2_file(std::vector<std::byte>& image) {
  gguf::GgufWriter w;
  w.set("general.architecture", gguf::MetaValue::of_string("qwen2"));
  w.set("general.name", gguf::MetaValue::of_string("tiny-qwen2"));
  w.set("qwen2.embedding_length", gguf::MetaValue::of_u32(64));
  w.set("qwen2.block_count", gguf::MetaValue::of_u32(2));
  w.set("qwen2.attention.head_count", gguf::MetaValue::of_u32(4));
  w.set("qwen2.attention.head_count_kv", gguf::MetaValue::of_u32(2));
  w.set("qwen2.feed_forward_length", gguf::MetaValue::of_u32(128));
  w.set("qwen2.context_length", gguf::MetaValue::of_u32(512));
  auto add = [&](const std::string& name, DType dtype, int64_t ne0, int64_t ne1) {
    const size_t n_bytes = row_bytes(dtype, ne0) * static_cast<size_t>(ne1);
    std::vector<std::byte> zeros(n_bytes);
    Status st = ne1 == 1 ? w.add_tensor_copy(name, dtype, {ne0}, zeros) : w.add_tensor_copy(name, dtype, {ne0, ne1}, zeros);
    EXPECT_TRUE(st.ok()) << st.message();
  };
  add("token_embd.weight", DType::kQ8_0, 64, 256);
  add("output_norm.weight", DType::kF32, 64, 1);
  for (int il = 0; il < 2; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    add(p + "attn_norm.weight", DType::kF32, 64, 1);
    add(p + "attn_q.weight", DType::kQ8_0, 64, 64);
    add(p + "attn_q.bias", DType::kF32, 64, 1);
    add(p + "attn_k.weight", DType::kQ8_0, 64, 32);
    add(p + "attn_k.bias", DType::kF32, 32, 1);
    add(p + "attn_v.weight", DType::kQ8_0, 64, 32);
    add(p + "attn_v.bias", DType::kF32, 32, 1);
    add(p + "attn_output.weight", DType::kQ8_0, 64, 64);
    add(p + "ffn_norm.weight", DType::kF32, 64, 1);
    add(p + "ffn_gate.weight", DType::kQ8_0, 64, 128);
    add(p + "ffn_up.weight", DType::kQ8_0, 64, 128);
    add(p + "ffn_down.weight", DType::kF32, 128, 64);  // one float matrix, to split the MACs
  }
  image = w.serialize();
  Result<gguf::ModelFile> f = gguf::parse_gguf(image, "tiny.gguf");
  EXPECT_TRUE(f.ok()) << f.message();
  return std::move(f).value();
}

TEST(RooflineFile, CountsTensorsLikeTheShape) {
  std::vector<std::byte> image;
  const gguf::ModelFile file = tiny_qwen2_file(image);
  Result<ModelShape> shape = shape_from_model_file(file);
  ASSERT_TRUE(shape.ok()) << shape.message();
  EXPECT_EQ(shape->name, "tiny-qwen2");
  EXPECT_EQ(shape->n_kv_head, 2);
  EXPECT_EQ(shape->head_dim, 16);
  EXPECT_TRUE(shape->tied_output);
  EXPECT_TRUE(shape->has_qkv_bias);
  Result<FileWeights> fw = count_file_weights(file);
  ASSERT_TRUE(fw.ok()) << fw.message();
  const ParamCounts from_shape = count_params(*shape);
  EXPECT_EQ(fw->params.decoder, from_shape.decoder);
  EXPECT_EQ(fw->params.attention, from_shape.attention);
  EXPECT_EQ(fw->params.mlp, from_shape.mlp);
  EXPECT_EQ(fw->params.lm_head, from_shape.lm_head);
  EXPECT_EQ(fw->params.embedding, from_shape.embedding);
  EXPECT_EQ(fw->params.norms, from_shape.norms);
  EXPECT_EQ(fw->params.total, from_shape.total);
  // Bytes: q8_0 is 34 bytes per 32 weights; ffn_down and the biases are f32.
  const uint64_t q8 = 34 / 2;  // bytes per 16 weights, to keep the sums in integers
  const uint64_t per_layer = (64 * 64 + 64 * 32 * 2 + 64 * 64 + 64 * 128 * 2) / 16 * q8 + 128 * 64 * 4 + (64 + 32 + 32) * 4;
  EXPECT_EQ(fw->decoder_bytes, 2 * per_layer);
  EXPECT_EQ(fw->lm_head_bytes, 256u * 64 / 16 * q8);
  EXPECT_EQ(fw->embedding_row_bytes, 64u / 16 * q8);
  EXPECT_EQ(fw->decoder_macs_float, 2 * 128 * 64);
  EXPECT_EQ(fw->decoder_macs_int8, 2 * (64 * 64 + 64 * 32 * 2 + 64 * 64 + 64 * 128 * 2));
  EXPECT_TRUE(fw->lm_head_int8);
  EXPECT_GT(fw->bits_per_weight(), 8.5);
  EXPECT_LT(fw->bits_per_weight(), 16.0);
}

// This machine class's roofs: ~30 GB/s (4 KiB pages), ~230 GFLOP/s f32, ~930 GOP/s int8.
MachineRates this_machine_class_rates() {
  MachineRates r;
  r.read_bytes_per_s = 30e9;
  r.flops_f32 = 230e9;
  r.ops_int8 = 930e9;
  return r;
}

TEST(RooflinePredict, BoundsFromRates) {
  std::vector<std::byte> image;
  const gguf::ModelFile file = tiny_qwen2_file(image);
  const MachineRates rates = this_machine_class_rates();
  PredictOptions o;
  o.n_gen = 128;
  Result<Prediction> p = predict_lumen(file, rates, o);
  ASSERT_TRUE(p.ok()) << p.message();
  EXPECT_STREQ(p->binding_roof, "memory");
  EXPECT_STREQ(p->pp_binding_roof, "compute");
  // tg: bytes per token / bandwidth, a little slower as the KV cache grows over 128 tokens.
  const double upper = rates.read_bytes_per_s / p->weight_bytes_per_token;
  EXPECT_LT(p->tg_tok_s, upper);
  EXPECT_GT(p->tg_tok_s, 0.8 * upper);
  EXPECT_NEAR(p->tg_bytes_per_s, rates.read_bytes_per_s, 1e-6 * rates.read_bytes_per_s);
  // KV: 2 layers x 2 x 2 KV heads x 16 x 2 bytes.
  EXPECT_DOUBLE_EQ(p->kv_bytes_per_token, 256.0);
  // Deeper context: slower generation.
  o.n_depth = 4096;
  Result<Prediction> deep = predict_lumen(file, rates, o);
  ASSERT_TRUE(deep.ok());
  EXPECT_LT(deep->tg_tok_s, p->tg_tok_s);
  EXPECT_LT(deep->pp_tok_s, p->pp_tok_s);
}

// A decode step is the matrices' phase and then attention's, each at its own roof. With a
// slow f32 rate and a deep context, attention's arithmetic binds while the weights' read
// still does: the step takes the sum (a single max over the step's totals would hide the
// weights' read behind attention's arithmetic).
TEST(RooflinePredict, DecodePhasesAddEachAtItsOwnRoof) {
  std::vector<std::byte> image;
  const gguf::ModelFile file = tiny_qwen2_file(image);
  MachineRates rates = this_machine_class_rates();
  rates.flops_f32 = 10e9;
  PredictOptions o;
  o.n_gen = 1;
  o.n_depth = 4095;
  Result<Prediction> p = predict_lumen(file, rates, o);
  ASSERT_TRUE(p.ok()) << p.message();
  // 2 layers x 4 heads x 16 dims per (query, key) pair, Q.K and P.V, 2 FLOPs each, 4096 keys.
  const double attn_s = 2.0 * 2.0 * (2 * 4 * 16) * 4096 / rates.flops_f32;
  const double kv_s = 4096 * p->kv_bytes_per_token / rates.read_bytes_per_s;
  ASSERT_GT(attn_s, kv_s);
  const double weights_s = p->weight_bytes_per_token / rates.read_bytes_per_s;
  EXPECT_NEAR(1.0 / p->tg_tok_s, weights_s + attn_s, 1e-9 * attn_s);
  EXPECT_STREQ(p->binding_roof, "compute");
  // One key at this machine class's f32 rate: both phases memory-bound, the step is all
  // its bytes over the bandwidth.
  rates.flops_f32 = this_machine_class_rates().flops_f32;
  o.n_depth = 0;
  Result<Prediction> q = predict_lumen(file, rates, o);
  ASSERT_TRUE(q.ok());
  EXPECT_STREQ(q->binding_roof, "memory");
  EXPECT_NEAR(1.0 / q->tg_tok_s, (p->weight_bytes_per_token + p->kv_bytes_per_token) / rates.read_bytes_per_s,
              1e-9 / q->tg_tok_s);
}

TEST(RooflinePredict, PrefillKneeIsWherePrefillTurnsComputeBound) {
  std::vector<std::byte> image;
  const gguf::ModelFile file = tiny_qwen2_file(image);
  const MachineRates rates = this_machine_class_rates();
  Result<int64_t> knee = prefill_knee_tokens(file, rates);
  ASSERT_TRUE(knee.ok()) << knee.message();
  ASSERT_GT(*knee, 1);
  // The definition, checked through the pp prediction: memory-bound one token below the
  // knee, compute-bound at it.
  auto binding = [&](int64_t n) {
    PredictOptions o;
    o.n_prompt = n;
    Result<Prediction> p = predict_lumen(file, rates, o);
    EXPECT_TRUE(p.ok());
    return std::string(p->pp_binding_roof);
  };
  EXPECT_EQ(binding(*knee - 1), "memory");
  EXPECT_EQ(binding(*knee), "compute");
  // Twice the bandwidth: the weights are read in half the time, so half the tokens'
  // arithmetic already takes as long (about: the KV term is small here).
  MachineRates fast_memory = rates;
  fast_memory.read_bytes_per_s *= 2;
  Result<int64_t> knee2 = prefill_knee_tokens(file, fast_memory);
  ASSERT_TRUE(knee2.ok());
  EXPECT_NEAR(static_cast<double>(*knee2), static_cast<double>(*knee) / 2, 1.5);
  // Twice the arithmetic rate: twice the tokens.
  MachineRates fast_compute = rates;
  fast_compute.flops_f32 *= 2;
  fast_compute.ops_int8 *= 2;
  Result<int64_t> knee3 = prefill_knee_tokens(file, fast_compute);
  ASSERT_TRUE(knee3.ok());
  EXPECT_NEAR(static_cast<double>(*knee3), static_cast<double>(*knee) * 2, 2.5);
  // Memory so fast that even one token is compute-bound.
  MachineRates instant = rates;
  instant.read_bytes_per_s = 1e18;
  EXPECT_EQ(*prefill_knee_tokens(file, instant), 1);
}

TEST(RooflineMembw, MeasuresSomething) {
  // Plumbing only (a small buffer, two threads): a positive finite rate and the sizes used.
  ThreadPool pool(2);
  const MembwResult r = measure_read_bandwidth_detailed(pool, size_t{4} << 20, false, 2);
  EXPECT_GT(r.best_bytes_per_s, 0);
  EXPECT_GE(r.best_bytes_per_s, r.median_bytes_per_s);
  EXPECT_EQ(r.n_bytes, size_t{4} << 20);
  EXPECT_EQ(r.n_threads, 2);
  EXPECT_GE(r.n_passes, 2);
  EXPECT_LE(r.n_clean_passes, r.n_passes);
}

}  // namespace
}  // namespace lumen::roofline
