// llama.cpp's tokenizer test vectors: vocab-only GGUF files with .inp / .out, and the HF
// tokenizer.json vectors. Every input must encode to exactly the expected ids.
#include <gtest/gtest.h>

#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_test_util.h"

namespace lumen::tok {
namespace {

using testing::read_file;
using testing::shared_path;

struct VectorReport {
  int n_inputs = 0;
  int n_pass = 0;
};

// Encodes every input of `inp_path` and compares with `out_path`; reports each mismatch.
VectorReport check_vectors(const Tokenizer& tok, const std::string& inp_path, const std::string& out_path) {
  VectorReport report;
  std::string inp_text, out_text;
  EXPECT_TRUE(read_file(inp_path, &inp_text)) << inp_path;
  EXPECT_TRUE(read_file(out_path, &out_text)) << out_path;
  const auto inputs = read_vocab_test_inputs(inp_text);
  const auto outputs = read_vocab_test_outputs(out_text);
  EXPECT_EQ(inputs.size(), outputs.size()) << inp_path;
  for (size_t i = 0; i < inputs.size() && i < outputs.size(); ++i) {
    ++report.n_inputs;
    const std::vector<int32_t> ids = tok.encode(inputs[i], /*add_special=*/false, /*parse_special=*/false);
    if (ids == outputs[i]) {
      ++report.n_pass;
      continue;
    }
    std::string got, want;
    for (int32_t id : ids) got += " " + std::to_string(id);
    for (int32_t id : outputs[i]) want += " " + std::to_string(id);
    ADD_FAILURE() << inp_path << " input " << i << " '" << inputs[i] << "'\n  got: " << got << "\n want: " << want;
  }
  return report;
}

Result<Tokenizer> load_gguf_vocab(const std::string& path) {
  LUMEN_ASSIGN_OR_RETURN(auto file, gguf::open_gguf(path));
  return Tokenizer::from_model_file(file);
}

class TokenizerGgufVectors : public ::testing::TestWithParam<const char*> {};

TEST_P(TokenizerGgufVectors, EncodeMatches) {
  const std::string base = shared_path(std::string("tokenizers/vocab/ggml-vocab-") + GetParam() + ".gguf");
  auto tok = load_gguf_vocab(base);
  ASSERT_TRUE(tok.ok()) << tok.message();
  const VectorReport r = check_vectors(*tok, base + ".inp", base + ".out");
  EXPECT_GT(r.n_inputs, 0);
  std::printf("[vectors] %s: %d/%d\n", GetParam(), r.n_pass, r.n_inputs);
}

INSTANTIATE_TEST_SUITE_P(All, TokenizerGgufVectors,
                         ::testing::Values("llama-spm", "phi-3", "gpt-2", "mpt", "starcoder", "falcon",
                                           "deepseek-llm", "bert-bge"),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& c : name) if (c == '-') c = '_';
                           return name;
                         });

class TokenizerHfVectors : public ::testing::TestWithParam<std::pair<const char*, const char*>> {};

TEST_P(TokenizerHfVectors, EncodeMatches) {
  const std::string dir = shared_path(GetParam().first);
  std::string json, config;
  ASSERT_TRUE(read_file(dir + "/tokenizer.json", &json)) << dir;
  read_file(dir + "/tokenizer_config.json", &config);
  auto tok = Tokenizer::from_hf_json(json, config);
  ASSERT_TRUE(tok.ok()) << tok.message();
  const std::string vec = shared_path(std::string("tokenizers/hf-vectors/") + GetParam().second);
  const VectorReport r = check_vectors(*tok, vec + ".inp", vec + ".out");
  EXPECT_GT(r.n_inputs, 0);
  std::printf("[vectors] %s: %d/%d\n", GetParam().second, r.n_pass, r.n_inputs);
}

INSTANTIATE_TEST_SUITE_P(All, TokenizerHfVectors,
                         ::testing::Values(std::make_pair("tokenizers/hf/qwen2-qwen3", "qwen2-qwen3"),
                                           std::make_pair("tokenizers/hf/llama3", "llama3"),
                                           std::make_pair("models/TinyStories-656K", "TinyStories-656K")),
                         [](const auto& info) {
                           std::string name = info.param.second;
                           for (char& c : name) if (c == '-') c = '_';
                           return name;
                         });

}  // namespace
}  // namespace lumen::tok
