// Unit tests: metadata handling on small in-memory vocabs, special-token parsing rules,
// EOG sets, the test-vector readers, robustness on hostile input, shared use across threads.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <thread>

#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_test_util.h"
#include "tokenizer/unicode.h"

namespace lumen::tok {
namespace {

using gguf::MetaValue;
using gguf::ModelFile;
using gguf::ValueType;
using testing::read_file;
using testing::shared_path;

constexpr const char* kMeta = "\xE2\x96\x81";  // "▁"

Tokenizer load(const std::string& rel) {
  auto file = gguf::open_gguf(shared_path(rel));
  EXPECT_TRUE(file.ok()) << file.message();
  auto tok = Tokenizer::from_model_file(*file);
  EXPECT_TRUE(tok.ok()) << tok.message();
  return std::move(tok).value();
}

// A tiny SPM vocab: <unk> <s> </s>, "▁", letters, a few merges by score, and optionally the
// 256 byte tokens.
ModelFile tiny_spm(bool with_bytes) {
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>", kMeta, "a", "b", "c",
                                     std::string(kMeta) + "a", "ab", std::string(kMeta) + "ab", "<ctl>", "<usr>"};
  std::vector<double> scores = {0, 0, 0, -1, -2, -2, -2, -3, -4, -5, 0, 0};
  std::vector<int64_t> types = {2, 3, 3, 1, 1, 1, 1, 1, 1, 1, 3, 4};
  if (with_bytes) {
    static constexpr char kHex[] = "0123456789ABCDEF";
    for (int b = 0; b < 256; ++b) {
      tokens.push_back(std::string("<0x") + kHex[b >> 4] + kHex[b & 15] + ">");
      scores.push_back(0);
      types.push_back(6);
    }
  }
  ModelFile f;
  f.set_container("gguf", "tiny-spm");
  f.set_meta("tokenizer.ggml.model", MetaValue::of_string("llama"));
  f.set_meta("tokenizer.ggml.tokens", MetaValue::of_string_array(tokens));
  f.set_meta("tokenizer.ggml.scores", MetaValue::of_float_array(ValueType::kF32, scores));
  f.set_meta("tokenizer.ggml.token_type", MetaValue::of_int_array(ValueType::kI32, types));
  return f;
}

TEST(TokenizerUnit, TinySpmMergesAndFallbacks) {
  for (bool with_bytes : {false, true}) {
    ModelFile f = tiny_spm(with_bytes);
    f.set_meta("tokenizer.ggml.padding_token_id", MetaValue::of_u32(0xFFFFFFFFu));  // "none": ignored
    f.set_meta("tokenizer.chat_template", MetaValue::of_string("{{ x }}"));
    auto tok = Tokenizer::from_model_file(f);
    ASSERT_TRUE(tok.ok()) << tok.message();
    EXPECT_EQ(tok->model_name(), "llama");
    EXPECT_EQ(tok->bos_id(), 1);  // llama.cpp defaults for SPM
    EXPECT_EQ(tok->eos_id(), 2);
    EXPECT_EQ(tok->unk_id(), 0);
    EXPECT_EQ(tok->pad_id(), -1);
    EXPECT_TRUE(tok->add_bos());
    EXPECT_EQ(tok->chat_template(), "{{ x }}");
    // "▁a" (-3) merges before "ab" (-4); then "▁a" + "b" = "▁ab" (-5).
    EXPECT_EQ(tok->encode("ab", true, false), (std::vector<int32_t>{1, 9}));
    EXPECT_EQ(tok->encode("ab", false, false), (std::vector<int32_t>{9}));
    // "cab": "ab" merges first (-4 beats nothing else), "▁" + "c" never form a token.
    EXPECT_EQ(tok->encode("cab", false, false), (std::vector<int32_t>{3, 6, 8}));
    EXPECT_EQ(tok->encode("", true, false), (std::vector<int32_t>{1}));
    EXPECT_TRUE(tok->encode("", false, false).empty());
    // "x" is no token: byte token <0x78> if the vocab has bytes, else <unk>.
    const auto x = tok->encode("x", false, false);
    ASSERT_EQ(x.size(), 2u);
    EXPECT_EQ(x[0], 3);
    EXPECT_EQ(x[1], with_bytes ? tok->find_token("<0x78>") : 0);
    // A multi-byte character without a token: one <unk>, or its bytes.
    const auto e = tok->encode("\xC3\xA9", false, false);
    EXPECT_EQ(e.size(), with_bytes ? 3u : 2u);
    EXPECT_EQ(tok->decode(e, false), with_bytes ? "\xC3\xA9" : "");
    // Control tokens only with parse_special; user-defined tokens always.
    EXPECT_EQ(tok->encode("<ctl>a", false, true), (std::vector<int32_t>{10, 7}));  // space prefix after it
    const auto ctl_text = tok->encode("<ctl>a", false, false);
    EXPECT_EQ(std::count(ctl_text.begin(), ctl_text.end(), 10), 0);
    EXPECT_EQ(tok->encode("a<usr>", false, false), (std::vector<int32_t>{7, 11}));
    EXPECT_EQ(tok->token_to_piece(11), "<usr>");
    EXPECT_EQ(tok->token_to_piece(10), "");
    EXPECT_EQ(tok->token_to_piece(10, true), "<ctl>");
    EXPECT_EQ(tok->decode(std::vector<int32_t>{1, 9}, true), " ab");  // BOS removed: space kept
    EXPECT_EQ(tok->decode(std::vector<int32_t>{9}, false), "ab");     // llama.cpp: first space dropped
  }
}

TEST(TokenizerUnit, MetadataErrorsAreStatuses) {
  {
    ModelFile f = tiny_spm(false);
    f.set_meta("tokenizer.ggml.model", MetaValue::of_string("t5"));
    auto tok = Tokenizer::from_model_file(f);
    ASSERT_FALSE(tok.ok());
    EXPECT_NE(tok.message().find("'t5'"), std::string::npos) << tok.message();
  }
  {
    ModelFile f;
    f.set_container("gguf", "empty");
    auto tok = Tokenizer::from_model_file(f);
    ASSERT_FALSE(tok.ok());
    EXPECT_NE(tok.message().find("tokenizer.ggml.model"), std::string::npos);
  }
  {
    ModelFile f = tiny_spm(false);
    f.set_meta("tokenizer.ggml.scores", MetaValue::of_float_array(ValueType::kF32, {1.0}));
    EXPECT_FALSE(Tokenizer::from_model_file(f).ok());
  }
  {
    ModelFile f = tiny_spm(false);
    f.set_meta("tokenizer.ggml.tokens", MetaValue::of_string_array({}));
    EXPECT_FALSE(Tokenizer::from_model_file(f).ok());
  }
  {
    ModelFile f = tiny_spm(false);
    f.set_meta("tokenizer.ggml.model", MetaValue::of_string("gpt2"));  // needs merges
    auto tok = Tokenizer::from_model_file(f);
    ASSERT_FALSE(tok.ok());
    EXPECT_NE(tok.message().find("merges"), std::string::npos);
  }
  {
    ModelFile f;
    f.set_container("safetensors", "/nowhere");
    EXPECT_FALSE(Tokenizer::from_model_file(f).ok());
  }
}

TEST(TokenizerUnit, MissingTokenTypesAreInferred) {
  ModelFile f;
  f.set_container("llama2c", "tok.bin");
  f.set_meta("tokenizer.ggml.model", MetaValue::of_string("llama"));
  f.set_meta("tokenizer.ggml.tokens", MetaValue::of_string_array({"<unk>", "<s>", "</s>", "<0x0A>", kMeta}));
  auto tok = Tokenizer::from_model_file(f);
  ASSERT_TRUE(tok.ok()) << tok.message();
  EXPECT_EQ(tok->token_type(3), TokenType::kByte);
  EXPECT_EQ(tok->token_type(1), TokenType::kControl);
  EXPECT_EQ(tok->token_type(0), TokenType::kUnknown);
  EXPECT_EQ(tok->token_to_piece(3), "\n");
  EXPECT_EQ(tok->encode("\n", false, false), (std::vector<int32_t>{4, 3}));
}

TEST(TokenizerUnit, UnknownPreTokenizerFallsBackToGpt2) {
  auto file = gguf::open_gguf(shared_path("tokenizers/vocab/ggml-vocab-gpt-2.gguf"));
  ASSERT_TRUE(file.ok()) << file.message();
  auto reference = Tokenizer::from_model_file(*file);
  ASSERT_TRUE(reference.ok());
  file->set_meta("tokenizer.ggml.pre", MetaValue::of_string("no-such-pre"));
  auto tok = Tokenizer::from_model_file(*file);
  ASSERT_TRUE(tok.ok()) << tok.message();
  EXPECT_EQ(tok->pre_name(), "no-such-pre");
  const std::string text = "Hello world, it's 2024!  ok\n\n";
  EXPECT_EQ(tok->encode(text, false, false), reference->encode(text, false, false));
}

TEST(TokenizerUnit, Gpt2SpecialTokensAndEog) {
  const Tokenizer tok = load("tokenizers/vocab/ggml-vocab-gpt-2.gguf");
  EXPECT_EQ(tok.model_name(), "gpt2");
  EXPECT_EQ(tok.pre_name(), "gpt-2");
  EXPECT_TRUE(tok.is_eog(50256));
  EXPECT_FALSE(tok.is_eog(0));
  EXPECT_FALSE(tok.add_bos());
  EXPECT_EQ(tok.encode("a<|endoftext|>b", false, true), (std::vector<int32_t>{64, 50256, 65}));
  const auto plain = tok.encode("a<|endoftext|>b", false, false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 50256), 0);
  EXPECT_EQ(tok.decode(plain, false), "a<|endoftext|>b");
  EXPECT_EQ(tok.token_to_piece(50256), "");
  EXPECT_EQ(tok.token_to_piece(50256, true), "<|endoftext|>");
  EXPECT_EQ(tok.token_to_piece(220), " ");  // "Ġ"
}

TEST(TokenizerUnit, Phi3SpecialTokensStripFollowingWhitespace) {
  const Tokenizer tok = load("tokenizers/vocab/ggml-vocab-phi-3.gguf");
  const int32_t user = tok.find_token("<|user|>"), end = tok.find_token("<|end|>");
  const int32_t assistant = tok.find_token("<|assistant|>");
  ASSERT_GE(user, 0);
  EXPECT_TRUE(tok.is_eog(end));               // "<|end|>" is an end-of-turn name
  EXPECT_TRUE(tok.is_eog(tok.eos_id()));      // <|endoftext|>
  const auto ids = tok.encode("<|user|>\nHi<|end|>\n<|assistant|>\n", true, true);
  // BOS, <|user|> (eats "\n"), "▁Hi", <|end|> (eats "\n"), <|assistant|> (eats "\n").
  ASSERT_EQ(ids.size(), 5u);
  EXPECT_EQ(ids[0], 1);
  EXPECT_EQ(ids[1], user);
  EXPECT_EQ(ids[2], tok.find_token(std::string(kMeta) + "Hi"));
  EXPECT_EQ(ids[3], end);
  EXPECT_EQ(ids[4], assistant);
}

TEST(TokenizerUnit, WordPieceDecode) {
  const Tokenizer tok = load("tokenizers/vocab/ggml-vocab-bert-bge.gguf");
  const auto ids = tok.encode("Hello, Wörld!", true, false);
  EXPECT_EQ(ids.front(), 101);  // [CLS]
  EXPECT_EQ(ids.back(), 102);   // [SEP]
  EXPECT_EQ(tok.decode(ids, true), " hello, world!");
  EXPECT_EQ(tok.encode("\xE1\x9E\x80", false, false), (std::vector<int32_t>{100}));  // [UNK]
}

TEST(TokenizerUnit, VectorFileReaders) {
  const auto inputs = read_vocab_test_inputs(
      "a b\n__ggml_vocab_test__\n\n__ggml_vocab_test__\n\n\n__ggml_vocab_test__\n x\n\n__ggml_vocab_test__\n");
  EXPECT_EQ(inputs, (std::vector<std::string>{"a b", "", "\n", " x\n"}));
  EXPECT_TRUE(read_vocab_test_inputs("").empty());
  const auto outputs = read_vocab_test_outputs(" 1 2 3\n\n 42\n");
  ASSERT_EQ(outputs.size(), 3u);
  EXPECT_EQ(outputs[0], (std::vector<int32_t>{1, 2, 3}));
  EXPECT_TRUE(outputs[1].empty());
  EXPECT_EQ(outputs[2], (std::vector<int32_t>{42}));
}

TEST(TokenizerUnit, UnicodeHelpers) {
  EXPECT_EQ(to_lower(U'A'), U'a');
  EXPECT_EQ(to_lower(0x0130), U'i');   // İ
  EXPECT_EQ(to_lower(0x0100), 0x0101u);  // Ā
  EXPECT_EQ(to_lower(0x0410), 0x0430u);  // А
  EXPECT_EQ(nfd_base(0x00C4), U'A');   // Ä
  EXPECT_EQ(nfd_base(0x1EA0 + 0x0D), U'a');  // ậ
  EXPECT_EQ(nfd_base(0xAC00), 0x1100u);  // 가 -> ᄀ
  EXPECT_EQ(nfc_utf8("e\xCC\x81"), "\xC3\xA9");  // e + ◌́ -> é
  EXPECT_EQ(nfc_utf8("\xC3\xA9"), "\xC3\xA9");
  EXPECT_EQ(nfc_utf8("\xE1\x84\x80\xE1\x85\xA1"), "\xEA\xB0\x80");  // ᄀ + ᅡ -> 가
  EXPECT_EQ(nfd_utf8("\xC3\xA9"), "e\xCC\x81");
  EXPECT_EQ(sanitize_utf8("a\xFF" "b\xE2\x82"), "a\xEF\xBF\xBD" "b\xEF\xBF\xBD\xEF\xBF\xBD");
  for (int b = 0; b < 256; ++b) EXPECT_EQ(unicode_to_byte(byte_to_unicode(static_cast<uint8_t>(b))), b);
  EXPECT_EQ(byte_to_unicode(' '), 0x120u);  // Ġ
}

// Random bytes through every family: valid ids, no crash (the ASan build checks the rest).
TEST(TokenizerUnit, RandomBytesAreSafe) {
  std::vector<Tokenizer> toks;
  for (const char* rel : {"tokenizers/vocab/ggml-vocab-llama-spm.gguf", "tokenizers/vocab/ggml-vocab-gpt-2.gguf",
                          "tokenizers/vocab/ggml-vocab-deepseek-llm.gguf", "tokenizers/vocab/ggml-vocab-bert-bge.gguf",
                          "models/TinyStories-656K/TinyStories-656K-Q8_0.gguf"}) {
    toks.push_back(load(rel));
  }
  std::string json;
  ASSERT_TRUE(read_file(shared_path("models/TinyStories-656K/tokenizer.json"), &json));
  auto hf = Tokenizer::from_hf_json(json, "");
  ASSERT_TRUE(hf.ok()) << hf.message();
  toks.push_back(std::move(hf).value());

  std::mt19937 rng(1234);
  const std::string alphabet = std::string("ab <|>\n\t'sS\xE2\x96\x81\xC3\xA9\xF0\x9F\x98\x81") + '\0';
  for (int iter = 0; iter < 200; ++iter) {
    std::string text;
    const int len = static_cast<int>(rng() % 64);
    for (int i = 0; i < len; ++i) {
      text.push_back(rng() % 2 ? static_cast<char>(rng() % 256) : alphabet[rng() % alphabet.size()]);
    }
    for (const Tokenizer& tok : toks) {
      for (bool special : {false, true}) {
        const auto ids = tok.encode(text, special, special);
        for (int32_t id : ids) ASSERT_TRUE(id >= 0 && id < tok.n_vocab());
        StreamingDetokenizer d(tok);
        std::string streamed;
        for (int32_t id : ids) streamed += d.push(id);
        streamed += d.flush();
        EXPECT_TRUE(is_valid_utf8(streamed));
        (void)tok.decode(ids, special);
      }
    }
  }
}

// A Tokenizer is immutable after loading: concurrent encodes agree with a serial one.
TEST(TokenizerUnit, SharedAcrossThreads) {
  const Tokenizer tok = load("tokenizers/vocab/ggml-vocab-gpt-2.gguf");
  std::string text;
  ASSERT_TRUE(read_file(shared_path("corpus/war-and-peace.txt"), &text));
  text.resize(20'000);
  const std::vector<int32_t> want = tok.encode(text, false, false);
  std::vector<std::vector<int32_t>> got(4);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < got.size(); ++t) {
    threads.emplace_back([&, t] { got[t] = tok.encode(text, false, false); });
  }
  for (auto& th : threads) th.join();
  for (const auto& g : got) EXPECT_EQ(g, want);
}

}  // namespace
}  // namespace lumen::tok
