// HF tokenizer.json specifics: the Llama-2 SentencePiece export (no vectors of its own) against
// the llama-spm GGUF vocab, special/added token handling, post-processor BOS, chat templates.
#include <gtest/gtest.h>

#include <algorithm>

#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_test_util.h"

namespace lumen::tok {
namespace {

using testing::read_file;
using testing::shared_path;

Result<Tokenizer> load_hf(const std::string& dir) {
  std::string json, config;
  if (!read_file(shared_path(dir) + "/tokenizer.json", &json)) return error("cannot read " + dir);
  read_file(shared_path(dir) + "/tokenizer_config.json", &config);
  return Tokenizer::from_hf_json(json, config);
}

TEST(TokenizerHfLlama2, AgreesWithLlamaSpmGguf) {
  auto hf = load_hf("tokenizers/hf/llama2-tinyllama");
  ASSERT_TRUE(hf.ok()) << hf.message();
  auto file = gguf::open_gguf(shared_path("tokenizers/vocab/ggml-vocab-llama-spm.gguf"));
  ASSERT_TRUE(file.ok()) << file.message();
  auto spm = Tokenizer::from_model_file(*file);
  ASSERT_TRUE(spm.ok()) << spm.message();
  ASSERT_EQ(hf->n_vocab(), spm->n_vocab());
  // Same Llama-2 vocab, except that the tokenizer.json export lost token 31353 (U+2028 LINE
  // SEPARATOR in the SentencePiece model) and stores it as "".
  int n_text_diff = 0;
  for (int32_t id = 0; id < spm->n_vocab(); ++id) {
    if (hf->token_text(id) == spm->token_text(id)) continue;
    ++n_text_diff;
    EXPECT_EQ(id, 31353);
    EXPECT_EQ(hf->token_text(id), "");
  }
  EXPECT_LE(n_text_diff, 1);

  // The ids agree except for one documented difference: HF's Metaspace(prepend_scheme
  // "first") adds no "▁" when the text already starts with a space, where SentencePiece and
  // llama.cpp always add one. So HF(" " + x) == SPM(x) for those inputs.
  std::string inp;
  ASSERT_TRUE(read_file(shared_path("tokenizers/vocab/ggml-vocab-llama-spm.gguf.inp"), &inp));
  int n_same = 0, n_shifted = 0, n_total = 0;
  for (const std::string& text : read_vocab_test_inputs(inp)) {
    ++n_total;
    const auto a = hf->encode(text, false, false);
    if (text.size() > 1 && text[0] == ' ') {
      EXPECT_EQ(a, spm->encode(text.substr(1), false, false)) << "'" << text << "'";
      ++n_shifted;
    } else if (text != " ") {  // " " alone: HF gives "▁", SentencePiece "▁▁"
      EXPECT_EQ(a, spm->encode(text, false, false)) << "'" << text << "'";
      ++n_same;
      // ... and decodes back to the input (HF loses a leading space, so only here).
      EXPECT_EQ(hf->decode(a, false), text);
    }
  }
  std::printf("[llama2 hf vs gguf] %d inputs: %d equal, %d with a leading space shifted\n", n_total, n_same,
              n_shifted);
  EXPECT_EQ(n_total, 46);
}

TEST(TokenizerHfLlama2, SpecialTokensAndBos) {
  auto hf = load_hf("tokenizers/hf/llama2-tinyllama");
  ASSERT_TRUE(hf.ok()) << hf.message();
  EXPECT_EQ(hf->bos_id(), 1);
  EXPECT_EQ(hf->eos_id(), 2);
  EXPECT_EQ(hf->unk_id(), 0);
  EXPECT_TRUE(hf->add_bos());  // TemplateProcessing "<s> $A"
  EXPECT_FALSE(hf->add_eos());
  EXPECT_TRUE(hf->is_eog(2));
  EXPECT_EQ(hf->model_name(), "hf-bpe");
  EXPECT_EQ(hf->encode("Hello", true, false), (std::vector<int32_t>{1, 15043}));
  EXPECT_EQ(hf->encode("", true, false), (std::vector<int32_t>{1}));
  // "</s>" is text unless parse_special; then it is the token (and no "▁" follows it).
  const auto as_text = hf->encode("Hi</s>", false, false);
  EXPECT_EQ(std::count(as_text.begin(), as_text.end(), 2), 0);
  const auto as_token = hf->encode("Hi</s>", false, true);
  ASSERT_FALSE(as_token.empty());
  EXPECT_EQ(as_token.back(), 2);
  EXPECT_EQ(hf->decode(as_token, false), "Hi");
  EXPECT_EQ(hf->token_to_piece(2, true), "</s>");
  EXPECT_EQ(hf->token_to_piece(2, false), "");
  // Byte fallback: U+2028 has no token of its own in the export.
  const auto bytes = hf->encode("a\xE2\x80\xA8" "b", false, false);
  EXPECT_EQ(hf->decode(bytes, false), "a\xE2\x80\xA8" "b");
}

TEST(TokenizerHfQwen, AddedTokensAndEog) {
  auto qwen = load_hf("tokenizers/hf/qwen2-qwen3");
  ASSERT_TRUE(qwen.ok()) << qwen.message();
  const int32_t im_start = qwen->find_token("<|im_start|>");
  const int32_t im_end = qwen->find_token("<|im_end|>");
  const int32_t think = qwen->find_token("<think>");
  ASSERT_EQ(im_start, 151644);
  ASSERT_EQ(im_end, 151645);
  ASSERT_EQ(think, 151667);
  EXPECT_TRUE(qwen->is_control(im_end));
  EXPECT_EQ(qwen->token_type(think), TokenType::kUserDefined);
  EXPECT_TRUE(qwen->is_eog(im_end));
  EXPECT_TRUE(qwen->is_eog(qwen->find_token("<|endoftext|>")));
  EXPECT_FALSE(qwen->is_eog(im_start));
  EXPECT_EQ(qwen->eos_id(), im_end);
  EXPECT_FALSE(qwen->add_bos());
  EXPECT_FALSE(qwen->chat_template().empty());

  const std::string chat = "<|im_start|>user\nHi<think>x</think><|im_end|>\n";
  const auto special = qwen->encode(chat, true, true);
  EXPECT_EQ(special.front(), im_start);
  EXPECT_EQ(std::count(special.begin(), special.end(), im_end), 1);
  EXPECT_EQ(std::count(special.begin(), special.end(), think), 1);
  EXPECT_EQ(qwen->decode(special, false), "user\nHi<think>x</think>\n");
  // parse_special = false: control tokens are plain text, non-special added tokens still match.
  const auto plain = qwen->encode(chat, true, false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), im_start), 0);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), think), 1);
  EXPECT_EQ(qwen->decode(plain, false), chat);
}

TEST(TokenizerHfLlama3, IgnoreMergesAndByteLevel) {
  auto l3 = load_hf("tokenizers/hf/llama3");
  ASSERT_TRUE(l3.ok()) << l3.message();
  EXPECT_EQ(l3->bos_id(), 128000);
  EXPECT_EQ(l3->eos_id(), 128001);
  EXPECT_TRUE(l3->is_eog(l3->find_token("<|eot_id|>")));
  EXPECT_TRUE(l3->is_eog(128001));
  EXPECT_FALSE(l3->chat_template().empty());
  const std::string text = "Hello, world! \xF0\x9F\xA6\x99 caf\xC3\xA9";
  std::string pieces;
  for (int32_t id : l3->encode(text, false, false)) pieces += l3->token_to_piece(id);
  EXPECT_EQ(pieces, text);
}

TEST(TokenizerHfErrors, BadJsonIsAStatus) {
  for (const char* json : {"", "{", "[]", "{\"model\": {\"type\": \"Unigram\", \"vocab\": []}}",
                           "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": -5}, \"merges\": []}}",
                           "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": \"x\"}, \"merges\": []}}",
                           "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [5]}}",
                           "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []},"
                           " \"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": \"(\"}}}"}) {
    auto tok = Tokenizer::from_hf_json(json, "");
    EXPECT_FALSE(tok.ok()) << json;
    EXPECT_FALSE(tok.message().empty());
  }
  auto bad_config = Tokenizer::from_hf_json("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}}", "{");
  EXPECT_FALSE(bad_config.ok());
  auto minimal = Tokenizer::from_hf_json("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 2}, \"merges\": [\"a b\"]}}", "");
  ASSERT_TRUE(minimal.ok()) << minimal.message();
  EXPECT_EQ(minimal->encode("abab", false, false), (std::vector<int32_t>{2, 2}));
  EXPECT_EQ(minimal->encode("abc", false, false), (std::vector<int32_t>{2}));  // no unk token: dropped
}

}  // namespace
}  // namespace lumen::tok
