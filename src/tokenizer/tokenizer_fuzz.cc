// libFuzzer target for the tokenizer (STYLE.md: fuzz targets for every parser of outside
// input). Not built by the default CMake configuration; with clang:
//   clang++ -std=c++20 -fsanitize=fuzzer,address -Isrc src/tokenizer/tokenizer_fuzz.cc
//       (+ the lumen_tokenizer, lumen_gguf, lumen_tensor, lumen_base libraries, -lpcre2-8)
// The first input byte picks the mode:
//   even: the rest is a tokenizer.json; loading must give a Tokenizer or a Status, and a
//         loaded one must encode / decode its own input without failing.
//   odd:  the rest is text for a small built-in tokenizer.json (byte-level BPE with added
//         tokens) and for a tiny SentencePiece-style GGUF vocab built in memory.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "tokenizer/tokenizer.h"

namespace {

using lumen::tok::StreamingDetokenizer;
using lumen::tok::Tokenizer;

void exercise(const Tokenizer& tok, std::string_view text) {
  for (bool special : {false, true}) {
    const std::vector<int32_t> ids = tok.encode(text, special, special);
    StreamingDetokenizer stream(tok);
    for (int32_t id : ids) {
      if (id < 0 || id >= tok.n_vocab()) __builtin_trap();
      (void)stream.push(id);
    }
    (void)stream.flush();
    (void)tok.decode(ids, special);
  }
}

const Tokenizer& builtin_hf() {
  static const Tokenizer tok = [] {
    auto t = Tokenizer::from_hf_json(
        R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "Ġ": 2, "ab": 3, "Ġa": 4, "Ċ": 5},
            "merges": ["a b", "Ġ a"], "ignore_merges": true},
            "normalizer": {"type": "NFC"},
            "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
            "added_tokens": [{"id": 6, "content": "<|x|>", "special": true},
                             {"id": 7, "content": "yy", "special": false, "lstrip": true, "rstrip": true}],
            "decoder": {"type": "ByteLevel"}})",
        "");
    if (!t.ok()) __builtin_trap();
    return std::move(t).value();
  }();
  return tok;
}

const Tokenizer& builtin_spm() {
  static const Tokenizer tok = [] {
    lumen::gguf::ModelFile f;
    f.set_container("gguf", "fuzz");
    using lumen::gguf::MetaValue;
    using lumen::gguf::ValueType;
    f.set_meta("tokenizer.ggml.model", MetaValue::of_string("llama"));
    f.set_meta("tokenizer.ggml.tokens", MetaValue::of_string_array({"<unk>", "<s>", "</s>", "\xE2\x96\x81", "a",
                                                                    "\xE2\x96\x81" "a", "<0x0A>", "<u>"}));
    f.set_meta("tokenizer.ggml.scores", MetaValue::of_float_array(ValueType::kF32, {0, 0, 0, -1, -1, -2, 0, 0}));
    f.set_meta("tokenizer.ggml.token_type", MetaValue::of_int_array(ValueType::kI32, {2, 3, 3, 1, 1, 1, 6, 4}));
    auto t = Tokenizer::from_model_file(f);
    if (!t.ok()) __builtin_trap();
    return std::move(t).value();
  }();
  return tok;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] % 2 == 0) {
    auto tok = Tokenizer::from_hf_json(rest, "");
    if (tok.ok()) exercise(*tok, rest);
  } else {
    exercise(builtin_hf(), rest);
    exercise(builtin_spm(), rest);
  }
  return 0;
}
