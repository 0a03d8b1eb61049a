#include "convert/tokenizer_to_gguf.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "base/shared_dir.h"
#include "gguf/model_file.h"
#include "tokenizer/tokenizer.h"

namespace lumen::convert {
namespace {

std::string shared_path(const std::string& rel) { return shared_dir() + "/" + rel; }

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A ModelFile holding only the converted tokenizer metadata.
gguf::ModelFile vocab_file(const TokenizerGguf& t) {
  gguf::ModelFile f;
  f.set_container("gguf", "converted");
  for (const auto& [k, v] : t.metadata) f.set_meta(k, v);
  return f;
}

Result<TokenizerGguf> convert_file(const std::string& rel, int64_t n_vocab) {
  LUMEN_ASSIGN_OR_RETURN(HfTokenizerTexts texts, read_hf_tokenizer_files(shared_path(rel)));
  TokenizerGgufOptions opt;
  opt.n_vocab = n_vocab;
  return hf_tokenizer_to_gguf(texts, opt);
}

// Encodes every input of a vector file with `tok` and compares with the expected ids.
int check_vectors(const tok::Tokenizer& tok, const std::string& name) {
  const std::string base = shared_path("tokenizers/hf-vectors/" + name);
  const auto inputs = tok::read_vocab_test_inputs(read_text(base + ".inp"));
  const auto outputs = tok::read_vocab_test_outputs(read_text(base + ".out"));
  EXPECT_EQ(inputs.size(), outputs.size());
  int n_pass = 0;
  for (size_t i = 0; i < inputs.size() && i < outputs.size(); ++i) {
    const auto ids = tok.encode(inputs[i], false, false);
    if (ids == outputs[i]) {
      ++n_pass;
    } else {
      ADD_FAILURE() << name << " input " << i << " '" << inputs[i] << "' encodes differently";
    }
  }
  return n_pass;
}

// The SentencePiece-style HF tokenizer of TinyStories-656K converts to exactly the vocab
// llama.cpp's converter wrote into TinyStories-656K-Q8_0.gguf.
TEST(ConvertTokenizer, TinyStoriesMatchesLlamaCppConverter) {
  auto ref = gguf::open_gguf(shared_path("models/TinyStories-656K/TinyStories-656K-Q8_0.gguf"));
  ASSERT_TRUE(ref.ok()) << ref.message();
  auto got = convert_file("models/TinyStories-656K/tokenizer.json", 2048);
  ASSERT_TRUE(got.ok()) << got.message();
  EXPECT_EQ(got->model, "llama");
  EXPECT_EQ(got->pre, "default");
  const gguf::ModelFile f = vocab_file(*got);
  int n_compared = 0;
  for (const auto& [key, want] : ref->metadata()) {
    if (!key.starts_with("tokenizer.")) continue;
    const gguf::MetaValue* v = f.find(key);
    ASSERT_NE(v, nullptr) << key;
    EXPECT_EQ(v->type, want.type) << key;
    EXPECT_EQ(v->array_type, want.array_type) << key;
    EXPECT_EQ(v->i, want.i) << key;
    EXPECT_EQ(v->b, want.b) << key;
    EXPECT_EQ(v->s, want.s) << key;
    EXPECT_EQ(v->arr_str, want.arr_str) << key;
    EXPECT_EQ(v->arr_int, want.arr_int) << key;
    EXPECT_EQ(v->arr_float, want.arr_float) << key;
    ++n_compared;
  }
  EXPECT_EQ(n_compared, 11);
  for (const auto& [key, v] : f.metadata()) EXPECT_NE(ref->find(key), nullptr) << "extra key " << key;
}

// Byte-level BPE: the converted GGUF vocab encodes the tokenizer's test vectors exactly as
// the HF tokenizer does, padded to the model's vocabulary like real Qwen2 files.
TEST(ConvertTokenizer, Qwen2EncodesVectorsAndPads) {
  auto got = convert_file("tokenizers/hf/qwen2-qwen3/tokenizer.json", 151936);
  ASSERT_TRUE(got.ok()) << got.message();
  EXPECT_EQ(got->model, "gpt2");
  EXPECT_EQ(got->pre, "qwen2");
  EXPECT_EQ(got->n_tokens_padded, 151936 - got->n_tokens_tokenizer);
  const gguf::ModelFile f = vocab_file(*got);
  const auto* tokens = f.get_string_array("tokenizer.ggml.tokens");
  const auto* types = f.get_int_array("tokenizer.ggml.token_type");
  ASSERT_TRUE(tokens && types);
  ASSERT_EQ(tokens->size(), 151936u);
  EXPECT_EQ((*tokens)[151935], "[PAD151935]");
  EXPECT_EQ((*types)[151935], 5);       // UNUSED
  EXPECT_EQ((*tokens)[151644], "<|im_start|>");
  EXPECT_EQ((*types)[151644], 3);       // CONTROL (special)
  EXPECT_EQ((*types)[151657], 4);       // <tool_call>: USER_DEFINED (not special)
  EXPECT_EQ((*types)[0], 1);
  EXPECT_EQ(f.get_int("tokenizer.ggml.eos_token_id"), 151645);      // <|im_end|>
  EXPECT_EQ(f.get_int("tokenizer.ggml.padding_token_id"), 151643);  // <|endoftext|>
  EXPECT_EQ(f.get_bool("tokenizer.ggml.add_bos_token"), false);
  EXPECT_TRUE(f.get_string("tokenizer.chat_template").has_value());
  ASSERT_NE(f.get_string_array("tokenizer.ggml.merges"), nullptr);
  EXPECT_EQ(f.get_string_array("tokenizer.ggml.merges")->front(), "\xC4\xA0 \xC4\xA0");  // "Ġ Ġ"
  auto tok = tok::Tokenizer::from_model_file(f);
  ASSERT_TRUE(tok.ok()) << tok.message();
  EXPECT_GT(check_vectors(*tok, "qwen2-qwen3"), 10);
}

TEST(ConvertTokenizer, Llama3EncodesVectors) {
  auto got = convert_file("tokenizers/hf/llama3/tokenizer.json", 128256);
  ASSERT_TRUE(got.ok()) << got.message();
  EXPECT_EQ(got->model, "gpt2");
  EXPECT_EQ(got->pre, "llama-bpe");
  EXPECT_EQ(got->n_tokens_padded, 0);
  const gguf::ModelFile f = vocab_file(*got);
  EXPECT_EQ(f.get_int("tokenizer.ggml.bos_token_id"), 128000);
  EXPECT_EQ(f.get_int("tokenizer.ggml.eos_token_id"), 128001);
  auto tok = tok::Tokenizer::from_model_file(f);
  ASSERT_TRUE(tok.ok()) << tok.message();
  EXPECT_GT(check_vectors(*tok, "llama3"), 10);
}

// Truncation to a smaller model vocabulary keeps the first regular tokens, then the added
// ones renumbered; text whose full-vocab tokens all survive encodes identically.
TEST(ConvertTokenizer, TruncatesToSmallerVocab) {
  auto full = convert_file("tokenizers/hf/llama3/tokenizer.json", 0);
  auto cut = convert_file("tokenizers/hf/llama3/tokenizer.json", 49152);
  ASSERT_TRUE(full.ok() && cut.ok()) << full.message() << cut.message();
  EXPECT_EQ(cut->n_tokens_kept, 49152);
  const gguf::ModelFile ff = vocab_file(*full), fc = vocab_file(*cut);
  ASSERT_EQ(fc.get_string_array("tokenizer.ggml.tokens")->size(), 49152u);
  EXPECT_EQ((*fc.get_string_array("tokenizer.ggml.tokens"))[48896], "<|begin_of_text|>");
  EXPECT_EQ(fc.get_int("tokenizer.ggml.bos_token_id"), 48896);
  EXPECT_EQ(fc.get_int("tokenizer.ggml.eos_token_id"), 48897);
  EXPECT_LT(fc.get_string_array("tokenizer.ggml.merges")->size(), ff.get_string_array("tokenizer.ggml.merges")->size());
  auto tf = tok::Tokenizer::from_model_file(ff);
  auto tc = tok::Tokenizer::from_model_file(fc);
  ASSERT_TRUE(tf.ok() && tc.ok());
  const std::string text = "Once upon a time, there was a little girl who loved to play outside.";
  const auto ids_full = tf->encode(text, true, false);
  for (int32_t id : ids_full) ASSERT_TRUE(id < 48896 || id == 128000) << id;
  auto ids_cut = tc->encode(text, true, false);
  ASSERT_FALSE(ids_cut.empty());
  EXPECT_EQ(ids_cut.front(), 48896);
  ids_cut.front() = 128000;
  EXPECT_EQ(ids_cut, ids_full);
  // Any text still encodes (all 256 byte tokens are kept).
  EXPECT_FALSE(tc->encode("\xF0\x9F\xA6\x99 ещё 123", false, false).empty());

  // Too small to keep the byte tokens: an error that says so.
  auto tiny = convert_file("tokenizers/hf/qwen2-qwen3/tokenizer.json", 200);
  ASSERT_FALSE(tiny.ok());
  EXPECT_NE(tiny.message().find("byte tokens"), std::string::npos) << tiny.message();
}

TEST(ConvertTokenizer, RejectsBadInput) {
  HfTokenizerTexts t;
  t.tokenizer_json = "{\"model\": {\"type\": \"Unigram\", \"vocab\": []}}";
  auto r = hf_tokenizer_to_gguf(t, {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("Unigram"), std::string::npos) << r.message();
  t.tokenizer_json = "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": \"x\"}}}";
  r = hf_tokenizer_to_gguf(t, {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("model.vocab['a']"), std::string::npos) << r.message();
  t.tokenizer_json = "not json";
  EXPECT_FALSE(hf_tokenizer_to_gguf(t, {}).ok());
  t.tokenizer_json =
      "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []},"
      " \"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": \"x+\"}}}";
  r = hf_tokenizer_to_gguf(t, {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("ByteLevel"), std::string::npos) << r.message();
}

}  // namespace
}  // namespace lumen::convert
