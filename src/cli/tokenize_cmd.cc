// lumen tokenize: text -> ids. --vectors FILE.inp prints, for each input of a llama.cpp
// vocab test file, one line of ids exactly as in the matching .out (no BOS), so that
// conformance is a `diff`.
#include <cstdio>

#include "base/mapped_file.h"
#include "cli/common.h"
#include "gguf/model_file.h"
#include "tokenizer/tokenizer.h"

namespace lumen::cli {

int cmd_tokenize(int argc, char** argv, int first) {
  ArgParser args("tokenize", "lumen tokenize -m MODEL [options] TEXT | --vectors FILE.inp",
                 {
                     {{"-m", "--model"}, "PATH", "model or vocab-only GGUF / HF directory"},
                     {{"--vectors"}, "FILE", "tokenize every input of a .inp test file (no BOS, as llama.cpp's test files)"},
                     {{"--no-bos"}, "", "do not add BOS/EOS"},
                     {{"--parse-special"}, "", "recognise special-token texts"},
                     {{"--pieces"}, "", "print one 'id -> piece' line per token"},
                     {{"-v", "--verbose"}, "", "verbose logging"},
                 });
  int rc = 0;
  if (!parse_or_report(args, argc, argv, first, rc)) return rc;
  auto model_path = args.get("--model");
  if (!model_path) {
    std::fprintf(stderr, "error: missing -m/--model PATH\n");
    return 2;
  }
  auto file = gguf::open_model(*model_path);
  if (!file.ok()) {
    std::fprintf(stderr, "error: %s\n", file.message().c_str());
    return 1;
  }
  auto tk = tok::Tokenizer::from_model_file(*file);
  if (!tk.ok()) {
    std::fprintf(stderr, "error: %s\n", tk.message().c_str());
    return 1;
  }
  auto print_ids = [](const std::vector<int32_t>& ids) {
    std::string line;
    for (size_t i = 0; i < ids.size(); ++i) {
      if (i) line += ' ';
      line += std::to_string(ids[i]);
    }
    line += '\n';
    std::fwrite(line.data(), 1, line.size(), stdout);
  };
  if (auto vectors = args.get("--vectors")) {
    auto text = read_text_file(*vectors);
    if (!text.ok()) {
      std::fprintf(stderr, "error: --vectors: %s\n", text.message().c_str());
      return 1;
    }
    for (const std::string& input : tok::read_vocab_test_inputs(*text))
      print_ids(tk->encode(input, false, args.has("--parse-special")));
    return 0;
  }
  if (args.positional().size() != 1) {
    std::fprintf(stderr, "error: give exactly one TEXT argument (quote it) or --vectors FILE\n");
    return 2;
  }
  const std::vector<int32_t> ids =
      tk->encode(args.positional()[0], !args.has("--no-bos"), args.has("--parse-special"));
  if (args.has("--pieces")) {
    for (int32_t id : ids)
      std::printf("%6d -> '%s'\n", id, tk->token_to_piece(id, true).c_str());
  } else {
    print_ids(ids);
  }
  return 0;
}

}  // namespace lumen::cli
