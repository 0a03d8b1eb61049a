// llama.cpp goldens for the two GGUF models (golden/FORMAT.md): prompt_ids, the streamed
// generated_text, both detokenize fields, and the perplexity texts' token lists.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_test_util.h"

namespace lumen::tok {
namespace {

using testing::read_file;
using testing::shared_path;
using json = nlohmann::json;

std::string model_path(const std::string& stem) {
  if (stem == "stories260K") return shared_path("models/stories260K/stories260K.gguf");
  return shared_path("models/TinyStories-656K/TinyStories-656K-Q8_0.gguf");
}

Result<Tokenizer> load_model_tokenizer(const std::string& stem) {
  LUMEN_ASSIGN_OR_RETURN(auto file, gguf::open_gguf(model_path(stem)));
  return Tokenizer::from_model_file(file);
}

std::string to_hex(std::string_view bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (char c : bytes) {
    out.push_back(kHex[static_cast<uint8_t>(c) >> 4]);
    out.push_back(kHex[static_cast<uint8_t>(c) & 15]);
  }
  return out;
}

// All golden files of one model: <golden>/<stem>/*.json and <golden>/stress/<stem>/*.json.
std::vector<std::string> golden_files(const std::string& stem) {
  std::vector<std::string> files;
  for (const std::string& dir : std::vector<std::string>{shared_path("golden/" + stem), shared_path("golden/stress/" + stem)}) {
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
      if (entry.path().extension() == ".json") files.push_back(entry.path().string());
    }
  }
  std::sort(files.begin(), files.end());
  return files;
}

class TokenizerGolden : public ::testing::TestWithParam<const char*> {};

TEST_P(TokenizerGolden, PromptIdsAndDetokenize) {
  const std::string stem = GetParam();
  auto tok = load_model_tokenizer(stem);
  ASSERT_TRUE(tok.ok()) << tok.message();
  const auto files = golden_files(stem);
  ASSERT_GE(files.size(), 8u) << stem;
  int n_gen = 0, n_ppl = 0;
  for (const std::string& path : files) {
    SCOPED_TRACE(path);
    std::string text;
    ASSERT_TRUE(read_file(path, &text));
    const json g = json::parse(text);
    const std::string format = g.at("format").get<std::string>();
    EXPECT_EQ(g.at("model").at("bos_id").get<int32_t>(), tok->bos_id());
    EXPECT_EQ(g.at("model").at("eos_id").get<int32_t>(), tok->eos_id());
    EXPECT_EQ(g.at("model").at("add_bos").get<bool>(), tok->add_bos());
    EXPECT_EQ(g.at("model").at("n_vocab").get<int32_t>(), tok->n_vocab());
    if (format == "llamacpp-golden/ppl/1") {
      if (g.contains("tokenize_error")) continue;
      const auto want = g.at("tokens").get<std::vector<int32_t>>();
      EXPECT_EQ(tok->encode(g.at("text").get<std::string>(), true, false), want);
      ++n_ppl;
      continue;
    }
    ASSERT_EQ(format, "llamacpp-golden/gen/1");
    if (g.contains("tokenize_error")) continue;
    const auto prompt_ids = g.at("prompt_ids").get<std::vector<int32_t>>();
    EXPECT_EQ(tok->encode(g.at("prompt").get<std::string>(), true, false), prompt_ids);

    const auto generated = g.at("generated_ids").get<std::vector<int32_t>>();
    std::string streamed;
    for (int32_t id : generated) streamed += tok->token_to_piece(id);
    EXPECT_EQ(to_hex(streamed), g.at("generated_text_hex").get<std::string>());
    if (g.at("generated_text_utf8_valid").get<bool>()) {
      EXPECT_EQ(streamed, g.at("generated_text").get<std::string>());
      EXPECT_EQ(tok->decode(generated, false), g.at("generated_text_detokenize").get<std::string>());
      std::vector<int32_t> all = prompt_ids;
      all.insert(all.end(), generated.begin(), generated.end());
      EXPECT_EQ(tok->decode(all, true), g.at("full_text_detokenize").get<std::string>());
    }
    ++n_gen;
  }
  std::printf("[golden] %s: %d generation + %d perplexity goldens\n", stem.c_str(), n_gen, n_ppl);
  EXPECT_GE(n_gen, 7);
  EXPECT_GE(n_ppl, 1);
}

INSTANTIATE_TEST_SUITE_P(Models, TokenizerGolden, ::testing::Values("stories260K", "TinyStories-656K-Q8_0"),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& c : name) if (c == '-') c = '_';
                           return name;
                         });

// FORMAT.md §5: the 656K vocab has no byte tokens; llama.cpp throws on characters outside
// the vocab, we map each such character to <unk>.
TEST(TokenizerGoldenQuirks, TinyStories656KUnknownCharactersBecomeUnk) {
  auto tok = load_model_tokenizer("TinyStories-656K-Q8_0");
  ASSERT_TRUE(tok.ok()) << tok.message();
  const int32_t unk = tok->unk_id();
  ASSERT_GE(unk, 0);
  const std::vector<int32_t> paren = tok->encode("(", false, false);
  ASSERT_EQ(paren.size(), 2u);  // "▁" then "(" as <unk>
  EXPECT_EQ(paren[0], tok->find_token("\xE2\x96\x81"));
  EXPECT_EQ(paren[1], unk);
  for (const char* text : {"#%&()*+/=@[\\]^`{}~", "tab\there", "caf\xC3\xA9 \xE4\xB8\xAD\xE6\x96\x87 \xF0\x9F\x98\x80",
                           "\xFF\xFE broken utf-8 \xE2\x82"}) {
    const std::vector<int32_t> ids = tok->encode(text, true, false);
    ASSERT_FALSE(ids.empty()) << text;
    EXPECT_EQ(ids[0], tok->bos_id());
    for (int32_t id : ids) EXPECT_TRUE(id >= 0 && id < tok->n_vocab());
    EXPECT_NE(std::find(ids.begin(), ids.end(), unk), ids.end()) << text;
  }
  // Characters that are in the vocab never turn into <unk>.
  const std::vector<int32_t> ok = tok->encode("Once upon a time, there was a dog.", false, false);
  EXPECT_EQ(std::find(ok.begin(), ok.end(), unk), ok.end());
}

}  // namespace
}  // namespace lumen::tok

namespace lumen::tok {
namespace {

// The same tokenizers reached through the other containers: the llama2.c checkpoint with its
// tokenizer.bin, and the Hugging Face directory (tokenizer.json) of TinyStories-656K.
TEST(TokenizerContainers, Llama2cMatchesGguf) {
  auto bin = gguf::open_llama2c(testing::shared_path("models/stories260K/stories260K.bin"),
                                testing::shared_path("models/stories260K/tok512.bin"));
  ASSERT_TRUE(bin.ok()) << bin.message();
  auto from_bin = Tokenizer::from_model_file(*bin);
  ASSERT_TRUE(from_bin.ok()) << from_bin.message();
  auto from_gguf = load_model_tokenizer("stories260K");
  ASSERT_TRUE(from_gguf.ok()) << from_gguf.message();
  EXPECT_EQ(from_bin->n_vocab(), from_gguf->n_vocab());
  EXPECT_EQ(from_bin->bos_id(), from_gguf->bos_id());
  EXPECT_EQ(from_bin->add_bos(), from_gguf->add_bos());
  for (const char* text : {"Once upon a time", "On day 3, the cat said: \"Hello!\"", "caf\xC3\xA9 \xF0\x9F\x98\x80", ""}) {
    EXPECT_EQ(from_bin->encode(text, true, false), from_gguf->encode(text, true, false)) << text;
  }
}

TEST(TokenizerContainers, HfDirectoryUsesTokenizerJson) {
  auto dir = gguf::open_hf_dir(testing::shared_path("models/TinyStories-656K"));
  ASSERT_TRUE(dir.ok()) << dir.message();
  auto tok = Tokenizer::from_model_file(*dir);
  ASSERT_TRUE(tok.ok()) << tok.message();
  EXPECT_EQ(tok->model_name(), "hf-bpe");
  EXPECT_EQ(tok->n_vocab(), 2048);
  EXPECT_EQ(tok->bos_id(), 1);  // <|start_story|>
  EXPECT_EQ(tok->eos_id(), 2);  // <|end_story|>
  EXPECT_TRUE(tok->add_bos());
  EXPECT_TRUE(tok->is_eog(2));
  // HF merges by rank where llama.cpp's GGUF (all scores equal) merges leftmost-first:
  // FORMAT.md §5 says they differ on 2 of the 36 vector strings llama.cpp can tokenize.
  auto gguf_tok = load_model_tokenizer("TinyStories-656K-Q8_0");
  ASSERT_TRUE(gguf_tok.ok()) << gguf_tok.message();
  std::string inp;
  ASSERT_TRUE(testing::read_file(testing::shared_path("tokenizers/hf-vectors/TinyStories-656K.inp"), &inp));
  int n_tokenizable = 0, n_differ = 0;
  for (const std::string& text : read_vocab_test_inputs(inp)) {
    const auto g = gguf_tok->encode(text, false, false);
    if (std::find(g.begin(), g.end(), gguf_tok->unk_id()) != g.end()) continue;  // llama.cpp would throw
    ++n_tokenizable;
    if (tok->encode(text, false, false) != g) ++n_differ;
  }
  EXPECT_EQ(n_tokenizable, 36);
  EXPECT_EQ(n_differ, 2);
  // decode follows llama.cpp for every family: the first token's space is dropped, unless a
  // removed BOS came before it.
  const std::string text = "One day, Tim went to the park.";
  const auto ids = tok->encode(text, true, false);
  EXPECT_EQ(tok->decode(std::span(ids).subspan(1), false), text);
  EXPECT_EQ(tok->decode(ids, true), " " + text);
}

}  // namespace
}  // namespace lumen::tok
