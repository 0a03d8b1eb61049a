// Hugging Face tokenizer.json (+ tokenizer_config.json) -> GGUF tokenizer.ggml.* metadata,
// as llama.cpp's convert_hf_to_gguf.py writes it, so lumen and llama.cpp read the same vocab:
//
//   byte-level BPE (a ByteLevel pre-tokenizer, no byte_fallback)   -> model "gpt2":
//       tokens (id order), token_type, merges ("a b"), pre chosen from the pre-tokenizer
//       (Split regex of Qwen2 -> "qwen2", of Llama 3 -> "llama-bpe", Digits + ByteLevel ->
//       "smollm", plain ByteLevel -> "gpt-2"; llama.cpp hashes the encoding of a probe text
//       instead, which needs the HF tokenizers library)
//   BPE with byte_fallback and a Sequence decoder (SentencePiece-style, "▁")
//                                                                   -> model "llama", pre
//       "default", every score -1000 and types NORMAL / CONTROL (special ids) / BYTE
//       (<0xXX>), as gguf-py's LlamaHfVocab. (tokenizer.json has merges, not scores; the
//       -1000 scores keep the file identical to llama.cpp's. Measured on TinyStories-656K's
//       vectors: 43/50 encode as HF does with them, 45/50 with scores derived from merge
//       ranks, so neither reproduces HF's BPE exactly; lumen reading the HF directory
//       itself does.)
//
//   token types (gpt2): added tokens that are special or look special ("<|...|>") -> CONTROL,
//   other added tokens -> USER_DEFINED, ids without a token -> "[PAD<id>]" UNUSED, the rest
//   NORMAL. (llama.cpp also round-trips non-normalized added tokens through the HF
//   tokenizer; for the vocabularies lumen targets that is the identity.)
//   special ids: tokenizer_config.json's bos/eos/unk/sep/pad/cls/mask token texts looked up
//   in added_tokens, else the fallback ids given (config.json's *_token_id); add_bos/add_eos
//   from tokenizer_config.json or a TemplateProcessing post-processor; the chat template.
//
// Model vocabulary size (n_vocab) vs tokenizer size:
//   larger  -> padded with "[PAD<id>]" tokens of type UNUSED (real Qwen2 files: 151936 rows
//              for 151665 tokens);
//   smaller -> truncated: the first n_vocab - n_added regular tokens are kept, then every
//              added token, renumbered in order after them; merges that use a dropped token
//              are dropped. A byte-level vocabulary must keep all 256 byte tokens. This is
//              how `lumen synth` fits a real tokenizer to a smaller model (smollm2-135m's
//              49152 from Llama 3's 128256, or a test model's 512).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"
#include "gguf/model_file.h"

namespace lumen::convert {

struct HfTokenizerTexts {
  std::string tokenizer_json;         // required
  std::string tokenizer_config_json;  // may be empty
  std::string chat_template;          // chat_template.jinja beside it, used when the config has none
};

// Reads tokenizer.json at `path` and, beside it, tokenizer_config.json and
// chat_template.jinja when present.
Result<HfTokenizerTexts> read_hf_tokenizer_files(const std::string& path);

struct TokenizerGgufOptions {
  int64_t n_vocab = 0;  // the model's vocabulary (embedding rows); 0: the tokenizer's size
  // Fallback special ids (config.json's bos/eos/pad_token_id), -1 when unknown.
  int64_t bos_id = -1;
  int64_t eos_id = -1;
  int64_t pad_id = -1;
};

struct TokenizerGguf {
  std::vector<std::pair<std::string, gguf::MetaValue>> metadata;  // tokenizer.ggml.*, tokenizer.chat_template*
  std::string model;     // "gpt2" or "llama"
  std::string pre;       // tokenizer.ggml.pre
  int64_t n_tokens_tokenizer = 0;  // tokens the tokenizer defines (max id + 1)
  int64_t n_tokens_kept = 0;       // of those, kept in the output (< n_tokens_tokenizer when truncated)
  int64_t n_tokens_padded = 0;     // "[PAD<id>]" entries added
};

Result<TokenizerGguf> hf_tokenizer_to_gguf(const HfTokenizerTexts& texts, const TokenizerGgufOptions& options);

}  // namespace lumen::convert
