#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>

#include "base/fp16.h"
#include "gguf/gguf_test_util.h"
#include "gguf/model_file.h"
#include "gguf/safetensors.h"

namespace lumen::gguf {
namespace {

using testing::f32_bytes;
using testing::make_safetensors;
using testing::StTensor;
using testing::TempDir;
using testing::write_bytes;
using testing::write_text;

std::string model_dir() { return testing::tinystories656k_dir(); }

TEST(SafetensorsHfDir, TinyStories656k) {
  auto file = open_hf_dir(model_dir());
  ASSERT_TRUE(file.ok()) << file.message();
  EXPECT_EQ(file->container(), "safetensors");
  EXPECT_EQ(file->gguf_version(), 0u);
  EXPECT_EQ(file->get_string("general.architecture"), "llama");
  EXPECT_EQ(file->get_int("llama.embedding_length"), 128);
  EXPECT_EQ(file->get_int("llama.feed_forward_length"), 384);
  EXPECT_EQ(file->get_int("llama.block_count"), 2);
  EXPECT_EQ(file->get_int("llama.attention.head_count"), 8);
  EXPECT_EQ(file->get_int("llama.attention.head_count_kv"), 4);
  EXPECT_EQ(file->get_int("llama.context_length"), 512);
  EXPECT_EQ(file->get_int("llama.vocab_size"), 2048);
  EXPECT_EQ(file->get_int("llama.rope.dimension_count"), 16);
  EXPECT_NEAR(*file->get_float("llama.attention.layer_norm_rms_epsilon"), 1e-6, 1e-12);
  EXPECT_EQ(file->get_float("llama.rope.freq_base"), 10000.0);
  EXPECT_EQ(file->get_string("lumen.rope_layout"), "neox");
  EXPECT_EQ(file->get_bool("lumen.tie_word_embeddings"), true);
  EXPECT_EQ(file->find("llama.rope.scaling.type"), nullptr);
  EXPECT_EQ(file->get_int("tokenizer.ggml.bos_token_id"), 1);
  EXPECT_EQ(file->get_int("tokenizer.ggml.eos_token_id"), 2);
  EXPECT_FALSE(file->hf_tokenizer_json().empty());
  EXPECT_NE(file->hf_tokenizer_config_json().find("LlamaTokenizer"), std::string::npos);

  // 20 stored tensors (lm_head + 2 x 9 + norm) + token_embd aliased to lm_head's bytes.
  EXPECT_EQ(file->tensors().size(), 21u);
  const TensorInfo* emb = file->find_tensor("token_embd.weight");
  const TensorInfo* out = file->find_tensor("output.weight");
  ASSERT_NE(emb, nullptr);
  ASSERT_NE(out, nullptr);
  EXPECT_EQ(emb->view.data, out->view.data);
  EXPECT_EQ(file->data_bytes(), 2624000u);  // the safetensors data section; the alias counts once
  EXPECT_EQ(emb->view.ne[0], 128);
  EXPECT_EQ(emb->view.ne[1], 2048);
  struct Expect { const char* name; int64_t ne0, ne1; };
  for (const Expect& e : {Expect{"blk.0.attn_q.weight", 128, 128}, Expect{"blk.0.attn_k.weight", 128, 64},
                          Expect{"blk.1.attn_v.weight", 128, 64}, Expect{"blk.1.attn_output.weight", 128, 128},
                          Expect{"blk.0.ffn_gate.weight", 128, 384}, Expect{"blk.0.ffn_up.weight", 128, 384},
                          Expect{"blk.1.ffn_down.weight", 384, 128}, Expect{"blk.1.attn_norm.weight", 128, 1},
                          Expect{"blk.1.ffn_norm.weight", 128, 1}, Expect{"output_norm.weight", 128, 1}}) {
    const TensorInfo* t = file->find_tensor(e.name);
    ASSERT_NE(t, nullptr) << e.name;
    EXPECT_EQ(t->view.dtype, DType::kF32) << e.name;
    EXPECT_EQ(t->view.ne[0], e.ne0) << e.name;
    EXPECT_EQ(t->view.ne[1], e.ne1) << e.name;
    EXPECT_EQ(t->view.n_dims, e.ne1 == 1 ? 1 : 2) << e.name;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t->view.data) % 4, 0u) << e.name;
  }
  auto via_open_model = open_model(model_dir());
  ASSERT_TRUE(via_open_model.ok()) << via_open_model.message();
  EXPECT_EQ(via_open_model->container(), "safetensors");
}

// Reads element i of a Q8_0 row-major tensor: w = d * q.
float q8_0_at(const TensorView& v, int64_t row, int64_t col) {
  const std::byte* block = v.row(row) + (col / 32) * 34;
  uint16_t d;
  std::memcpy(&d, block, 2);
  return fp16_to_f32(d) * static_cast<float>(static_cast<int8_t>(block[2 + col % 32]));
}

float f32_at(const TensorView& v, int64_t row, int64_t col) {
  float f;
  std::memcpy(&f, v.row(row) + col * 4, 4);
  return f;
}

// max |hf[src_row(r)][c] - gguf[r][c]| over the tensor, relative to the tensor's max |w|.
double max_rel_error(const TensorView& hf, const TensorView& q8, const std::function<int64_t(int64_t)>& src_row) {
  double max_err = 0, max_abs = 0;
  for (int64_t r = 0; r < hf.ne[1]; ++r)
    for (int64_t c = 0; c < hf.ne[0]; ++c) {
      const float a = f32_at(hf, src_row(r), c);
      max_abs = std::max(max_abs, std::fabs(static_cast<double>(a)));
      max_err = std::max(max_err, std::fabs(static_cast<double>(a) - q8_0_at(q8, r, c)));
    }
  return max_err / max_abs;
}

// The HF copy and llama.cpp's Q8_0 conversion are the same model. llama.cpp permuted the
// q/k rows of each head from HF's rotate-half layout to the interleaved one:
// gguf row (h, 2i + j) = hf row (h, j * head_dim/2 + i). We keep HF's layout (rope "neox").
TEST(SafetensorsHfDir, MatchesLlamaCppConversionUpToRopePermutation) {
  auto hf = open_hf_dir(model_dir());
  ASSERT_TRUE(hf.ok()) << hf.message();
  auto q8 = open_gguf(model_dir() + "/TinyStories-656K-Q8_0.gguf");
  ASSERT_TRUE(q8.ok()) << q8.message();
  const int64_t head_dim = 16;
  auto identity = [](int64_t r) { return r; };
  auto permuted = [&](int64_t r) {
    const int64_t h = r / head_dim, within = r % head_dim;
    return h * head_dim + (within % 2) * (head_dim / 2) + within / 2;
  };
  for (const TensorInfo& t : q8->tensors()) {
    const TensorInfo* h = hf->find_tensor(t.name);
    ASSERT_NE(h, nullptr) << t.name;
    ASSERT_EQ(h->view.ne[0], t.view.ne[0]) << t.name;
    ASSERT_EQ(h->view.ne[1], t.view.ne[1]) << t.name;
    if (t.view.dtype == DType::kF32) {
      EXPECT_EQ(std::memcmp(h->view.data, t.view.data, t.view.n_bytes), 0) << t.name;
      continue;
    }
    const bool is_qk = t.name.find("attn_q") != std::string::npos || t.name.find("attn_k") != std::string::npos;
    const double err_direct = max_rel_error(h->view, t.view, identity);
    const double err_perm = max_rel_error(h->view, t.view, permuted);
    if (is_qk) {
      EXPECT_LT(err_perm, 0.01) << t.name;
      EXPECT_GT(err_direct, 0.1) << t.name;
    } else {
      EXPECT_LT(err_direct, 0.01) << t.name;
    }
  }
}

void write_config(const std::string& dir, const std::string& extra = "") {
  write_text(dir + "/config.json",
             R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 8,
                 "intermediate_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2,
                 "num_key_value_heads": 1, "max_position_embeddings": 64, "vocab_size": 4,
                 "rms_norm_eps": 1e-5)" + extra + "}");
}

std::vector<StTensor> tiny_llama_tensors(bool with_lm_head, bool with_embed) {
  std::vector<StTensor> t;
  if (with_embed) t.push_back({"model.embed_tokens.weight", "F32", {4, 8}, f32_bytes(32)});
  t.push_back({"model.layers.0.input_layernorm.weight", "F32", {8}, f32_bytes(8)});
  t.push_back({"model.layers.0.self_attn.q_proj.weight", "F32", {8, 8}, f32_bytes(64)});
  t.push_back({"model.layers.0.self_attn.k_proj.weight", "F32", {4, 8}, f32_bytes(32)});
  t.push_back({"model.layers.0.self_attn.v_proj.weight", "F32", {4, 8}, f32_bytes(32)});
  t.push_back({"model.layers.0.self_attn.o_proj.weight", "F32", {8, 8}, f32_bytes(64)});
  t.push_back({"model.layers.0.post_attention_layernorm.weight", "F32", {8}, f32_bytes(8)});
  t.push_back({"model.layers.0.mlp.gate_proj.weight", "F32", {16, 8}, f32_bytes(128)});
  t.push_back({"model.layers.0.mlp.up_proj.weight", "F32", {16, 8}, f32_bytes(128)});
  t.push_back({"model.layers.0.mlp.down_proj.weight", "F32", {8, 16}, f32_bytes(128)});
  t.push_back({"model.norm.weight", "F32", {8}, f32_bytes(8)});
  if (with_lm_head) t.push_back({"lm_head.weight", "F32", {4, 8}, f32_bytes(32, 100.0f)});
  return t;
}

TEST(SafetensorsHfDir, ShardedIndexMatchesSingleFile) {
  auto single = open_hf_dir(model_dir());
  ASSERT_TRUE(single.ok()) << single.message();
  TempDir dir;
  std::filesystem::copy_file(model_dir() + "/config.json", dir.file("config.json"));
  // Rebuild the real model as two shards from its HF-named tensors.
  auto image = testing::read_bytes(model_dir() + "/model.safetensors");
  auto parsed = parse_safetensors(image, "model.safetensors");
  ASSERT_TRUE(parsed.ok()) << parsed.message();
  std::vector<StTensor> shard[2];
  nlohmann::json weight_map = nlohmann::json::object();
  for (size_t i = 0; i < parsed->tensors.size(); ++i) {
    const SafetensorsTensor& t = parsed->tensors[i];
    const int s = i % 2;
    shard[s].push_back({t.name, "F32", t.shape, std::vector<std::byte>(t.data.begin(), t.data.end())});
    weight_map[t.name] = "model-0000" + std::to_string(s + 1) + "-of-00002.safetensors";
  }
  write_bytes(dir.file("model-00001-of-00002.safetensors"), make_safetensors(shard[0], parsed->metadata));
  write_bytes(dir.file("model-00002-of-00002.safetensors"), make_safetensors(shard[1]));
  write_text(dir.file("model.safetensors.index.json"),
             nlohmann::json{{"metadata", {{"total_size", 1}}}, {"weight_map", weight_map}}.dump());
  auto sharded = open_hf_dir(dir.path());
  ASSERT_TRUE(sharded.ok()) << sharded.message();
  ASSERT_EQ(sharded->tensors().size(), single->tensors().size());
  for (const TensorInfo& t : single->tensors()) {
    const TensorInfo* u = sharded->find_tensor(t.name);
    ASSERT_NE(u, nullptr) << t.name;
    ASSERT_EQ(u->view.n_bytes, t.view.n_bytes) << t.name;
    EXPECT_EQ(std::memcmp(u->view.data, t.view.data, t.view.n_bytes), 0) << t.name;
    for (int d = 0; d < 4; ++d) EXPECT_EQ(u->view.ne[d], t.view.ne[d]) << t.name;
  }
  EXPECT_TRUE(sharded->hf_tokenizer_json().empty());

  // The index names a tensor its shard lacks.
  weight_map["model.extra.weight"] = "model-00002-of-00002.safetensors";
  write_text(dir.file("model.safetensors.index.json"), nlohmann::json{{"weight_map", weight_map}}.dump());
  auto lacking = open_hf_dir(dir.path());
  ASSERT_FALSE(lacking.ok());
  EXPECT_NE(lacking.message().find("model.extra.weight"), std::string::npos) << lacking.message();
}

TEST(SafetensorsHfDir, RejectsPathTraversalInIndex) {
  TempDir dir;
  write_config(dir.path());
  for (const char* bad : {"../model.safetensors", "/etc/passwd", "a/../../b.safetensors", "./x", "", "a\\..\\b"}) {
    write_text(dir.file("model.safetensors.index.json"),
               nlohmann::json{{"weight_map", {{"model.norm.weight", bad}}}}.dump());
    auto r = open_hf_dir(dir.path());
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.message().find("not a plain relative path"), std::string::npos) << r.message();
  }
}

TEST(SafetensorsHfDir, TiedAndUntiedEmbeddings) {
  {
    TempDir dir;
    write_config(dir.path(), R"(, "tie_word_embeddings": true)");
    write_bytes(dir.file("model.safetensors"), make_safetensors(tiny_llama_tensors(false, true)));
    auto r = open_hf_dir(dir.path());
    ASSERT_TRUE(r.ok()) << r.message();
    EXPECT_EQ(r->find_tensor("output.weight"), nullptr);  // the model layer ties
    ASSERT_NE(r->find_tensor("token_embd.weight"), nullptr);
    EXPECT_EQ(r->find_tensor("blk.0.ffn_down.weight")->view.ne[0], 16);
  }
  {
    TempDir dir;
    write_config(dir.path(), R"(, "tie_word_embeddings": true)");
    write_bytes(dir.file("model.safetensors"), make_safetensors(tiny_llama_tensors(true, false)));
    auto r = open_hf_dir(dir.path());
    ASSERT_TRUE(r.ok()) << r.message();
    EXPECT_EQ(r->find_tensor("token_embd.weight")->view.data, r->find_tensor("output.weight")->view.data);
  }
  {
    TempDir dir;  // lm_head only, untied, no alias: no embedding
    write_config(dir.path());
    write_bytes(dir.file("model.safetensors"), make_safetensors(tiny_llama_tensors(true, false)));
    auto r = open_hf_dir(dir.path());
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.message().find("embed_tokens"), std::string::npos) << r.message();
  }
}

TEST(SafetensorsHfDir, ConfigTranslation) {
  TempDir dir;
  write_bytes(dir.file("model.safetensors"), make_safetensors(tiny_llama_tensors(true, true)));
  write_config(dir.path(), R"(, "head_dim": 6, "rope_theta": 500000.0,
      "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                       "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
      "bos_token_id": 5, "eos_token_id": [7, 8])");
  write_text(dir.file("generation_config.json"), R"({"eos_token_id": [9, 10, 11]})");
  write_text(dir.file("tokenizer_config.json"), R"({"chat_template": "{{ messages }}"})");
  auto r = open_hf_dir(dir.path());
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r->get_int("llama.rope.dimension_count"), 6);
  EXPECT_EQ(r->get_int("llama.attention.key_length"), 6);
  EXPECT_EQ(r->get_int("llama.attention.value_length"), 6);
  EXPECT_EQ(r->get_float("llama.rope.freq_base"), 500000.0);
  EXPECT_EQ(r->get_string("llama.rope.scaling.type"), "llama3");
  EXPECT_EQ(r->get_float("llama.rope.scaling.factor"), 8.0);
  EXPECT_EQ(r->get_float("llama.rope.scaling.low_freq_factor"), 1.0);
  EXPECT_EQ(r->get_float("llama.rope.scaling.high_freq_factor"), 4.0);
  EXPECT_EQ(r->get_int("llama.rope.scaling.original_context_length"), 8192);
  EXPECT_EQ(r->get_int("tokenizer.ggml.bos_token_id"), 5);
  EXPECT_EQ(r->get_int("tokenizer.ggml.eos_token_id"), 9);  // generation_config wins
  EXPECT_EQ(*r->get_int_array("lumen.eos_token_ids"), (std::vector<int64_t>{9, 10, 11}));
  EXPECT_EQ(r->get_string("tokenizer.chat_template"), "{{ messages }}");

  write_config(dir.path(), R"(, "rope_scaling": {"type": "linear", "factor": 2.0})");
  r = open_hf_dir(dir.path());
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r->get_string("llama.rope.scaling.type"), "linear");
  EXPECT_EQ(r->get_float("llama.rope.scaling.factor"), 2.0);
  EXPECT_EQ(r->get_int("llama.attention.head_count_kv"), 1);
  EXPECT_EQ(r->find("llama.attention.key_length"), nullptr);

  // transformers 5 puts rope_theta inside rope_parameters.
  write_config(dir.path(), R"(, "rope_parameters": {"rope_theta": 1000.0, "rope_type": "default"})");
  r = open_hf_dir(dir.path());
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r->get_float("llama.rope.freq_base"), 1000.0);

  auto expect_error = [&](const std::string& extra, const std::string& needle) {
    write_config(dir.path(), extra);
    auto bad = open_hf_dir(dir.path());
    ASSERT_FALSE(bad.ok()) << extra;
    EXPECT_NE(bad.message().find(needle), std::string::npos) << bad.message();
  };
  expect_error(R"(, "rope_scaling": {"type": "yarn", "factor": 4.0})", "yarn");
  expect_error(R"(, "rope_scaling": {"type": "linear"})", "factor");
  expect_error(R"(, "num_key_value_heads": 3)", "not a multiple of num_key_value_heads 3");  // duplicate key: last wins
}

TEST(SafetensorsHfDir, ConfigErrors) {
  TempDir dir;
  write_bytes(dir.file("model.safetensors"), make_safetensors(tiny_llama_tensors(true, true)));
  auto expect_error = [&](const std::string& config, const std::string& needle) {
    write_text(dir.file("config.json"), config);
    auto bad = open_hf_dir(dir.path());
    ASSERT_FALSE(bad.ok()) << config;
    EXPECT_NE(bad.message().find(needle), std::string::npos) << bad.message();
  };
  const std::string base = R"("hidden_size": 8, "intermediate_size": 16, "num_hidden_layers": 1,
      "max_position_embeddings": 64, "vocab_size": 4)";
  expect_error(R"({"model_type": "falcon", )" + base + "}", "falcon");
  expect_error(R"({"model_type": "llama", )" + base + R"(, "num_attention_heads": 2, "num_key_value_heads": 3})",
               "not a multiple of num_key_value_heads");
  expect_error(R"({"model_type": "llama", )" + base + R"(, "num_attention_heads": "2"})", "must be an integer");
  expect_error(R"({"model_type": "llama", )" + base + R"(, "num_attention_heads": -2})", "out of range");
  expect_error(R"({"model_type": "llama", )" + base + "}", "missing 'num_attention_heads'");
  expect_error(R"({"model_type": "mistral", "sliding_window": -4, )" + base + R"(, "num_attention_heads": 2})",
               "sliding_window");
  expect_error(R"({"model_type": "qwen2", "use_sliding_window": true, )" + base + R"(, "num_attention_heads": 2})",
               "use_sliding_window");
  expect_error(R"({"model_type": "llama", )", "invalid JSON");
  expect_error(std::string(1000, '[') + std::string(1000, ']'), "nested deeper");
  expect_error("[1, 2]", "not a JSON object");
  // Qwen2 loads, biases included; Mistral without a window is llama.
  write_text(dir.file("config.json"),
             R"({"architectures": ["MistralForCausalLM"], "sliding_window": null, "num_attention_heads": 2, )" + base + "}");
  auto mistral = open_hf_dir(dir.path());
  ASSERT_TRUE(mistral.ok()) << mistral.message();
  EXPECT_EQ(mistral->get_string("general.architecture"), "llama");
  EXPECT_EQ(mistral->get_int("llama.attention.sliding_window").value_or(0), 0);
  // With a window shorter than the context, every layer slides (Mistral 7B v0.1).
  write_text(dir.file("config.json"),
             R"({"architectures": ["MistralForCausalLM"], "sliding_window": 4, "num_attention_heads": 2, )" + base + "}");
  auto mistral_swa = open_hf_dir(dir.path());
  ASSERT_TRUE(mistral_swa.ok()) << mistral_swa.message();
  EXPECT_EQ(mistral_swa->get_int("llama.attention.sliding_window"), 4);

  auto tensors = tiny_llama_tensors(true, true);
  tensors.push_back({"model.layers.0.self_attn.q_proj.bias", "F32", {8}, f32_bytes(8)});
  tensors.push_back({"model.layers.0.self_attn.k_proj.bias", "BF16", {4}, std::vector<std::byte>(8)});
  tensors.push_back({"model.layers.0.self_attn.v_proj.bias", "F16", {4}, std::vector<std::byte>(8)});
  write_bytes(dir.file("model.safetensors"), make_safetensors(tensors));
  write_text(dir.file("config.json"), R"({"model_type": "qwen2", "num_attention_heads": 2, )" + base + "}");
  auto qwen = open_hf_dir(dir.path());
  ASSERT_TRUE(qwen.ok()) << qwen.message();
  EXPECT_EQ(qwen->get_string("general.architecture"), "qwen2");
  EXPECT_EQ(qwen->get_int("qwen2.block_count"), 1);
  EXPECT_EQ(qwen->find_tensor("blk.0.attn_q.bias")->view.ne[0], 8);
  EXPECT_EQ(qwen->find_tensor("blk.0.attn_k.bias")->view.dtype, DType::kBF16);
  EXPECT_EQ(qwen->find_tensor("blk.0.attn_v.bias")->view.dtype, DType::kF16);

  // A tensor for a layer the config does not have.
  tensors.push_back({"model.layers.1.input_layernorm.weight", "F32", {8}, f32_bytes(8)});
  write_bytes(dir.file("model.safetensors"), make_safetensors(tensors));
  auto extra_layer = open_hf_dir(dir.path());
  ASSERT_FALSE(extra_layer.ok());
  EXPECT_NE(extra_layer.message().find("layer 1"), std::string::npos) << extra_layer.message();

  std::filesystem::remove(dir.file("model.safetensors"));
  auto none = open_hf_dir(dir.path());
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.message().find("no model.safetensors"), std::string::npos) << none.message();
  auto no_dir = open_hf_dir(dir.file("nope"));
  ASSERT_FALSE(no_dir.ok());
  EXPECT_NE(no_dir.message().find("config.json"), std::string::npos) << no_dir.message();
}

// Per-architecture config keys and tensor changes (hf_config.cc, hf_arch.h); the twins in
// tests/data/arch check the same against whole models.
TEST(SafetensorsHfDir, ArchitectureSpecificConfig) {
  TempDir dir;
  const std::string base = R"("hidden_size": 8, "intermediate_size": 16, "num_hidden_layers": 1,
      "max_position_embeddings": 64, "vocab_size": 4, "num_attention_heads": 2, "num_key_value_heads": 1)";
  auto open_with = [&](const std::string& config) {
    write_text(dir.file("config.json"), "{" + config + ", " + base + "}");
    return open_hf_dir(dir.path());
  };
  auto expect_error = [&](const std::string& config, const std::string& needle) {
    auto bad = open_with(config);
    ASSERT_FALSE(bad.ok()) << config;
    EXPECT_NE(bad.message().find(needle), std::string::npos) << bad.message();
  };
  write_bytes(dir.file("model.safetensors"), make_safetensors(tiny_llama_tensors(false, true)));

  // Gemma: norms + 1, as f32 whatever the stored type; the output tied by default.
  auto tensors = tiny_llama_tensors(false, true);
  for (StTensor& t : tensors) {
    if (t.name == "model.layers.0.input_layernorm.weight") {
      t.dtype = "BF16";
      t.data.assign(16, std::byte{0});
      t.data[1] = std::byte{0x3F};  // bf16 0x3F00 = 0.5
    }
  }
  write_bytes(dir.file("model.safetensors"), make_safetensors(tensors));
  auto gemma = open_with(R"("model_type": "gemma", "head_dim": 4)");
  ASSERT_TRUE(gemma.ok()) << gemma.message();
  const gguf::TensorInfo* norm = gemma->find_tensor("blk.0.attn_norm.weight");
  ASSERT_EQ(norm->view.dtype, DType::kF32);
  EXPECT_EQ(reinterpret_cast<const float*>(norm->view.data)[0], 1.5f);
  EXPECT_EQ(reinterpret_cast<const float*>(norm->view.data)[1], 1.0f);
  EXPECT_EQ(gemma->get_bool("lumen.tie_word_embeddings"), true);
  write_bytes(dir.file("model.safetensors"), make_safetensors(tiny_llama_tensors(false, true)));

  // Gemma 2: the window is required; soft-caps default to the config class's; the query
  // scale must be the one a GGUF of this shape implies.
  expect_error(R"("model_type": "gemma2", "head_dim": 4)", "missing 'sliding_window'");
  auto g2 = open_with(R"("model_type": "gemma2", "head_dim": 4, "sliding_window": 8, "query_pre_attn_scalar": 4)");
  ASSERT_TRUE(g2.ok()) << g2.message();
  EXPECT_EQ(g2->get_int("gemma2.attention.sliding_window"), 8);
  EXPECT_EQ(g2->get_float("gemma2.attn_logit_softcapping"), 50.0);
  EXPECT_EQ(g2->get_float("gemma2.final_logit_softcapping"), 30.0);
  expect_error(R"("model_type": "gemma2", "head_dim": 4, "sliding_window": 8, "query_pre_attn_scalar": 3)",
               "query_pre_attn_scalar");

  // Gemma 3: local RoPE base; the layer pattern as a period or per-layer flags.
  auto g3 = open_with(R"("model_type": "gemma3_text", "head_dim": 4, "sliding_window": 8, "rope_local_base_freq": 20000.0,
                         "rope_scaling": {"rope_type": "linear", "factor": 8.0})");
  ASSERT_TRUE(g3.ok()) << g3.message();
  EXPECT_EQ(g3->get_string("general.architecture"), "gemma3");
  EXPECT_EQ(g3->get_float("gemma3.rope.freq_base_swa"), 20000.0);
  EXPECT_EQ(g3->get_float("gemma3.rope.scaling.factor"), 8.0);
  auto g3p = open_with(R"("model_type": "gemma3_text", "head_dim": 4, "sliding_window": 8, "sliding_window_pattern": 4)");
  ASSERT_TRUE(g3p.ok()) << g3p.message();
  EXPECT_EQ(g3p->get_int("gemma3.attention.sliding_window_pattern"), 4);
  auto g3t = open_with(R"("model_type": "gemma3_text", "head_dim": 4, "sliding_window": 8, "layer_types": ["full_attention"])");
  ASSERT_TRUE(g3t.ok()) << g3t.message();
  ASSERT_NE(g3t->get_int_array("gemma3.attention.sliding_window_pattern"), nullptr);
  EXPECT_EQ(*g3t->get_int_array("gemma3.attention.sliding_window_pattern"), std::vector<int64_t>{0});
  expect_error(R"("model_type": "gemma3_text", "sliding_window": 8, "layer_types": ["full_attention", "full_attention"])",
               "layer_types");
  expect_error(R"("model_type": "gemma3_text", "sliding_window": 8, "layer_types": ["chunked_attention"])", "layer_types[0]");

  // StableLM: partial rotary and LayerNorm epsilon; StarCoder2's epsilon name.
  auto st = open_with(R"("model_type": "stablelm", "partial_rotary_factor": 0.5, "layer_norm_eps": 1e-4)");
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(st->get_int("stablelm.rope.dimension_count"), 2);
  EXPECT_NEAR(*st->get_float("stablelm.attention.layer_norm_epsilon"), 1e-4, 1e-9);
  expect_error(R"("model_type": "stablelm", "qk_layernorm": true)", "qk_layernorm");
  expect_error(R"("model_type": "stablelm", "partial_rotary_factor": 0.2)", "rotary dims");
  auto sc = open_with(R"("model_type": "starcoder2", "norm_epsilon": 1e-3)");
  ASSERT_TRUE(sc.ok()) << sc.message();
  EXPECT_NEAR(*sc->get_float("starcoder2.attention.layer_norm_epsilon"), 1e-3, 1e-9);

  // SmolLM3: NoPE on every 4th layer only.
  ASSERT_TRUE(open_with(R"("model_type": "smollm3", "no_rope_layers": [1])").ok());
  expect_error(R"("model_type": "smollm3", "no_rope_layers": [0])", "no_rope_layers[0]");

  // Phi-3: LongRoPE factors become tensors, with the converter's attention factor.
  auto phi = open_with(R"("model_type": "phi3", "original_max_position_embeddings": 16, "sliding_window": 8,
      "rope_scaling": {"type": "longrope", "long_factor": [2.0, 4.0], "short_factor": [1.0, 1.5]})");
  ASSERT_TRUE(phi.ok()) << phi.message();
  EXPECT_EQ(phi->get_int("phi3.attention.sliding_window"), 8);
  EXPECT_EQ(phi->get_int("phi3.rope.scaling.original_context_length"), 16);
  const float* lf = reinterpret_cast<const float*>(phi->find_tensor("rope_factors_long.weight")->view.data);
  EXPECT_EQ(lf[1], 4.0f);
  EXPECT_EQ(reinterpret_cast<const float*>(phi->find_tensor("rope_factors_short.weight")->view.data)[1], 1.5f);
  EXPECT_NEAR(*phi->get_float("phi3.rope.scaling.attn_factor"), std::sqrt(1 + std::log(4.0) / std::log(16.0)), 1e-6);
  expect_error(R"("model_type": "phi3", "rope_scaling": {"type": "longrope", "long_factor": [2.0], "short_factor": [1.0]})",
               "long_factor must be a list of 2");
  expect_error(R"("model_type": "phi3", "rope_scaling": {"type": "yarn", "factor": 2.0})", "yarn");
  auto phi4 = open_with(R"("model_type": "phi3", "sliding_window": null)");
  ASSERT_TRUE(phi4.ok()) << phi4.message();
  EXPECT_EQ(phi4->get_int("phi3.attention.sliding_window"), 0);
}

TEST(SafetensorsReader, ValidatesEntries) {
  auto expect_error = [](const std::vector<std::byte>& img, const std::string& needle) {
    auto r = parse_safetensors(img, "t.safetensors");
    ASSERT_FALSE(r.ok()) << needle;
    EXPECT_NE(r.message().find(needle), std::string::npos) << r.message();
  };
  auto header_image = [](const std::string& header, size_t data_bytes) {
    std::vector<std::byte> out(8 + header.size() + data_bytes);
    const uint64_t n = header.size();
    std::memcpy(out.data(), &n, 8);
    std::memcpy(out.data() + 8, header.data(), header.size());
    return out;
  };
  expect_error(header_image(R"({"w": {"dtype": "I64", "shape": [2], "data_offsets": [0, 16]}})", 16),
               "tensor 'w': dtype I64 is not supported");
  expect_error(header_image(R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 12]}})", 16), "need 8");
  expect_error(header_image(R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})", 8), "out of the data");
  expect_error(header_image(R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [8, 0]}})", 16), "out of the data");
  expect_error(header_image(R"({"w": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}})", 16), "non-negative");
  expect_error(header_image(R"({"w": {"dtype": "F32", "shape": [4294967296, 4294967296, 4294967296], "data_offsets": [0, 8]}})", 16),
               "overflows");
  expect_error(header_image(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                                "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})", 16), "overlap");
  expect_error(header_image(R"({"w": 5})", 0), "not an object");
  expect_error(header_image(R"([])", 0), "not a JSON object");
  expect_error(header_image(R"({"w": {"dtype": "F32", "shape": [2]}})", 8), "data_offsets");
  auto img = header_image(R"({})", 0);
  const uint64_t huge = uint64_t{1} << 63;
  std::memcpy(img.data(), &huge, 8);
  expect_error(img, "exceeds the file size");
  expect_error(std::vector<std::byte>(3), "too small");
  auto ok = parse_safetensors(header_image(R"({"__metadata__": {"format": "pt", "n": 1}, "w": {"dtype": "BF16", "shape": [], "data_offsets": [0, 2]}})", 2),
                              "ok");
  ASSERT_TRUE(ok.ok()) << ok.message();
  EXPECT_EQ(ok->metadata.at("format"), "pt");
  EXPECT_EQ(ok->metadata.count("n"), 0u);
  EXPECT_EQ(ok->tensors.at(0).data.size(), 2u);
}

}  // namespace
}  // namespace lumen::gguf
