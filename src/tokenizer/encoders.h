// The per-family encoders, each over one text fragment (special tokens already split out).
// All run in O(n log n) for a fragment of n bytes: symbols live in a doubly linked list over
// the fragment and candidate merges in a priority queue, whose stale entries are skipped.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "tokenizer/regex.h"
#include "tokenizer/vocab.h"

namespace lumen::tok {

// ---- SPM (llama.cpp llm_tokenizer_spm) ----
// `text` has its spaces already escaped as "▁". Repeatedly merges the adjacent pair whose
// concatenation is the highest-scoring token (ties: leftmost). Symbols that are no token
// become byte tokens (vocab.byte_ids), or one unk per character when a byte has no token.
void spm_encode(const Vocab& vocab, std::string_view text, std::vector<int32_t>* out);

// ---- byte-level BPE (llama.cpp llm_tokenizer_bpe) ----
// Merge ranks keyed by the two texts, as GGUF's tokenizer.ggml.merges ("left right").
class BpeRanks {
 public:
  // First rank of a pair wins (later duplicates are ignored).
  void add(const Vocab& vocab, std::string_view left, std::string_view right, int32_t rank);
  // Rank of merging the adjacent texts (left_id / right_id: their token ids or -1); -1 if none.
  int32_t find(std::string_view left, int32_t left_id, std::string_view right, int32_t right_id) const;
  size_t size() const { return n_merges_; }

 private:
  std::unordered_map<uint64_t, int32_t> by_ids_;      // both halves are tokens
  std::unordered_map<std::string, int32_t> by_text_;  // otherwise: u32 len(left) + left + right
  size_t n_merges_ = 0;
};

// The llama.cpp pre-tokenizer for a tokenizer.ggml.pre name: its regexes and the per-name
// flags llama.cpp sets with them. Unknown names give the gpt-2 set and *known = false; a
// missing name (empty) gives llama.cpp's "default" set.
struct BpePreTokenizer {
  std::vector<Regex> regexes;  // applied in sequence, each splitting every piece (isolated)
  bool ignore_merges = false;  // llama3 / tekken: a pre-token that is a token is emitted whole
  bool clean_spaces = true;    // decode clean-up (off for qwen2, deepseek, command-r, ...)
  bool add_bos = false;        // default for add_special (metadata may override)
};
Result<BpePreTokenizer> make_bpe_pre_tokenizer(std::string_view pre_name, bool* known);

// Splits valid UTF-8 `text` with the regexes in sequence; pieces are spans of `text`.
void regex_split_all(const std::vector<Regex>& regexes, std::string_view text, std::vector<Span>* pieces);

// Encodes one fragment: pre-tokenize, map bytes to GPT-2 code points, merge by rank.
void bpe_encode(const Vocab& vocab, const BpeRanks& ranks, const BpePreTokenizer& pre, std::string_view text,
                std::vector<int32_t>* out);

// ---- WPM (llama.cpp llm_tokenizer_wpm) ----
// Character classes for the WordPiece pre-split (whitespace / control / punctuation + CJK).
Result<Regex> make_wpm_classifier();
void wpm_encode(const Vocab& vocab, const Regex& classifier, int32_t max_token_bytes, std::string_view text,
                std::vector<int32_t>* out);

}  // namespace lumen::tok
