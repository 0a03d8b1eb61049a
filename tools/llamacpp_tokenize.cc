// llamacpp_tokenize: llama.cpp's token ids for every input of a llama.cpp tokenizer test file
// (.inp: inputs each followed by "\n__ggml_vocab_test__\n"), one line of ids per input, as
// the .out files of tests/data/tokenizers/ (and llama.cpp's own .out files, without their
// leading space). No BOS/EOS; special-token texts are plain text unless PARSE_SPECIAL is set
// in the environment (then as llama_tokenize(..., parse_special = true)).
//
// Not built by CMake or CI: a hand tool, compiled against the llama.cpp build beside the
// repository (commit c392e5094) as tools/llamacpp_golden.cc is:
//
//   L=/work/peer/llama.cpp
//   g++ -std=c++17 -O2 -o /tmp/llamacpp_tokenize tools/llamacpp_tokenize.cc  (one line, continued:)
//       -I$L/include -I$L/ggml/include -L$L/build/bin -lllama -lggml -lggml-base
//       -Wl,-rpath,$L/build/bin
//
//   /tmp/llamacpp_tokenize VOCAB.gguf FILE.inp > NAME.out
//
// tests/data/tokenizers/spaces/<name>.out came from it with the vocabularies of
// $LUMEN_SHARED/tokenizers/vocab/ggml-vocab-<name>.gguf. `lumen tokenize -m VOCAB --vectors
// FILE.inp` prints the same format, so random text can be compared with diff.
#include <llama.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: llamacpp_tokenize VOCAB.gguf FILE.inp\n");
    return 2;
  }
  llama_backend_init();
  llama_model_params params = llama_model_default_params();
  params.vocab_only = true;
  llama_model* model = llama_model_load_from_file(argv[1], params);
  if (model == nullptr) {
    std::fprintf(stderr, "error: cannot load %s\n", argv[1]);
    return 1;
  }
  const llama_vocab* vocab = llama_model_get_vocab(model);
  std::ifstream in(argv[2], std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "error: cannot read %s\n", argv[2]);
    return 1;
  }
  std::stringstream buf;
  buf << in.rdbuf();
  const std::string all = buf.str();
  const std::string sep = "\n__ggml_vocab_test__\n";
  const bool parse_special = std::getenv("PARSE_SPECIAL") != nullptr;
  for (size_t pos = 0, end; (end = all.find(sep, pos)) != std::string::npos; pos = end + sep.size()) {
    const std::string text = all.substr(pos, end - pos);
    std::vector<llama_token> ids(text.size() + 16);
    int n = llama_tokenize(vocab, text.data(), static_cast<int>(text.size()), ids.data(), static_cast<int>(ids.size()),
                           false, parse_special);
    if (n < 0) {
      ids.resize(-n);
      n = llama_tokenize(vocab, text.data(), static_cast<int>(text.size()), ids.data(), static_cast<int>(ids.size()),
                         false, parse_special);
    }
    std::string line;
    for (int i = 0; i < n; ++i) line += (i ? " " : "") + std::to_string(ids[i]);
    std::printf("%s\n", line.c_str());
  }
  llama_model_free(model);
  return 0;
}
