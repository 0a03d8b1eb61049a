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
  EXPECT_TRUE(qwen->is_eog(qwen->find_token("<|file_sep|>")));  // FIM stop tokens, as llama.cpp
  EXPECT_TRUE(qwen->is_eog(qwen->find_token("<|fim_pad|>")));
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
                           "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 3000000}, \"merges\": []}}",
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


// ---- the pipeline pieces on tiny synthetic tokenizer.json files ----

Tokenizer hf_from(const std::string& json, const std::string& config = "") {
  auto tok = Tokenizer::from_hf_json(json, config);
  EXPECT_TRUE(tok.ok()) << tok.message();
  return std::move(tok).value();
}

using Ids = std::vector<int32_t>;

TEST(TokenizerHfPipeline, MetaspaceSchemes) {
  const std::string model = R"("model": {"type": "BPE", "vocab": {"▁a": 0, "▁b": 1, "▁": 2, "a": 3, "b": 4},
      "merges": [["▁", "a"], ["▁", "b"]]})";
  const std::string added = R"("added_tokens": [{"id": 5, "content": "<x>", "special": true}])";
  const Tokenizer always = hf_from("{" + model + "," + added + R"(, "pre_tokenizer": {"type": "Metaspace",
      "replacement": "▁", "prepend_scheme": "always", "split": true}})");
  EXPECT_EQ(always.encode("a b", false, false), (Ids{0, 1}));
  EXPECT_EQ(always.encode(" a", false, false), (Ids{0}));  // already starts with ▁: no second one
  EXPECT_EQ(always.encode("a<x>b", false, true), (Ids{0, 5, 1}));
  const Tokenizer first = hf_from("{" + model + "," + added + R"(, "pre_tokenizer": {"type": "Metaspace",
      "replacement": "▁", "prepend_scheme": "first", "split": false}})");
  EXPECT_EQ(first.encode("a<x>b", false, true), (Ids{0, 5, 4}));  // no ▁ after the added token
  const Tokenizer never = hf_from("{" + model + R"(, "pre_tokenizer": {"type": "Metaspace",
      "replacement": "▁", "prepend_scheme": "never"}})");
  EXPECT_EQ(never.encode("a b", false, false), (Ids{3, 1}));
}

TEST(TokenizerHfPipeline, ByteLevelWithRegexAndPrefixSpace) {
  const Tokenizer tok = hf_from(R"({"model": {"type": "BPE", "vocab": {"Ġ": 0, "a": 1, "b": 2, "Ġa": 3, "Ġb": 4},
      "merges": ["Ġ a"]},
      "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": true, "use_regex": true},
      "decoder": {"type": "ByteLevel"}})");
  EXPECT_EQ(tok.encode("a b", false, false), (Ids{3, 0, 2}));  // " a", " b": "Ġb" has no merge
  EXPECT_EQ(tok.decode(Ids{3, 0, 2}, false), " a b");
  EXPECT_EQ(tok.token_to_piece(0), " ");
}

TEST(TokenizerHfPipeline, DigitsSplitAndNormalizers) {
  const Tokenizer tok = hf_from(R"({"model": {"type": "BPE", "vocab": {"1": 0, "2": 1, "12": 2, "a": 3, "b": 4, "ab": 5},
      "merges": ["1 2", "a b"]},
      "normalizer": {"type": "Sequence", "normalizers": [{"type": "Lowercase"}, {"type": "Strip"},
          {"type": "Replace", "pattern": {"Regex": "\\s+"}, "content": " "}]},
      "pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "WhitespaceSplit"},
          {"type": "Digits", "individual_digits": true}]}})");
  EXPECT_EQ(tok.encode("  AB \t 12ab ", false, false), (Ids{5, 0, 1, 5}));
  const Tokenizer contiguous = hf_from(R"({"model": {"type": "BPE", "vocab": {"1": 0, "2": 1, "12": 2},
      "merges": ["1 2"]}, "pre_tokenizer": {"type": "Digits", "individual_digits": false}})");
  EXPECT_EQ(contiguous.encode("12", false, false), (Ids{2}));
}

TEST(TokenizerHfPipeline, SplitBehaviors) {
  const std::string model = R"("model": {"type": "BPE", "vocab": {"a": 0, "-": 1, "a-": 2, "-a": 3}, "merges": ["a -", "- a"]})";
  auto with = [&](const char* behavior, bool invert) {
    return hf_from("{" + model + R"(, "pre_tokenizer": {"type": "Split", "pattern": {"String": "-"}, "behavior": ")" +
                   behavior + "\", \"invert\": " + (invert ? "true" : "false") + "}}");
  };
  EXPECT_EQ(with("Removed", false).encode("a-a", false, false), (Ids{0, 0}));
  EXPECT_EQ(with("Isolated", false).encode("a-a", false, false), (Ids{0, 1, 0}));
  EXPECT_EQ(with("MergedWithPrevious", false).encode("a-a", false, false), (Ids{2, 0}));
  EXPECT_EQ(with("MergedWithNext", false).encode("a-a", false, false), (Ids{0, 3}));
  EXPECT_EQ(with("Contiguous", false).encode("a--a", false, false), (Ids{0, 1, 1, 0}));
  EXPECT_EQ(with("Removed", true).encode("a-a", false, false), (Ids{1}));  // keeps only the matches
}

TEST(TokenizerHfPipeline, AddedTokenStripAndSingleWord) {
  const Tokenizer tok = hf_from(R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, " ": 2, "x": 3}, "merges": []},
      "added_tokens": [
        {"id": 4, "content": "<m>", "lstrip": true, "rstrip": true, "special": false, "normalized": false},
        {"id": 5, "content": "xx", "single_word": true, "special": false, "normalized": false}]})");
  EXPECT_EQ(tok.encode("a <m> b", false, false), (Ids{0, 4, 1}));
  EXPECT_EQ(tok.encode("a xx b", false, false), (Ids{0, 2, 5, 2, 1}));
  EXPECT_EQ(tok.encode("axx", false, false), (Ids{0, 3, 3}));  // not a whole word
  EXPECT_EQ(tok.token_type(4), TokenType::kUserDefined);
}

TEST(TokenizerHfPipeline, SubwordPrefixByteFallbackAndUnk) {
  const Tokenizer prefixed = hf_from(R"({"model": {"type": "BPE", "vocab": {"a": 0, "##b": 1, "ab": 2},
      "merges": ["a ##b"], "continuing_subword_prefix": "##"}})");
  EXPECT_EQ(prefixed.encode("ab", false, false), (Ids{2}));
  const std::string vocab = R"("vocab": {"<unk>": 0, "a": 1, "<0xC3>": 2, "<0xA9>": 3}, "merges": [])";
  const Tokenizer fused = hf_from(R"({"model": {"type": "BPE", )" + vocab +
                                  R"(, "unk_token": "<unk>", "byte_fallback": true, "fuse_unk": true}})");
  EXPECT_EQ(fused.encode("a\xC3\xA9", false, false), (Ids{1, 2, 3}));
  EXPECT_EQ(fused.encode("a\xE2\x82\xAC\xE2\x82\xAC" "a", false, false), (Ids{1, 0, 1}));
  EXPECT_EQ(fused.decode(Ids{1, 2, 3}, false), "a\xC3\xA9");
  const Tokenizer unfused = hf_from(R"({"model": {"type": "BPE", )" + vocab + R"(, "unk_token": "<unk>"}})");
  EXPECT_EQ(unfused.encode("\xE2\x82\xAC\xE2\x82\xAC", false, false), (Ids{0, 0}));
  EXPECT_EQ(unfused.encode("\xC3\xA9", false, false), (Ids{0}));  // no byte_fallback: unk
}

TEST(TokenizerHfPipeline, PostProcessorsAndConfig) {
  const std::string model = R"("model": {"type": "BPE", "vocab": {"<s>": 0, "</s>": 1, "a": 2}, "merges": []},
      "added_tokens": [{"id": 0, "content": "<s>", "special": true}, {"id": 1, "content": "</s>", "special": true}])";
  const Tokenizer bert = hf_from("{" + model + R"(, "post_processor": {"type": "RobertaProcessing",
      "cls": ["<s>", 0], "sep": ["</s>", 1]}})");
  EXPECT_EQ(bert.encode("a", true, false), (Ids{0, 2, 1}));
  EXPECT_EQ(bert.encode("a", false, false), (Ids{2}));
  const Tokenizer config = hf_from("{" + model + "}",
                                   R"({"bos_token": {"content": "<s>"}, "eos_token": "</s>", "add_bos_token": true,
                                       "add_eos_token": true, "chat_template": [{"name": "tool_use", "template": "T"},
                                       {"name": "default", "template": "D"}]})");
  EXPECT_EQ(config.encode("a", true, false), (Ids{0, 2, 1}));
  EXPECT_TRUE(config.add_bos());
  EXPECT_TRUE(config.add_eos());
  EXPECT_EQ(config.chat_template(), "D");
  EXPECT_EQ(config.decode(Ids{0, 2, 1}, true), "a");
  EXPECT_TRUE(config.is_eog(1));
}

}  // namespace
}  // namespace lumen::tok
