#include "convert/synth.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <iterator>

#include "convert/convert_test_util.h"
#include "gguf/model_file.h"
#include "kernels/ops.h"
#include "model/hparams.h"
#include "model/known_shapes.h"
#include "tokenizer/tokenizer.h"

namespace lumen::convert {
namespace {

using testing::model_logits;
using testing::temp_path;

// qwen2.5-0.5b's layout at a test size: 256 wide (so the K types apply), 2 layers, GQA,
// and the Qwen tokenizer truncated to 600 tokens.
SynthConfig tiny_qwen(const std::string& type) {
  auto c = synth_preset("qwen2.5-0.5b", shared_dir());
  EXPECT_TRUE(c.ok()) << c.message();
  c->n_embd = 256;
  c->n_layer = 2;
  c->n_head = 4;
  c->n_kv_head = 2;
  c->n_ff = 512;
  c->n_vocab = 600;
  c->n_ctx = 256;
  c->rules = *make_type_rules(type, "", "");
  c->n_threads = 2;
  return *c;
}

uint64_t file_hash(const std::string& path) {  // FNV-1a over the file
  std::ifstream in(path, std::ios::binary);
  uint64_t h = 0xCBF29CE484222325ull;
  for (std::istreambuf_iterator<char> it(in), end; it != end; ++it) {
    h ^= static_cast<unsigned char>(*it);
    h *= 0x100000001B3ull;
  }
  return h;
}

TEST(SynthModel, EveryTypeLoads) {
  for (const char* type : {"f32", "f16", "bf16", "q8_0", "q4_0", "q4_k", "q6_k"}) {
    SCOPED_TRACE(type);
    const SynthConfig c = tiny_qwen(type);
    const std::string out = temp_path(std::string("synth-") + type + ".gguf");
    SynthReport report;
    Status st = synth_model(c, out, &report);
    ASSERT_TRUE(st.ok()) << st.message();
    auto f = gguf::open_model(out);
    ASSERT_TRUE(f.ok()) << f.message();
    std::ifstream size_probe(out, std::ios::binary | std::ios::ate);
    EXPECT_EQ(report.file_bytes, static_cast<uint64_t>(size_probe.tellg()));
    auto hp = model::read_hparams(*f);
    ASSERT_TRUE(hp.ok()) << hp.message();
    EXPECT_EQ(hp->arch, model::Arch::kQwen2);
    EXPECT_EQ(hp->n_embd, 256);
    EXPECT_EQ(hp->n_layer, 2);
    EXPECT_EQ(hp->n_head, 4);
    EXPECT_EQ(hp->n_kv_head, 2);
    EXPECT_EQ(hp->n_ff, 512);
    EXPECT_EQ(hp->n_vocab, 600);
    EXPECT_EQ(hp->n_ctx_train, 256);
    EXPECT_TRUE(hp->tied_output);
    EXPECT_TRUE(hp->has_qkv_bias);
    EXPECT_FLOAT_EQ(hp->rope_theta, 1e6f);
    EXPECT_FLOAT_EQ(hp->rms_eps, 1e-6f);
    EXPECT_EQ(f->get_int("general.file_type"), static_cast<int64_t>(c.rules.mix->ftype));
    EXPECT_EQ(f->get_int("general.quantization_version"), 2);
    EXPECT_EQ(f->tensors().size(), 1u + 2 * 12 + 1);
    // The types are the mix's (type_rules.h), with q8_0 for what lumen cannot multiply.
    std::vector<TensorDesc> descs;
    for (const gguf::TensorInfo& t : f->tensors())
      descs.push_back(TensorDesc{t.name, std::span<const int64_t>(t.view.ne, t.view.n_dims), DType::kF32});
    auto planned = plan_tensor_types(c.rules, make_mix_model_info("qwen2", 2, 4, 2, 0), descs);
    ASSERT_TRUE(planned.ok()) << planned.message();
    for (size_t i = 0; i < descs.size(); ++i) {
      const DType p = (*planned)[i];
      const DType want = !dtype_info(p).is_quantized || kernels::matmul_supports(p) ? p : DType::kQ8_0;
      EXPECT_EQ(f->tensors()[i].view.dtype, want) << f->tensors()[i].name;
    }
    if (c.rules.mix->ftype == Ftype::kQ4_K_M) {
      EXPECT_EQ(f->find_tensor("token_embd.weight")->view.dtype, DType::kQ6_K);
      EXPECT_EQ(f->find_tensor("blk.0.ffn_up.weight")->view.dtype, DType::kQ4_K);
      EXPECT_EQ(f->find_tensor("blk.1.attn_v.weight")->view.dtype, DType::kQ6_K);  // the last eighth
    }
    // Weights N(0, 0.02), norms 1.
    const gguf::TensorInfo* w = f->find_tensor("blk.1.ffn_down.weight");
    std::vector<float> row(w->view.ne[0]);
    double sum2 = 0;
    int64_t n = 0;
    for (int64_t r = 0; r < w->view.n_rows(); ++r, n += w->view.ne[0]) {
      kernels::dequantize_row(w->view.dtype, w->view.row(r), row.data(), w->view.ne[0]);
      for (float v : row) sum2 += static_cast<double>(v) * v;
    }
    EXPECT_NEAR(std::sqrt(sum2 / n), 0.02, 0.002);
    const float* norm = reinterpret_cast<const float*>(f->find_tensor("blk.0.attn_norm.weight")->view.data);
    EXPECT_EQ(norm[0], 1.0f);
    auto tok = tok::Tokenizer::from_model_file(*f);
    ASSERT_TRUE(tok.ok()) << tok.message();
    EXPECT_EQ(tok->n_vocab(), 600);
    EXPECT_EQ(tok->pre_name(), "qwen2");
    EXPECT_FALSE(tok->encode("Hello world", false, false).empty());
    // lumen runs it.
    int32_t n_vocab = 0;
    auto logits = model_logits(out, {1, 2, 3, 4, 5}, &n_vocab);
    ASSERT_TRUE(logits.ok()) << logits.message();
    for (float v : *logits) ASSERT_TRUE(std::isfinite(v));
    std::remove(out.c_str());
  }
}

TEST(SynthModel, DeterministicAcrossThreads) {
  SynthConfig c = tiny_qwen("q4_k");
  const std::string a = temp_path("synth-a.gguf"), b = temp_path("synth-b.gguf");
  c.n_threads = 1;
  ASSERT_TRUE(synth_model(c, a, nullptr).ok());
  c.n_threads = 2;
  ASSERT_TRUE(synth_model(c, b, nullptr).ok());
  const uint64_t ha = file_hash(a);
  EXPECT_EQ(ha, file_hash(b));
  c.seed = 43;
  ASSERT_TRUE(synth_model(c, b, nullptr).ok());
  EXPECT_NE(ha, file_hash(b));
  std::printf("  tiny qwen2 q4_k seed 42: fnv1a %016llx\n", static_cast<unsigned long long>(ha));
  std::remove(a.c_str());
  std::remove(b.c_str());
}

// llama-3.2-1b's layout: llama arch, Llama 3 tokenizer, llama3 RoPE scaling stored as
// rope_freqs.weight (what lumen's model computes from the scaling parameters).
TEST(SynthModel, LlamaWithRopeFreqs) {
  auto c = synth_preset("llama-3.2-1b", shared_dir());
  ASSERT_TRUE(c.ok()) << c.message();
  EXPECT_EQ(c->n_embd, 2048);
  EXPECT_EQ(c->n_vocab, 128256);
  c->n_embd = 512;
  c->n_head = 8;   // head_dim 64 as the real model
  c->n_kv_head = 2;
  c->n_layer = 1;
  c->n_ff = 256;
  c->n_vocab = 1000;
  c->rules = *make_type_rules("q4_0", "", "");
  const std::string out = temp_path("synth-llama.gguf");
  SynthReport report;
  Status st = synth_model(*c, out, &report);
  ASSERT_TRUE(st.ok()) << st.message();
  auto f = gguf::open_model(out);
  ASSERT_TRUE(f.ok()) << f.message();
  auto hp = model::read_hparams(*f);
  ASSERT_TRUE(hp.ok()) << hp.message();
  EXPECT_EQ(hp->arch, model::Arch::kLlama);
  EXPECT_EQ(hp->rope_layout, kernels::RopeLayout::kInterleaved);
  EXPECT_EQ(f->find_tensor("blk.0.attn_q.bias"), nullptr);
  EXPECT_EQ(f->find_tensor("output.weight"), nullptr);
  const gguf::TensorInfo* rf = f->find_tensor("rope_freqs.weight");
  ASSERT_NE(rf, nullptr);
  ASSERT_EQ(rf->view.n_elements(), 32);
  model::HParams ref = *hp;
  ref.rope_scaling_factor = 32.0f;
  ref.rope_low_freq_factor = 1.0f;
  ref.rope_high_freq_factor = 4.0f;
  ref.rope_original_ctx = 8192;
  const std::vector<float> want = model::llama3_rope_freq_factors(ref);
  const float* got = reinterpret_cast<const float*>(rf->view.data);
  for (int i = 0; i < 32; ++i) EXPECT_NEAR(got[i], want[i], 1e-4 * want[i]) << i;
  EXPECT_EQ(got[0], 1.0f);
  EXPECT_EQ(got[31], 32.0f);
  auto tok = tok::Tokenizer::from_model_file(*f);
  ASSERT_TRUE(tok.ok()) << tok.message();
  EXPECT_EQ(tok->pre_name(), "llama-bpe");
  EXPECT_EQ(tok->bos_id(), 1000 - 256);  // Llama 3's added tokens renumbered after the kept ones
  int32_t n_vocab = 0;
  auto logits = model_logits(out, {1, 2, 3}, &n_vocab);
  ASSERT_TRUE(logits.ok()) << logits.message();
  std::remove(out.c_str());
}

TEST(SynthModel, PresetsAndValidation) {
  for (std::string_view name : synth_preset_names()) {
    auto c = synth_preset(name, shared_dir());
    ASSERT_TRUE(c.ok()) << c.message();
    EXPECT_TRUE(validate_synth_config(*c).ok()) << name;
  }
  auto q15 = synth_preset("qwen1.5-0.5b", shared_dir());
  EXPECT_FALSE(q15->tied);
  EXPECT_EQ(q15->n_kv_head, 16);
  // Real shapes come from the table lumen roofline plans with (model/known_shapes.h).
  for (const char* name : {"qwen3-0.6b", "qwen3-1.7b", "gemma2-2b", "gemma3-1b", "phi3-mini", "mistral-7b"}) {
    auto c = synth_preset(name, shared_dir());
    ASSERT_TRUE(c.ok()) << name;
    const model::KnownShape* shape = model::find_known_shape(name);
    ASSERT_NE(shape, nullptr) << name;
    EXPECT_EQ(c->arch, shape->arch);
    EXPECT_EQ(c->n_embd, shape->n_embd);
    EXPECT_EQ(c->head_dim(), shape->head_dim) << name;
    EXPECT_EQ(c->n_vocab, shape->n_vocab);
    EXPECT_EQ(c->sliding_window, shape->sliding_window);
  }
  EXPECT_EQ(synth_preset("gemma2-2b", shared_dir())->final_softcap, 30.0);
  EXPECT_EQ(synth_preset("mistral-7b", shared_dir())->arch, "llama");
  auto bad = synth_preset("gpt-5", shared_dir());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("unknown preset 'gpt-5'"), std::string::npos) << bad.message();

  SynthConfig c = tiny_qwen("q8_0");
  c.n_head = 5;
  Status st = validate_synth_config(c);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("--heads 5"), std::string::npos) << st.message();
  c = tiny_qwen("q8_0");
  c.n_kv_head = 3;
  EXPECT_FALSE(validate_synth_config(c).ok());
  c = tiny_qwen("q8_0");
  c.tokenizer_path = "/nonexistent/tokenizer.json";
  st = synth_model(c, temp_path("never.gguf"), nullptr);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("/nonexistent/tokenizer.json"), std::string::npos) << st.message();

  // Untied: output.weight is written.
  c = tiny_qwen("q8_0");
  c.tied = false;
  const std::string out = temp_path("synth-untied.gguf");
  ASSERT_TRUE(synth_model(c, out, nullptr).ok());
  auto f = gguf::open_model(out);
  ASSERT_TRUE(f.ok());
  EXPECT_NE(f->find_tensor("output.weight"), nullptr);
  std::remove(out.c_str());
}

// The test-model presets write llama.cpp's names for each architecture (the goldens in
// tests/data/arch were made by loading these files into llama.cpp).
TEST(SynthModel, TinyPresetsWriteEachArchitecturesTensors) {
  struct Want {
    const char* preset;
    const char* arch;
    std::vector<const char*> tensors;   // must exist
    std::vector<const char*> absent;    // must not
    std::vector<const char*> keys;      // metadata that must exist
  };
  const Want wants[] = {
      {"tiny-llama", "llama", {"blk.2.ffn_gate.weight", "output.weight"}, {"blk.0.attn_q.bias"}, {}},
      {"tiny-qwen2", "qwen2", {"blk.0.attn_q.bias", "blk.0.attn_v.bias"}, {"output.weight"}, {}},
      {"tiny-qwen3", "qwen3", {"blk.0.attn_q_norm.weight", "blk.0.attn_k_norm.weight"}, {"blk.0.attn_q.bias"},
       {"qwen3.attention.key_length"}},
      {"tiny-gemma", "gemma", {"blk.0.ffn_gate.weight"}, {"output.weight"}, {"gemma.attention.key_length"}},
      {"tiny-gemma2", "gemma2", {"blk.3.post_attention_norm.weight", "blk.3.post_ffw_norm.weight"}, {"output.weight"},
       {"gemma2.attention.sliding_window", "gemma2.attn_logit_softcapping", "gemma2.final_logit_softcapping"}},
      {"tiny-gemma3", "gemma3", {"blk.5.attn_q_norm.weight", "blk.5.post_ffw_norm.weight"}, {},
       {"gemma3.attention.sliding_window"}},
      {"tiny-phi3", "phi3", {"blk.0.attn_qkv.weight", "output.weight"}, {"blk.0.attn_q.weight", "blk.0.ffn_gate.weight"},
       {"phi3.attention.sliding_window", "phi3.rope.scaling.original_context_length"}},
      {"tiny-phi3-longrope", "phi3", {"rope_factors_long.weight", "rope_factors_short.weight"}, {},
       {"phi3.rope.scaling.attn_factor"}},
      {"tiny-stablelm", "stablelm", {"blk.0.attn_norm.bias", "output_norm.bias", "blk.0.attn_k.bias"}, {},
       {"stablelm.attention.layer_norm_epsilon"}},
      {"tiny-starcoder2", "starcoder2", {"blk.0.attn_output.bias", "blk.0.ffn_up.bias", "blk.0.ffn_down.bias"},
       {"blk.0.ffn_gate.weight"}, {"starcoder2.attention.layer_norm_epsilon"}},
      {"tiny-smollm3", "smollm3", {"blk.3.attn_q.weight"}, {}, {}},
      {"tiny-mistral", "llama", {"blk.0.attn_q.weight"}, {}, {"llama.attention.sliding_window"}},
      {"tiny-llama-cla", "llama", {"blk.0.attn_k.weight", "blk.1.attn_q.weight", "blk.2.attn_v.weight"},
       {"blk.1.attn_k.weight", "blk.1.attn_v.weight", "blk.3.attn_k.weight"}, {"llama.attention.kv_source_layers"}},
      {"tiny-qwen3moe", "qwen3moe", {"blk.2.ffn_gate_inp.weight", "blk.2.ffn_down_exps.weight", "blk.0.attn_q_norm.weight"},
       {"blk.0.ffn_gate.weight", "blk.0.ffn_gate_inp_shexp.weight"},
       {"qwen3moe.expert_count", "qwen3moe.expert_used_count", "qwen3moe.expert_feed_forward_length"}},
      {"tiny-olmoe", "olmoe", {"blk.0.ffn_up_exps.weight", "blk.0.attn_k_norm.weight", "output.weight"},
       {"blk.0.ffn_up.weight"}, {"olmoe.expert_count"}},
      {"tiny-mixtral", "llama", {"blk.0.ffn_gate_exps.weight", "blk.0.ffn_gate_inp.weight"}, {"blk.0.ffn_gate.weight"},
       {"llama.expert_count", "llama.expert_used_count"}},
      {"tiny-qwen2moe", "qwen2moe",
       {"blk.0.ffn_gate_inp_shexp.weight", "blk.0.ffn_down_shexp.weight", "blk.0.attn_q.bias", "output.weight"}, {},
       {"qwen2moe.expert_feed_forward_length", "qwen2moe.expert_shared_feed_forward_length"}},
  };
  for (const Want& w : wants) {
    SCOPED_TRACE(w.preset);
    auto c = synth_preset(w.preset, shared_dir());
    ASSERT_TRUE(c.ok()) << c.message();
    c->rules = *make_type_rules("f32", "", "");
    const std::string out = temp_path(std::string(w.preset) + ".gguf");
    Status st = synth_model(*c, out, nullptr);
    ASSERT_TRUE(st.ok()) << st.message();
    auto f = gguf::open_model(out);
    ASSERT_TRUE(f.ok()) << f.message();
    EXPECT_EQ(f->get_string("general.architecture"), w.arch);
    EXPECT_EQ(f->get_string("general.name"), "lumen synth test model");
    for (const char* t : w.tensors) EXPECT_NE(f->find_tensor(t), nullptr) << t;
    for (const char* t : w.absent) EXPECT_EQ(f->find_tensor(t), nullptr) << t;
    for (const char* k : w.keys) EXPECT_NE(f->find(k), nullptr) << k;
    EXPECT_EQ(f->get_string_array("tokenizer.ggml.tokens")->size(), 512u);
    // Norm weights are 1 + N(0, 0.1), weights N(0, 0.15).
    const float* norm = reinterpret_cast<const float*>(f->find_tensor("blk.0.attn_norm.weight")->view.data);
    EXPECT_NE(norm[0], 1.0f);
    EXPECT_NEAR(norm[0], 1.0f, 0.5f);
    std::remove(out.c_str());
  }
  // Architecture rules are checked before anything is written.
  auto c = synth_preset("tiny-gemma2", shared_dir());
  c->sliding_window = 0;
  Status st = validate_synth_config(*c);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("needs a sliding window"), std::string::npos) << st.message();
  c = synth_preset("tiny-qwen2", shared_dir());
  c->n_head_dim = 32;
  st = validate_synth_config(*c);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("must equal --hidden"), std::string::npos) << st.message();
  c = synth_preset("tiny-llama-cla", shared_dir());
  c->kv_source_layers = {-1, 0, 1, -1};  // layer 2 would read layer 1, which stores nothing
  st = validate_synth_config(*c);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("kv_source_layers[2] = 1"), std::string::npos) << st.message();
  // Experts: 3-D tensors [in, out, n_expert]; the router stays f32 at any --type.
  c = synth_preset("tiny-qwen3moe", shared_dir());
  c->rules = *make_type_rules("q8_0", "", "");
  c->n_ff_exp = 32;
  {
    const std::string out = temp_path("synth-moe-q8.gguf");
    ASSERT_TRUE(synth_model(*c, out, nullptr).ok());
    auto f = gguf::open_model(out);
    ASSERT_TRUE(f.ok()) << f.message();
    const TensorView& down = f->find_tensor("blk.1.ffn_down_exps.weight")->view;
    EXPECT_EQ(down.n_dims, 3);
    EXPECT_EQ(down.ne[0], 32);
    EXPECT_EQ(down.ne[1], 64);
    EXPECT_EQ(down.ne[2], 8);
    EXPECT_EQ(down.dtype, DType::kQ8_0);
    EXPECT_EQ(f->find_tensor("blk.1.ffn_gate_inp.weight")->view.dtype, DType::kF32);
    std::remove(out.c_str());
  }
  c = synth_preset("tiny-qwen3moe", shared_dir());
  c->n_expert_used = 9;  // more than the 8 experts
  st = validate_synth_config(*c);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("need 1 <= used <= experts"), std::string::npos) << st.message();
  c = synth_preset("tiny-qwen3moe", shared_dir());
  c->n_expert = 0;
  st = validate_synth_config(*c);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("needs experts"), std::string::npos) << st.message();
  c = synth_preset("tiny-qwen2", shared_dir());
  c->n_expert = 4;
  c->n_expert_used = 2;
  st = validate_synth_config(*c);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("no mixture-of-experts form"), std::string::npos) << st.message();
  c = synth_preset("tiny-olmoe", shared_dir());
  c->n_kv_head = 2;
  st = validate_synth_config(*c);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("--kv-heads must equal --heads"), std::string::npos) << st.message();
  c = synth_preset("tiny-llama", shared_dir());
  c->n_vocab = 600;  // a GGUF vocabulary is copied as it is: its size must match
  st = synth_model(*c, temp_path("never.gguf"), nullptr);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("has 512 tokens, but --vocab is 600"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace lumen::convert
