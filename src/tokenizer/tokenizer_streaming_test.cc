// StreamingDetokenizer: pushes never return half a UTF-8 character; invalid bytes come out as
// U+FFFD; the stream concatenates to exactly the token pieces.
#include <gtest/gtest.h>

#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_test_util.h"
#include "tokenizer/unicode.h"

namespace lumen::tok {
namespace {

using testing::shared_path;

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

Tokenizer load(const std::string& rel) {
  auto file = gguf::open_gguf(shared_path(rel));
  EXPECT_TRUE(file.ok()) << file.message();
  auto tok = Tokenizer::from_model_file(*file);
  EXPECT_TRUE(tok.ok()) << tok.message();
  return std::move(tok).value();
}

// Streams `ids`; checks every chunk is valid UTF-8; returns the whole stream and how many
// pushes held bytes back (returned less than their piece).
std::string stream(const Tokenizer& tok, const std::vector<int32_t>& ids, int* n_held) {
  StreamingDetokenizer detok(tok);
  std::string all;
  *n_held = 0;
  for (int32_t id : ids) {
    const std::string chunk = detok.push(id);
    EXPECT_TRUE(is_valid_utf8(chunk)) << "token " << id;
    if (chunk.size() < tok.token_to_piece(id).size()) ++*n_held;
    all += chunk;
  }
  const std::string rest = detok.flush();
  EXPECT_TRUE(is_valid_utf8(rest));
  return all + rest;
}

TEST(TokenizerStreaming, SpmByteTokensAreHeldUntilComplete) {
  const Tokenizer tok = load("tokenizers/vocab/ggml-vocab-llama-spm.gguf");
  // The llama (U+1F999) and the Khmer letters have no tokens: they become <0xXX> byte tokens.
  const std::string text = "Hello \xF0\x9F\xA6\x99 world \xE1\x9E\x80\xE1\x9E\xB6 \xC2\xBD ok";
  const std::vector<int32_t> ids = tok.encode(text, true, false);
  int n_held = 0;
  EXPECT_EQ(stream(tok, ids, &n_held), " " + text);  // BOS renders empty; SPM space prefix
  EXPECT_GE(n_held, 3);  // at least the first three bytes of the llama were held back
}

TEST(TokenizerStreaming, ByteLevelTokensSplitCharacters) {
  const Tokenizer tok = load("tokenizers/vocab/ggml-vocab-gpt-2.gguf");
  const std::string text = "\xE6\x88\x91\xE6\x83\xB3\xE5\x9C\xA8 apple \xF0\x9F\x98\x81 \xD0\xBD\xD0\xB5";
  const std::vector<int32_t> ids = tok.encode(text, false, false);
  // Some token of GPT-2 ends inside a CJK character here.
  bool splits = false;
  for (int32_t id : ids) splits = splits || !is_valid_utf8(tok.token_to_piece(id));
  ASSERT_TRUE(splits);
  int n_held = 0;
  EXPECT_EQ(stream(tok, ids, &n_held), text);
  EXPECT_GT(n_held, 0);
}

TEST(TokenizerStreaming, InvalidBytesBecomeReplacementCharacters) {
  const Tokenizer tok = load("tokenizers/vocab/ggml-vocab-llama-spm.gguf");
  const int32_t byte_ff = tok.find_token("<0xFF>");
  const int32_t byte_e2 = tok.find_token("<0xE2>");
  const int32_t byte_82 = tok.find_token("<0x82>");
  const int32_t byte_ac = tok.find_token("<0xAC>");
  const int32_t word_a = tok.find_token("\xE2\x96\x81" "a");
  ASSERT_GE(byte_ff, 0);
  ASSERT_GE(word_a, 0);
  {
    StreamingDetokenizer d(tok);
    EXPECT_EQ(d.push(byte_ff), kReplacement);  // can never start a character
    EXPECT_EQ(d.flush(), "");
  }
  {
    StreamingDetokenizer d(tok);
    EXPECT_EQ(d.push(byte_e2), "");
    EXPECT_EQ(d.push(byte_82), "");
    EXPECT_EQ(d.push(byte_ac), "\xE2\x82\xAC");  // the euro sign, once complete
  }
  {
    StreamingDetokenizer d(tok);
    EXPECT_EQ(d.push(byte_e2), "");
    EXPECT_EQ(d.push(word_a), std::string(kReplacement) + " a");  // broken by a space
  }
  {
    StreamingDetokenizer d(tok);
    EXPECT_EQ(d.push(byte_e2), "");
    EXPECT_EQ(d.push(byte_82), "");
    EXPECT_EQ(d.flush(), kReplacement);  // truncated at the end: one U+FFFD
    EXPECT_EQ(d.flush(), "");
  }
  {
    StreamingDetokenizer d(tok);
    EXPECT_EQ(d.push(tok.bos_id()), "");  // control tokens render empty
    EXPECT_EQ(d.push(tok.eos_id()), "");
    EXPECT_EQ(d.push(-1), "");  // out of range: nothing
    EXPECT_EQ(d.push(1 << 30), "");
  }
  {
    // Control tokens asked for (a tool-call format's markers) keep their text; the others not.
    StreamingDetokenizer d(tok, {tok.bos_id()});
    EXPECT_EQ(d.push(tok.bos_id()), "<s>");
    EXPECT_EQ(d.push(tok.eos_id()), "");
    EXPECT_EQ(d.push(word_a), " a");
  }
}

TEST(TokenizerStreaming, GoldenContinuationStreamsLikePieces) {
  const Tokenizer tok = load("models/stories260K/stories260K.gguf");
  const std::vector<int32_t> ids = tok.encode("Once upon a time, there was a little dog.", true, false);
  int n_held = 0;
  std::string pieces;
  for (int32_t id : ids) pieces += tok.token_to_piece(id);
  EXPECT_EQ(stream(tok, ids, &n_held), pieces);
  EXPECT_EQ(n_held, 0);
}

}  // namespace
}  // namespace lumen::tok
