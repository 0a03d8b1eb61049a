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
