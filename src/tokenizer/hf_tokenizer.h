// Hugging Face tokenizer.json pipeline (BPE models):
//
//   text -> added tokens split out (leftmost-longest; special ones only with parse_special)
//        -> normalizers (Prepend, Replace, NFC, Lowercase, ...) per text fragment
//        -> pre-tokenizers (Split, ByteLevel, Metaspace, Digits, ...) -> pieces
//        -> BPE model per piece (merge ranks by token-id pairs, byte_fallback, unk / fuse_unk,
//           ignore_merges) -> ids
//        -> post-processor prefix / suffix ids when add_special
//
// Decoding uses the shared llama.cpp-style Vocab (vocab.h); the loader derives its piece style
// and leading-space rule from the tokenizer.json decoder.
#pragma once

#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tokenizer/regex.h"
#include "tokenizer/tokenizer_impl.h"

namespace lumen::tok {

struct HfNormalizer {
  enum class Kind : uint8_t { kPrepend, kReplace, kNfc, kNfd, kLowercase, kStrip, kStripAccents };
  Kind kind = Kind::kNfc;
  std::string content;  // kPrepend: the prefix; kReplace: the replacement
  Regex pattern;        // kReplace (literal for String patterns), kStripAccents (\p{Mn})
  bool left = true;     // kStrip
  bool right = true;    // kStrip
};

struct HfPreTokenizer {
  enum class Kind : uint8_t { kByteLevel, kSplit, kMetaspace };
  enum class Prepend : uint8_t { kAlways, kFirst, kNever };
  Kind kind = Kind::kSplit;
  // kSplit (Split, Digits, Whitespace, WhitespaceSplit, Punctuation all become splits)
  Regex pattern;
  SplitBehavior behavior = SplitBehavior::kIsolated;
  bool invert = false;
  // kByteLevel
  bool add_prefix_space = false;
  bool use_regex = true;  // the GPT-2 regex lives in `pattern`
  // kMetaspace
  std::string replacement = "\xE2\x96\x81";
  Prepend prepend = Prepend::kAlways;
  bool split = true;
};

struct HfPipeline {
  std::vector<HfNormalizer> normalizers;
  std::vector<HfPreTokenizer> pre_tokenizers;

  // BPE model
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges;  // (a << 32 | b) -> (rank, merged id)
  int32_t unk_id = -1;
  bool fuse_unk = false;
  bool byte_fallback = false;
  bool ignore_merges = false;
  std::string continuing_subword_prefix;
  std::string end_of_word_suffix;
  std::vector<int32_t> byte_fallback_ids;  // [256] "<0xXX>" model tokens, -1 if absent

  // Post-processor (add_special)
  std::vector<int32_t> prefix_ids;
  std::vector<int32_t> suffix_ids;
};

std::vector<int32_t> hf_encode(const TokenizerImpl& impl, std::string_view text, bool add_special,
                               bool parse_special);

}  // namespace lumen::tok
