#include "convert/quantize.h"

#include <gtest/gtest.h>

#include <sys/stat.h>

#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <sstream>

#include "base/shared_dir.h"
#include "convert/convert_test_util.h"
#include "convert/quantize_ref.h"
#include "convert/synth.h"
#include "convert/type_rules.h"
#include "gguf/model_file.h"
#include "kernels/ops.h"
#include "model/hparams.h"

namespace lumen::convert {
namespace {

using testing::compare_logits;
using testing::model_logits;
using testing::shared_path;
using testing::temp_path;

// A prompt of ids valid in both test vocabularies (512 and 2048 tokens).
std::vector<int32_t> prompt_ids() {
  std::vector<int32_t> ids = {1};
  for (int i = 0; i < 47; ++i) ids.push_back(static_cast<int32_t>(3 + (i * 37) % 500));
  return ids;
}

Status quantize(const std::string& in, const std::string& out, const std::string& type, QuantizeReport* report,
                bool allow_requantize = false) {
  QuantizeOptions opt;
  LUMEN_ASSIGN_OR_RETURN(opt.rules, make_type_rules(type, "", ""));
  opt.allow_requantize = allow_requantize;
  opt.n_threads = 2;
  return quantize_model(in, out, opt, report);
}


// Writes a Hugging Face directory with random f32 weights: config.json, model.safetensors
// and TinyStories-656K's tokenizer files. hidden 64, 2 layers, 4 heads, 2 KV heads, ffn 96,
// vocab 2048, untied, with q/k/v biases.
void write_hf_dir(const std::string& dir, const std::string& model_type) {
  ::mkdir(dir.c_str(), 0755);
  constexpr int kHidden = 64, kLayers = 2, kHeads = 4, kKvHeads = 2, kFfn = 96, kVocab = 2048;
  constexpr int kHeadDim = kHidden / kHeads;
  std::map<std::string, std::vector<int64_t>> shapes;  // HF name -> [out, in] or [n]
  shapes["model.embed_tokens.weight"] = {kVocab, kHidden};
  shapes["model.norm.weight"] = {kHidden};
  shapes["lm_head.weight"] = {kVocab, kHidden};
  for (int l = 0; l < kLayers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    shapes[p + "input_layernorm.weight"] = {kHidden};
    shapes[p + "post_attention_layernorm.weight"] = {kHidden};
    shapes[p + "self_attn.q_proj.weight"] = {kHeads * kHeadDim, kHidden};
    shapes[p + "self_attn.k_proj.weight"] = {kKvHeads * kHeadDim, kHidden};
    shapes[p + "self_attn.v_proj.weight"] = {kKvHeads * kHeadDim, kHidden};
    shapes[p + "self_attn.q_proj.bias"] = {kHeads * kHeadDim};
    shapes[p + "self_attn.k_proj.bias"] = {kKvHeads * kHeadDim};
    shapes[p + "self_attn.v_proj.bias"] = {kKvHeads * kHeadDim};
    shapes[p + "self_attn.o_proj.weight"] = {kHidden, kHeads * kHeadDim};
    shapes[p + "mlp.gate_proj.weight"] = {kFfn, kHidden};
    shapes[p + "mlp.up_proj.weight"] = {kFfn, kHidden};
    shapes[p + "mlp.down_proj.weight"] = {kHidden, kFfn};
  }
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 0.1f);
  std::string header = "{";
  std::vector<float> data;
  for (const auto& [name, shape] : shapes) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    const size_t begin = data.size() * sizeof(float);
    const bool is_norm = name.find("norm") != std::string::npos;
    for (int64_t i = 0; i < n; ++i) data.push_back(is_norm ? 1.0f + nd(rng) : nd(rng));
    header += "\"" + name + "\": {\"dtype\": \"F32\", \"shape\": [" + std::to_string(shape[0]) +
              (shape.size() > 1 ? ", " + std::to_string(shape[1]) : "") + "], \"data_offsets\": [" +
              std::to_string(begin) + ", " + std::to_string(data.size() * sizeof(float)) + "]}, ";
  }
  header += "\"__metadata__\": {\"format\": \"pt\"}}";
  while (header.size() % 8 != 0) header += ' ';
  std::ofstream st(dir + "/model.safetensors", std::ios::binary);
  const uint64_t n_header = header.size();
  st.write(reinterpret_cast<const char*>(&n_header), 8);
  st.write(header.data(), static_cast<std::streamsize>(header.size()));
  st.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size() * sizeof(float)));
  std::ofstream cfg(dir + "/config.json");
  cfg << "{\"model_type\": \"" << model_type << "\", \"hidden_size\": " << kHidden
      << ", \"intermediate_size\": " << kFfn << ", \"num_hidden_layers\": " << kLayers
      << ", \"num_attention_heads\": " << kHeads << ", \"num_key_value_heads\": " << kKvHeads
      << ", \"max_position_embeddings\": 256, \"vocab_size\": " << kVocab
      << ", \"rms_norm_eps\": 1e-6, \"rope_theta\": 10000.0, \"tie_word_embeddings\": false"
      << ", \"attention_bias\": true, \"bos_token_id\": 1, \"eos_token_id\": 2}";
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"}) {
    std::ifstream in(shared_path(std::string("models/TinyStories-656K/") + f), std::ios::binary);
    std::ofstream out(dir + "/" + f, std::ios::binary);
    out << in.rdbuf();
  }
}

// The type one tensor gets in a one-layer model that also has `others` (names only matter
// for the tied / untied output rule).
DType type_of(const TypeRules& rules, std::string_view name, std::vector<int64_t> ne, bool tied) {
  std::vector<std::vector<int64_t>> shapes = {ne, {256, 256}};
  std::vector<TensorDesc> ts = {TensorDesc{name, shapes[0], DType::kF16}};
  if (!tied && name != "output.weight") ts.push_back(TensorDesc{"output.weight", shapes[1], DType::kF16});
  const MixModelInfo model = make_mix_model_info("llama", 1, 8, 8, 0);
  Result<std::vector<DType>> types = plan_tensor_types(rules, model, ts);
  EXPECT_TRUE(types.ok()) << types.message();
  return types.ok() ? (*types)[0] : DType::kF32;
}

TEST(QuantizeRules, TensorTypes) {
  TypeRules q4k = *make_type_rules("q4_k_m", "", "");
  const std::vector<int64_t> mat256 = {512, 1024}, mat896 = {896, 4864}, mat100 = {100, 8}, vec = {512},
                             col = {512, 1};
  EXPECT_EQ(type_of(q4k, "blk.0.attn_q.weight", mat256, false), DType::kQ4_K);
  EXPECT_EQ(type_of(q4k, "blk.0.attn_q.weight", mat896, false), DType::kQ5_0);  // 896 % 256 != 0
  EXPECT_EQ(type_of(q4k, "blk.0.attn_q.weight", mat100, false), DType::kF16);   // 100 % 32 != 0
  EXPECT_EQ(type_of(q4k, "blk.0.attn_norm.weight", vec, false), DType::kF32);
  EXPECT_EQ(type_of(q4k, "blk.0.attn_q.bias", col, false), DType::kF32);
  EXPECT_EQ(type_of(q4k, "output.weight", mat256, false), DType::kQ6_K);
  EXPECT_EQ(type_of(q4k, "token_embd.weight", mat256, false), DType::kQ4_K);
  EXPECT_EQ(type_of(q4k, "token_embd.weight", mat256, true), DType::kQ6_K);  // tied: it is the output
  EXPECT_EQ(type_of(q4k, "token_embd.weight", mat896, true), DType::kQ8_0);
  EXPECT_EQ(type_of(q4k, "rope_freqs.weight", vec, false), DType::kF32);
  EXPECT_EQ(type_of(q4k, "blk.0.attn_v.weight", mat256, false), DType::kQ6_K);   // use_more_bits(0, 1)
  EXPECT_EQ(type_of(q4k, "blk.0.ffn_down.weight", mat256, false), DType::kQ6_K);
  TypeRules q40 = *make_type_rules("q4_0", "", "");
  EXPECT_EQ(type_of(q40, "output.weight", mat256, false), DType::kQ6_K);  // llama.cpp: every mix but q8_0
  q40.output_type = DType::kQ8_0;
  q40.token_embd_type = DType::kF16;
  EXPECT_EQ(type_of(q40, "output.weight", mat256, false), DType::kQ8_0);
  EXPECT_EQ(type_of(q40, "token_embd.weight", mat256, false), DType::kF16);
  q40 = *make_type_rules("q4_0", "", "");
  q40.pure = true;
  EXPECT_EQ(type_of(q40, "output.weight", mat256, false), DType::kQ4_0);
  EXPECT_EQ(type_of(q40, "blk.0.attn_q.weight", mat100, false), DType::kF16);
  EXPECT_EQ(static_cast<uint32_t>(find_quant_mix("Q4_K")->ftype), 15u);  // the alias of q4_k_m
  EXPECT_EQ(find_quant_mix("q5_k"), find_quant_mix("q5_k_m"));
  auto bad = make_type_rules("q8_1", "", "");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("--type: unknown type 'q8_1'"), std::string::npos) << bad.message();
  auto bad_out = parse_target_type("q8_1", "--output-type");
  ASSERT_FALSE(bad_out.ok());
  EXPECT_NE(bad_out.message().find("--output-type: unsupported type 'q8_1' (supported: f32, f16, q4_0"),
            std::string::npos)
      << bad_out.message();
  EXPECT_EQ(*parse_target_type("Q4_K", "--type"), DType::kQ4_K);
}

// stories260K (GGUF, F32) -> q8_0: loads, keeps the tokenizer, and its logits stay close.
TEST(QuantizeModel, Stories260KToQ8_0) {
  const std::string in = shared_path("models/stories260K/stories260K.gguf");
  const std::string out = temp_path("s260k-q8_0.gguf");
  QuantizeReport report;
  Status st = quantize(in, out, "q8_0", &report);
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(report.container, "gguf");
  EXPECT_FALSE(report.permuted_qk);

  auto src = gguf::open_model(in);
  auto dst = gguf::open_model(out);
  ASSERT_TRUE(src.ok() && dst.ok()) << dst.message();
  EXPECT_EQ(dst->gguf_version(), 3u);
  EXPECT_EQ(dst->get_int("general.file_type"), 7);
  EXPECT_EQ(dst->get_int("general.quantization_version"), 2);
  EXPECT_EQ(*dst->get_string_array("tokenizer.ggml.tokens"), *src->get_string_array("tokenizer.ggml.tokens"));
  EXPECT_EQ(*dst->get_float_array("tokenizer.ggml.scores"), *src->get_float_array("tokenizer.ggml.scores"));
  ASSERT_EQ(dst->tensors().size(), src->tensors().size());
  for (const gguf::TensorInfo& t : dst->tensors()) {
    const gguf::TensorInfo* s = src->find_tensor(t.name);
    ASSERT_NE(s, nullptr) << t.name;
    EXPECT_EQ(t.view.shape_string(), s->view.shape_string()) << t.name;
    const DType want = t.view.n_dims == 1 ? DType::kF32 : t.view.ne[0] % 32 == 0 ? DType::kQ8_0 : DType::kF16;
    EXPECT_EQ(t.view.dtype, want) << t.name;  // ffn_down rows are 172 long: f16
  }
  auto hp = model::read_hparams(*dst);
  ASSERT_TRUE(hp.ok()) << hp.message();
  EXPECT_EQ(hp->n_layer, 5);
  EXPECT_EQ(hp->tied_output, src->find_tensor("output.weight") == nullptr);

  int32_t n_vocab = 0;
  auto a = model_logits(in, prompt_ids(), &n_vocab);
  auto b = model_logits(out, prompt_ids(), &n_vocab);
  ASSERT_TRUE(a.ok() && b.ok()) << a.message() << b.message();
  const auto d = compare_logits(*a, *b, n_vocab);
  std::printf("  stories260K q8_0 vs f32: max |dlogit| %.4f (logits up to %.2f), rel rms %.4f, argmax differs in %d of %zu rows\n",
              d.max_abs, d.max_ref, d.rel_rms, d.n_argmax_differ, prompt_ids().size());
  // Measured: max 0.31, rel rms 0.0066, 1 argmax flip (a near-tie) in 48 rows. Part of the
  // difference is the 8-bit activation quantization q8_0 matmuls do (as ggml-cpu does).
  EXPECT_LT(d.max_abs, 0.6);
  EXPECT_LT(d.rel_rms, 0.015);
  EXPECT_LE(d.n_argmax_differ, 3);
  std::remove(out.c_str());
}

// HF TinyStories-656K -> F32 GGUF: q/k rows are permuted to the interleaved RoPE layout, the
// lumen-only layout key is gone, and the logits are the HF model's.
TEST(QuantizeModel, HfToF32GgufReproducesLogits) {
  const std::string in = shared_path("models/TinyStories-656K");
  const std::string out = temp_path("656k-f32.gguf");
  QuantizeReport report;
  Status st = quantize(in, out, "f32", &report);
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(report.container, "safetensors");
  EXPECT_TRUE(report.permuted_qk);
  EXPECT_TRUE(report.dropped_tied_output);
  auto dst = gguf::open_model(out);
  ASSERT_TRUE(dst.ok()) << dst.message();
  EXPECT_EQ(dst->find("lumen.rope_layout"), nullptr);
  EXPECT_EQ(dst->find("lumen.tie_word_embeddings"), nullptr);
  EXPECT_EQ(dst->find_tensor("output.weight"), nullptr);
  EXPECT_EQ(dst->get_string("tokenizer.ggml.model"), "llama");
  EXPECT_EQ(dst->get_int("general.file_type"), 0);
  auto hp = model::read_hparams(*dst);
  ASSERT_TRUE(hp.ok()) << hp.message();
  EXPECT_EQ(hp->rope_layout, kernels::RopeLayout::kInterleaved);

  int32_t n_vocab = 0;
  auto a = model_logits(in, prompt_ids(), &n_vocab);
  auto b = model_logits(out, prompt_ids(), &n_vocab);
  ASSERT_TRUE(a.ok() && b.ok()) << a.message() << b.message();
  const auto d = compare_logits(*a, *b, n_vocab);
  std::printf("  TinyStories-656K HF -> f32 GGUF: max |dlogit| %.2e (logits up to %.2f)\n", d.max_abs, d.max_ref);
  EXPECT_LE(d.max_abs, 1e-4);
  EXPECT_EQ(d.n_argmax_differ, 0);
  std::remove(out.c_str());
}

// HF TinyStories-656K -> q8_0 is the file llama.cpp's converter made from the same weights:
// the same tensors, types, shapes and bytes, and the same tokenizer.
TEST(QuantizeModel, HfToQ8_0MatchesLlamaCppFile) {
  const std::string in = shared_path("models/TinyStories-656K");
  const std::string out = temp_path("656k-q8_0.gguf");
  QuantizeReport report;
  Status st = quantize(in, out, "q8_0", &report);
  ASSERT_TRUE(st.ok()) << st.message();
  auto ref = gguf::open_model(shared_path("models/TinyStories-656K/TinyStories-656K-Q8_0.gguf"));
  auto dst = gguf::open_model(out);
  ASSERT_TRUE(ref.ok() && dst.ok()) << ref.message() << dst.message();
  EXPECT_EQ(dst->tensors().size(), ref->tensors().size());
  int n_identical = 0;
  for (const gguf::TensorInfo& r : ref->tensors()) {
    const gguf::TensorInfo* t = dst->find_tensor(r.name);
    ASSERT_NE(t, nullptr) << r.name;
    EXPECT_EQ(t->view.dtype, r.view.dtype) << r.name;
    EXPECT_EQ(t->view.shape_string(), r.view.shape_string()) << r.name;
    ASSERT_EQ(t->view.n_bytes, r.view.n_bytes) << r.name;
    const bool same = std::memcmp(t->view.data, r.view.data, r.view.n_bytes) == 0;
    EXPECT_TRUE(same) << r.name << " differs from llama.cpp's bytes";
    n_identical += same;
  }
  std::printf("  %d of %zu tensors byte-identical to llama.cpp's TinyStories-656K-Q8_0.gguf\n", n_identical,
              ref->tensors().size());
  for (const char* key : {"llama.block_count", "llama.context_length", "llama.embedding_length",
                          "llama.feed_forward_length", "llama.attention.head_count", "llama.attention.head_count_kv",
                          "llama.rope.dimension_count", "llama.vocab_size", "general.file_type",
                          "general.quantization_version", "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
                          "tokenizer.ggml.unknown_token_id", "tokenizer.ggml.padding_token_id"})
    EXPECT_EQ(dst->get_int(key), ref->get_int(key)) << key;
  EXPECT_EQ(*dst->get_string_array("tokenizer.ggml.tokens"), *ref->get_string_array("tokenizer.ggml.tokens"));
  EXPECT_EQ(*dst->get_int_array("tokenizer.ggml.token_type"), *ref->get_int_array("tokenizer.ggml.token_type"));
  EXPECT_EQ(dst->get_float("llama.rope.freq_base"), ref->get_float("llama.rope.freq_base"));
  EXPECT_EQ(dst->get_float("llama.attention.layer_norm_rms_epsilon"),
            ref->get_float("llama.attention.layer_norm_rms_epsilon"));
  std::remove(out.c_str());
}

// The HF model quantized to each type loads in lumen; the logits move away from the F32
// model's by an amount that shrinks with the bits per weight.
TEST(QuantizeModel, HfToEachTypeLoadsAndStaysClose) {
  const std::string in = shared_path("models/TinyStories-656K");
  int32_t n_vocab = 0;
  auto ref = model_logits(in, prompt_ids(), &n_vocab);
  ASSERT_TRUE(ref.ok()) << ref.message();
  // Measured on 48 random-id positions (logits up to ~18), max |dlogit| / rel rms:
  // f16 0.008 / 0.0005, bf16 0.061 / 0.0033, q8_0 0.43 / 0.019, q4_0 4.2 / 0.20. Hidden 128
  // and ffn 384 are not multiples of 256, so q6_k falls back to q8_0 everywhere and gives
  // the q8_0 file, and q4_k (= q4_k_m) to q5_0 with a q8_0 output, as llama-quantize
  // (type_rules.h); its bound is q4_0's until q5_0 runs here (then it is measured). Part of
  // every quantized difference is the 8-bit activation quantization of the q8_0/q4_0
  // matmuls (as ggml-cpu does). A file with a type lumen cannot multiply yet is checked for
  // its types only.
  struct Case {
    const char* type;
    double max_abs;
    double rel_rms;
  };
  const Case cases[] = {{"f16", 0.03, 0.002}, {"bf16", 0.2, 0.01}, {"q8_0", 0.8, 0.04},
                        {"q6_k", 0.8, 0.04},  {"q4_0", 6.0, 0.3},  {"q4_k", 6.0, 0.3}};
  for (const auto& [type, max_abs, rel_rms] : cases) {
    const std::string out = temp_path(std::string("656k-") + type + ".gguf");
    QuantizeReport report;
    Status st = quantize(in, out, type, &report);
    ASSERT_TRUE(st.ok()) << type << ": " << st.message();
    if (std::string(type) == "q4_k") {
      // Every matrix row is 128 or 384 wide: q4_K falls back to q5_0, and the q6_K that
      // use_more_bits picks for some attn_v / ffn_down layers (and the output) to q8_0.
      int n_q5_0 = 0;
      for (const TensorReport& t : report.tensors) {
        if (t.ne.size() != 2) continue;
        EXPECT_TRUE(t.to == DType::kQ5_0 || t.to == DType::kQ8_0) << t.name;
        n_q5_0 += t.to == DType::kQ5_0;
      }
      EXPECT_GT(n_q5_0, 0);
    }
    const auto unsupported = std::find_if(report.tensors.begin(), report.tensors.end(),
                                          [](const TensorReport& t) { return !kernels::matmul_supports(t.to); });
    if (unsupported != report.tensors.end()) {
      std::printf("  TinyStories-656K %-5s: not run (lumen cannot multiply %s yet)\n", type,
                  std::string(dtype_name(unsupported->to)).c_str());
      continue;
    }
    auto got = model_logits(out, prompt_ids(), &n_vocab);
    ASSERT_TRUE(got.ok()) << type << ": " << got.message();
    const auto d = compare_logits(*ref, *got, n_vocab);
    std::printf("  TinyStories-656K %-5s: max |dlogit| %.4f, rel rms %.4f, argmax differs in %d of %zu rows, %llu bytes\n",
                type, d.max_abs, d.rel_rms, d.n_argmax_differ, prompt_ids().size(),
                static_cast<unsigned long long>(report.file_bytes));
    EXPECT_LT(d.max_abs, max_abs) << type;
    EXPECT_LT(d.rel_rms, rel_rms) << type;
    if (std::string(type) == "f16") {
      // A GGUF with f16 weights is an input like any other: f16 -> q8_0.
      const std::string out2 = temp_path("656k-f16-q8_0.gguf");
      st = quantize(out, out2, "q8_0", &report);
      ASSERT_TRUE(st.ok()) << st.message();
      EXPECT_EQ(report.container, "gguf");
      auto got2 = model_logits(out2, prompt_ids(), &n_vocab);
      ASSERT_TRUE(got2.ok()) << got2.message();
      EXPECT_LT(compare_logits(*ref, *got2, n_vocab).rel_rms, 0.04);
      std::remove(out2.c_str());
    }
    std::remove(out.c_str());
  }
}

// Synthetic HF checkpoints with q/k/v biases: llama's q/k rows and biases are permuted per
// head (logits unchanged, so the bias permutation is right too); qwen2's are left alone.
TEST(QuantizeModel, HfSyntheticLlamaAndQwen2WithBiases) {
  for (const char* arch : {"llama", "qwen2"}) {
    SCOPED_TRACE(arch);
    const std::string dir = temp_path(std::string("hf-") + arch);
    write_hf_dir(dir, arch);
    const std::string out = temp_path(std::string("hf-") + arch + ".gguf");
    QuantizeReport report;
    Status st = quantize(dir, out, "f32", &report);
    ASSERT_TRUE(st.ok()) << st.message();
    EXPECT_EQ(report.permuted_qk, std::string(arch) == "llama");
    EXPECT_FALSE(report.dropped_tied_output);
    auto dst = gguf::open_model(out);
    ASSERT_TRUE(dst.ok()) << dst.message();
    EXPECT_NE(dst->find_tensor("output.weight"), nullptr);
    EXPECT_NE(dst->find_tensor("blk.1.attn_k.bias"), nullptr);
    EXPECT_EQ(dst->find("lumen.rope_layout"), nullptr);
    int32_t n_vocab = 0;
    auto a = model_logits(dir, prompt_ids(), &n_vocab);
    auto b = model_logits(out, prompt_ids(), &n_vocab);
    ASSERT_TRUE(a.ok() && b.ok()) << a.message() << b.message();
    const auto d = compare_logits(*a, *b, n_vocab);
    std::printf("  synthetic HF %s (biases) -> f32 GGUF: max |dlogit| %.2e\n", arch, d.max_abs);
    EXPECT_LE(d.max_abs, 1e-4);
    std::remove(out.c_str());
    for (const char* f : {"model.safetensors", "config.json", "tokenizer.json", "tokenizer_config.json"})
      std::remove((dir + "/" + f).c_str());
    ::rmdir(dir.c_str());
  }
}

// AWQ scales folded into the file (awq_scales.h): norm weights divided by s, the matrices'
// columns multiplied by it. Written as f32, the model computes the same logits; scales that
// do not fit a tensor are an error.
TEST(QuantizeModel, AwqScalesFoldedKeepTheLogits) {
  const std::string in = shared_path("models/stories260K/stories260K.gguf");
  const std::string out = temp_path("s260k-awq-f32.gguf");
  auto file = gguf::open_model(in);
  ASSERT_TRUE(file.ok()) << file.message();
  const int64_t n_embd = file->find_tensor("blk.0.attn_norm.weight")->view.ne[0];
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> ud(0.25f, 4.0f);
  AwqScales awq;
  for (int il = 0; il < 5; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    for (const auto& [norm, mats] : {std::pair<std::string, std::vector<std::string>>{"attn_norm", {"attn_q", "attn_k", "attn_v"}},
                                     {"ffn_norm", {"ffn_gate", "ffn_up"}}}) {
      std::vector<float> s(static_cast<size_t>(n_embd));
      for (float& v : s) v = ud(rng);
      awq.norm_divisors[p + norm + ".weight"] = s;
      for (const std::string& m : mats) awq.column_scales[p + m + ".weight"] = s;
    }
  }
  QuantizeOptions opt;
  opt.rules = *make_type_rules("f32", "", "");
  opt.awq = &awq;
  QuantizeReport report;
  ASSERT_TRUE(quantize_model(in, out, opt, &report).ok());
  auto q = gguf::open_model(out);
  ASSERT_TRUE(q.ok()) << q.message();
  const float* g0 = reinterpret_cast<const float*>(file->find_tensor("blk.0.attn_norm.weight")->view.data);
  const float* g1 = reinterpret_cast<const float*>(q->find_tensor("blk.0.attn_norm.weight")->view.data);
  EXPECT_FLOAT_EQ(g1[3], g0[3] / awq.norm_divisors["blk.0.attn_norm.weight"][3]);  // the fold happened
  int32_t n_vocab = 0;
  auto a = model_logits(in, prompt_ids(), &n_vocab);
  auto b = model_logits(out, prompt_ids(), &n_vocab);
  ASSERT_TRUE(a.ok() && b.ok()) << a.message() << b.message();
  const auto d = compare_logits(*a, *b, n_vocab);
  std::printf("  stories260K with AWQ scales in [0.25, 4] folded, f32: max |dlogit| %.2e\n", d.max_abs);
  EXPECT_LT(d.max_abs, 1e-3);  // f32 rounding of w s and g / s only
  EXPECT_EQ(d.n_argmax_differ, 0);

  awq.column_scales["blk.1.attn_q.weight"].pop_back();
  const Status st = quantize_model(in, out, opt, &report);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("blk.1.attn_q.weight"), std::string::npos) << st.message();
  std::remove(out.c_str());
}

TEST(QuantizeModel, Llama2cCheckpointToQ4_0) {
  const std::string in = shared_path("models/stories260K/stories260K.bin");
  const std::string out = temp_path("s260k-bin-q4_0.gguf");
  QuantizeReport report;
  Status st = quantize(in, out, "q4_0", &report);
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(report.container, "llama2c");
  auto dst = gguf::open_model(out);
  ASSERT_TRUE(dst.ok()) << dst.message();
  EXPECT_EQ(dst->get_string("tokenizer.ggml.model"), "llama");
  EXPECT_EQ(dst->get_int("general.file_type"), 2);
  EXPECT_EQ(dst->find_tensor("blk.0.attn_q.weight")->view.dtype, DType::kQ4_0);
  int32_t n_vocab = 0;
  auto a = model_logits(in, prompt_ids(), &n_vocab);
  auto b = model_logits(out, prompt_ids(), &n_vocab);
  ASSERT_TRUE(a.ok() && b.ok()) << a.message() << b.message();
  const auto d = compare_logits(*a, *b, n_vocab);
  std::printf("  stories260K.bin q4_0 vs f32: max |dlogit| %.4f, rel rms %.4f, argmax differs in %d rows\n", d.max_abs,
              d.rel_rms, d.n_argmax_differ);
  EXPECT_LT(d.max_abs, 6.0);  // measured 3.5 (rel rms 0.069): 4-bit weights of a 64-wide model
  EXPECT_LT(d.rel_rms, 0.12);
  std::remove(out.c_str());
}

// Already-quantized input: copied when the type stays, refused (unless allowed) when it
// would be requantized.
TEST(QuantizeModel, QuantizedInput) {
  const std::string in = shared_path("models/TinyStories-656K/TinyStories-656K-Q8_0.gguf");
  const std::string out = temp_path("656k-requant.gguf");
  QuantizeReport report;
  Status st = quantize(in, out, "q4_0", &report);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("already q8_0"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("--allow-requantize"), std::string::npos) << st.message();
  st = quantize(in, out, "q4_0", &report, /*allow_requantize=*/true);
  ASSERT_TRUE(st.ok()) << st.message();
  st = quantize(in, out, "q8_0", &report);
  ASSERT_TRUE(st.ok()) << st.message();
  auto src = gguf::open_model(in);
  auto dst = gguf::open_model(out);
  ASSERT_TRUE(src.ok() && dst.ok());
  for (const gguf::TensorInfo& t : src->tensors()) {
    const gguf::TensorInfo* d = dst->find_tensor(t.name);
    ASSERT_NE(d, nullptr) << t.name;
    ASSERT_EQ(d->view.n_bytes, t.view.n_bytes);
    EXPECT_EQ(std::memcmp(d->view.data, t.view.data, t.view.n_bytes), 0) << t.name;
  }
  std::remove(out.c_str());

  st = quantize(shared_path("models/does-not-exist.gguf"), out, "q8_0", &report);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("does-not-exist"), std::string::npos) << st.message();
}

// Mixes that need no importance matrix are written on a model whose rows are multiples of 256
// (so the i-quant mixes keep their own types, no fallbacks), and each file has the planned type
// per tensor. (iq3_xxs is not among them: its attn_q is iq2_s here, which needs one. A mix that
// planned a type lumen cannot write would be refused before anything is written, naming the
// type; none does since the 1-3 bit quantizers landed.)
TEST(QuantizeModel, MixesWithoutImatrixAreWrittenWithTheirPlannedTypes) {
  auto c = synth_preset("tiny-llama", shared_dir());
  ASSERT_TRUE(c.ok()) << c.message();
  c->n_embd = c->n_ff = 256;
  c->n_layer = 2;
  c->rules = *make_type_rules("f16", "", "");
  const std::string in = temp_path("h256-f16.gguf");
  ASSERT_TRUE(synth_model(*c, in, nullptr).ok());
  auto file = gguf::open_model(in);
  ASSERT_TRUE(file.ok()) << file.message();
  for (const char* type : {"iq4_xs", "iq4_nl", "iq3_xs", "iq3_s", "iq3_m", "q2_k", "q3_k_m", "q4_k_m"}) {
    SCOPED_TRACE(type);
    const std::string out = temp_path(std::string("h256-") + type + ".gguf");
    QuantizeReport report;
    ASSERT_TRUE(quantize(in, out, type, &report).ok());
    auto rules = make_type_rules(type, "", "");
    ASSERT_TRUE(rules.ok()) << rules.message();
    auto plan = plan_quantized_types(*file, *rules);
    ASSERT_TRUE(plan.ok()) << plan.message();
    auto q = gguf::open_model(out);
    ASSERT_TRUE(q.ok()) << q.message();
    std::map<std::string, DType> want(plan->begin(), plan->end());
    ASSERT_EQ(q->tensors().size(), want.size());
    for (const gguf::TensorInfo& t : q->tensors()) {
      ASSERT_TRUE(want.count(t.name)) << t.name;
      EXPECT_EQ(t.view.dtype, want.at(t.name)) << t.name;
      EXPECT_TRUE(can_quantize_to(t.view.dtype) || t.view.dtype == DType::kF32) << t.name;
    }
    std::remove(out.c_str());
  }
  std::remove(in.c_str());
}

}  // namespace
}  // namespace lumen::convert
