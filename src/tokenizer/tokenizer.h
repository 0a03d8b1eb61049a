// Tokenizer: text <-> token ids for every vocab family lumen loads.
//
//   SPM (tokenizer.ggml.model = "llama"): SentencePiece-style BPE over scores, byte fallback
//       through <0xXX> tokens; without byte tokens unknown characters map to <unk>.
//   BPE (model = "gpt2"): byte-level BPE over merge ranks, after the pre-tokenizer regexes
//       named by tokenizer.ggml.pre (gpt-2, llama3, qwen2, deepseek-llm, deepseek-coder,
//       falcon, starcoder, refact, mpt/gpt-neox, ...).
//   WPM (model = "bert"): WordPiece.
//   HF tokenizer.json: BPE models (byte-level or Metaspace/SentencePiece-style) with their
//       normalizer / pre-tokenizer / decoder pipeline and added tokens.
//
// Semantics follow the reference of each format: GGUF vocabs tokenize as llama.cpp does
// (special-token splitting, SPM space prefix, BPE pre-tokenizer sets), tokenizer.json as
// Hugging Face tokenizers does (normalizers, pre-tokenizers, added tokens). token_to_piece /
// decode / is_eog use llama.cpp's rules for every format. Known differences from the
// references: characters outside a byte-less SPM vocab become <unk> (llama.cpp throws); NFC /
// NFKC normalizers compose canonically without reordering combining marks and without
// compatibility mappings.
//
// Encoding time grows linearly with input length. Immutable after construction, so one
// Tokenizer may be shared by many threads.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "gguf/model_file.h"

namespace lumen::tok {

enum class TokenType : uint8_t {  // values as GGUF's tokenizer.ggml.token_type
  kUndefined = 0, kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6,
};

class TokenizerImpl;  // per-family implementation, private to the layer

class Tokenizer {
 public:
  Tokenizer();
  ~Tokenizer();
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // From a model container: GGUF tokenizer.ggml.* metadata (GGUF and llama2.c), or the
  // tokenizer.json / tokenizer_config.json texts of a Hugging Face directory.
  static Result<Tokenizer> from_model_file(const gguf::ModelFile& file);
  static Result<Tokenizer> from_hf_json(std::string_view tokenizer_json,
                                        std::string_view tokenizer_config_json);

  // add_special: add BOS (and EOS) as the model's metadata says (llama.cpp's add_special).
  // parse_special: recognise special/control token texts such as "<|im_start|>" in `text`.
  std::vector<int32_t> encode(std::string_view text, bool add_special, bool parse_special) const;

  // The bytes of one token as llama.cpp's token_to_piece(lstrip=0): SPM "▁" -> " ",
  // <0xXX> -> that byte, byte-level BPE unmapped to raw bytes. Control tokens render as ""
  // unless `special` is true. May be an incomplete UTF-8 sequence.
  std::string token_to_piece(int32_t id, bool special = false) const;

  // Whole-sequence decode (llama_detokenize semantics): remove_special drops BOS/EOS,
  // and for SPM the leading space of the first token is dropped unless the first
  // token was preceded by a removed BOS.
  std::string decode(std::span<const int32_t> ids, bool remove_special) const;

  int32_t n_vocab() const;
  int32_t bos_id() const;       // -1 if none
  int32_t eos_id() const;       // -1 if none
  int32_t unk_id() const;       // -1 if none
  int32_t eot_id() const;       // end of turn (<|eot_id|>, <|im_end|>, ...), -1 if none
  int32_t pad_id() const;       // -1 if none
  bool add_bos() const;
  bool add_eos() const;
  bool is_eog(int32_t id) const;  // end of generation (EOS, EOT, <|im_end|>, <|eot_id|>, ...)
  bool is_control(int32_t id) const;
  std::string_view token_text(int32_t id) const;  // the raw vocab string
  int32_t find_token(std::string_view text) const;  // id of the token with exactly this text, -1
  TokenType token_type(int32_t id) const;
  std::string_view model_name() const;  // "llama", "gpt2", "bert", "hf-bpe", ...
  std::string_view pre_name() const;    // pre-tokenizer name, "" when not applicable
  // Chat template source from the model's metadata (tokenizer.chat_template) or
  // tokenizer_config.json; empty if the model has none.
  const std::string& chat_template() const;

 private:
  explicit Tokenizer(std::unique_ptr<TokenizerImpl> impl);
  const TokenizerImpl& impl() const;  // checked: never null on a loaded Tokenizer
  std::unique_ptr<TokenizerImpl> impl_;
};

// Turns a stream of token ids into text without ever emitting half a UTF-8 character:
// bytes of an incomplete sequence are held back until it completes (or, if it turns out
// invalid, are emitted as U+FFFD).
class StreamingDetokenizer {
 public:
  // keep_special: sorted ids rendered with their special text (control tokens render
  // empty otherwise).
  explicit StreamingDetokenizer(const Tokenizer& tokenizer, std::vector<int32_t> keep_special = {})
      : tokenizer_(&tokenizer), keep_special_(std::move(keep_special)) {}
  // Returns the text that became complete with this token (may be empty).
  std::string push(int32_t id);
  // Returns whatever is still held back (invalid bytes as U+FFFD).
  std::string flush();

 private:
  const Tokenizer* tokenizer_;
  std::vector<int32_t> keep_special_;
  std::string pending_;
};

// llama.cpp tokenizer test vectors (vocab .inp / .out files), shared by tests and the CLI.
// Inputs: each input is followed by a line "__ggml_vocab_test__"; the input text excludes the
// newline before that line (so an input may be empty or consist of newlines).
std::vector<std::string> read_vocab_test_inputs(std::string_view inp_file_text);
// Outputs: one line per input, token ids separated by spaces (an empty line: no tokens).
std::vector<std::vector<int32_t>> read_vocab_test_outputs(std::string_view out_file_text);

}  // namespace lumen::tok
