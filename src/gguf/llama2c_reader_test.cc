#include <gtest/gtest.h>

#include <cstring>

#include "gguf/gguf_test_util.h"
#include "gguf/model_file.h"

namespace lumen::gguf {
namespace {

std::string bin_path() { return testing::stories260k_dir() + "/stories260K.bin"; }

TEST(Llama2cReader, Stories260kMetadata) {
  auto file = open_llama2c(bin_path(), "");
  ASSERT_TRUE(file.ok()) << file.message();
  EXPECT_EQ(file->container(), "llama2c");
  EXPECT_EQ(file->gguf_version(), 0u);
  EXPECT_EQ(file->get_string("general.architecture"), "llama");
  EXPECT_EQ(file->get_int("llama.embedding_length"), 64);
  EXPECT_EQ(file->get_int("llama.feed_forward_length"), 172);
  EXPECT_EQ(file->get_int("llama.block_count"), 5);
  EXPECT_EQ(file->get_int("llama.attention.head_count"), 8);
  EXPECT_EQ(file->get_int("llama.attention.head_count_kv"), 4);
  EXPECT_EQ(file->get_int("llama.context_length"), 512);
  EXPECT_EQ(file->get_int("llama.rope.dimension_count"), 8);
  EXPECT_NEAR(*file->get_float("llama.attention.layer_norm_rms_epsilon"), 1e-5, 1e-10);
  EXPECT_EQ(file->get_float("llama.rope.freq_base"), 10000.0);
  EXPECT_EQ(file->get_int("tokenizer.ggml.bos_token_id"), 1);
  EXPECT_EQ(file->get_int("tokenizer.ggml.eos_token_id"), 2);
  EXPECT_EQ(file->get_int("tokenizer.ggml.unknown_token_id"), 0);
  EXPECT_EQ(file->get_string("tokenizer.ggml.model"), "llama");
  // Shared classifier: no output.weight (the model layer ties it to token_embd).
  EXPECT_EQ(file->find_tensor("output.weight"), nullptr);
  EXPECT_EQ(file->tensors().size(), 2u + 5u * 9u);
  const TensorInfo* k = file->find_tensor("blk.3.attn_k.weight");
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(k->view.ne[0], 64);
  EXPECT_EQ(k->view.ne[1], 32);
  const TensorInfo* down = file->find_tensor("blk.0.ffn_down.weight");
  ASSERT_NE(down, nullptr);
  EXPECT_EQ(down->view.ne[0], 172);
  EXPECT_EQ(down->view.ne[1], 64);
}

// The translated tokenizer arrays equal the ones llama.cpp's convert-llama2c embedded
// in stories260K.gguf, element for element.
TEST(Llama2cReader, TokenizerMatchesGguf) {
  auto bin = open_llama2c(bin_path(), testing::stories260k_dir() + "/tok512.bin");
  ASSERT_TRUE(bin.ok()) << bin.message();
  auto gguf = open_gguf(testing::stories260k_dir() + "/stories260K.gguf");
  ASSERT_TRUE(gguf.ok()) << gguf.message();
  const auto* tokens = bin->get_string_array("tokenizer.ggml.tokens");
  ASSERT_NE(tokens, nullptr);
  EXPECT_EQ(*tokens, *gguf->get_string_array("tokenizer.ggml.tokens"));
  EXPECT_EQ(*bin->get_float_array("tokenizer.ggml.scores"), *gguf->get_float_array("tokenizer.ggml.scores"));
  EXPECT_EQ(*bin->get_int_array("tokenizer.ggml.token_type"), *gguf->get_int_array("tokenizer.ggml.token_type"));
  for (const char* key : {"tokenizer.ggml.model", "general.architecture"})
    EXPECT_EQ(bin->get_string(key), gguf->get_string(key)) << key;
  for (const char* key : {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
                          "tokenizer.ggml.unknown_token_id", "llama.embedding_length", "llama.feed_forward_length",
                          "llama.block_count", "llama.attention.head_count", "llama.attention.head_count_kv",
                          "llama.rope.dimension_count"})
    EXPECT_EQ(bin->get_int(key), gguf->get_int(key)) << key;
  EXPECT_EQ((*tokens)[1], "<s>");
  EXPECT_EQ((*tokens)[259], "\xe2\x96\x81t");
}

// Same model, same weights: every tensor of the .bin is bit-identical to the GGUF's
// tensor of that name, including wq / wk (convert-llama2c did not permute them: llama2.c
// already uses the interleaved RoPE layout). The GGUF stores output.weight as a copy of
// token_embd.weight; the .bin shares the classifier.
TEST(Llama2cReader, WeightsMatchGguf) {
  auto bin = open_llama2c(bin_path(), "");
  ASSERT_TRUE(bin.ok()) << bin.message();
  auto gguf = open_gguf(testing::stories260k_dir() + "/stories260K.gguf");
  ASSERT_TRUE(gguf.ok()) << gguf.message();
  for (const TensorInfo& t : bin->tensors()) {
    const TensorInfo* g = gguf->find_tensor(t.name);
    ASSERT_NE(g, nullptr) << t.name;
    EXPECT_EQ(g->view.dtype, t.view.dtype) << t.name;
    EXPECT_EQ(g->view.n_dims, t.view.n_dims) << t.name;
    for (int d = 0; d < 4; ++d) EXPECT_EQ(g->view.ne[d], t.view.ne[d]) << t.name << " dim " << d;
    ASSERT_EQ(g->view.n_bytes, t.view.n_bytes) << t.name;
    EXPECT_EQ(std::memcmp(g->view.data, t.view.data, t.view.n_bytes), 0) << t.name;
  }
  const TensorInfo* out = gguf->find_tensor("output.weight");
  ASSERT_NE(out, nullptr);
  const TensorInfo* emb = bin->find_tensor("token_embd.weight");
  EXPECT_EQ(std::memcmp(out->view.data, emb->view.data, emb->view.n_bytes), 0);
  EXPECT_EQ(gguf->tensors().size(), bin->tensors().size() + 1);
}

TEST(Llama2cReader, OpenModelDetectsLlama2c) {
  auto file = open_model(bin_path());
  ASSERT_TRUE(file.ok()) << file.message();
  EXPECT_EQ(file->container(), "llama2c");
}

std::vector<std::byte> make_checkpoint(int32_t dim, int32_t hidden, int32_t n_layers, int32_t n_heads,
                                       int32_t n_kv_heads, int32_t vocab, int32_t seq_len, size_t n_floats) {
  std::vector<std::byte> b(28 + n_floats * 4);
  const int32_t h[7] = {dim, hidden, n_layers, n_heads, n_kv_heads, vocab, seq_len};
  std::memcpy(b.data(), h, 28);
  for (size_t i = 0; i < n_floats; ++i) {
    const float f = static_cast<float>(i);
    std::memcpy(b.data() + 28 + i * 4, &f, 4);
  }
  return b;
}

TEST(Llama2cReader, UntiedClassifierAndSlices) {
  // dim 4, hidden 6, 2 layers, 2 heads, 1 kv head (kv_dim 2), vocab 3 (untied), seq 2.
  const size_t n = 3 * 4 + 2 * 4 + 2 * 16 + 2 * 2 * 8 + 2 * 16 + 2 * 4 + 3 * 2 * 24 + 4 + 2 * 2 + 3 * 4;
  auto img = make_checkpoint(4, 6, 2, 2, 1, -3, 2, n);
  auto file = parse_llama2c(img, "mem");
  ASSERT_TRUE(file.ok()) << file.message();
  const TensorInfo* out = file->find_tensor("output.weight");
  ASSERT_NE(out, nullptr);
  EXPECT_EQ(out->view.data + out->view.n_bytes, img.data() + img.size());
  float first;
  std::memcpy(&first, file->find_tensor("blk.1.attn_k.weight")->view.data, 4);
  // emb 12 + rms 8 + wq 32 + wk(layer 0) 8 floats precede blk.1.attn_k
  EXPECT_EQ(first, 12.0f + 8 + 32 + 8);
  EXPECT_EQ(file->find_tensor("blk.1.attn_k.weight")->view.ne[1], 2);
  // The same floats with a positive vocab: the message explains the sign.
  img = make_checkpoint(4, 6, 2, 2, 1, 3, 2, n);
  auto bad = parse_llama2c(img, "mem");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("vocab_size should be negative"), std::string::npos) << bad.message();
}

TEST(Llama2cReader, RejectsBadHeaders) {
  auto expect_error = [](std::vector<std::byte> img, const std::string& needle) {
    auto r = parse_llama2c(img, "mem");
    ASSERT_FALSE(r.ok()) << needle;
    EXPECT_NE(r.message().find(needle), std::string::npos) << r.message();
  };
  expect_error(make_checkpoint(0, 6, 2, 2, 1, 3, 2, 0), "dim = 0");
  expect_error(make_checkpoint(4, -6, 2, 2, 1, 3, 2, 0), "hidden_dim = -6");
  expect_error(make_checkpoint(4, 6, 2, 3, 1, 3, 2, 0), "not a multiple of n_heads");
  expect_error(make_checkpoint(4, 6, 2, 2, 3, 3, 2, 0), "not a multiple of n_kv_heads 3");
  expect_error(make_checkpoint(6, 6, 2, 2, 2, 3, 2, 0), "odd");
  expect_error(make_checkpoint(4, 6, 2, 2, 1, INT32_MIN, 2, 0), "vocab_size");
  expect_error(make_checkpoint(4, 6, 2, 2, 1, 3, 2, 10), "does not match the header");
  expect_error(std::vector<std::byte>(10), "too small");
}

TEST(Llama2cReader, TokenizerErrors) {
  ModelFile file;
  auto tok = testing::read_bytes(testing::stories260k_dir() + "/tok512.bin");
  ASSERT_TRUE(parse_llama2c_tokenizer(tok, "tok", 512, &file).ok());
  Status s = parse_llama2c_tokenizer(tok, "tok", 511, &file);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("trailing bytes"), std::string::npos) << s.message();
  s = parse_llama2c_tokenizer(tok, "tok", 513, &file);
  ASSERT_FALSE(s.ok());
  s = parse_llama2c_tokenizer(tok, "tok", int64_t{1} << 40, &file);
  ASSERT_FALSE(s.ok());
  auto bad = tok;
  const int32_t huge = 0x7fffffff;
  std::memcpy(bad.data() + 8, &huge, 4);  // token 0's length
  s = parse_llama2c_tokenizer(bad, "tok", 512, &file);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("token 0: length"), std::string::npos) << s.message();
  auto missing = open_llama2c(bin_path(), "/nonexistent/tok.bin");
  EXPECT_FALSE(missing.ok());
}

}  // namespace
}  // namespace lumen::gguf
