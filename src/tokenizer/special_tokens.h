// Splitting special / added token texts out of the input before the model tokenizes it.
//
//   "Hi<|im_end|>\nBye"  ->  [text "Hi"] [token <|im_end|>] [text "\nBye"]
//
// Two match orders exist, one per reference implementation:
//   by_length         llama.cpp tokenizer_st_partition: tokens in order of decreasing text
//                     length (ties: lower id), each splitting every text fragment left to right.
//   leftmost_longest  HF AddedVocabulary: scan left to right, longest match at each position.
// Both honour lstrip / rstrip (the token also swallows adjacent whitespace); HF also
// single_word. All matches are found with one byte trie walk per input position, so the cost
// is O(input length x longest token), not O(input length x number of special tokens).
#pragma once

#include <cstdint>
#include <functional>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/vocab.h"

namespace lumen::tok {

struct Fragment {
  int32_t token_id;  // -1: text [begin, end) of the input
  size_t begin;
  size_t end;
};

class SpecialTokenMatcher {
 public:
  // Builds the trie over `ids` (tokens eligible for splitting; their text must be non-empty).
  void build(const Vocab& vocab, const std::vector<int32_t>& ids);
  bool empty() const { return n_tokens_ == 0; }

  // `eligible(id)` filters tokens per call (e.g. control tokens only when parse_special).
  // Appends the fragments of `text` in order; text fragments are never empty.
  void partition_by_length(const Vocab& vocab, std::string_view text,
                           const std::function<bool(int32_t)>& eligible, std::vector<Fragment>* out) const;
  void partition_leftmost_longest(const Vocab& vocab, std::string_view text,
                                  const std::function<bool(int32_t)>& eligible,
                                  std::vector<Fragment>* out) const;

 private:
  int32_t child(int32_t node, uint8_t byte) const {
    auto it = edges_.find((static_cast<uint64_t>(node) << 8) | byte);
    return it == edges_.end() ? -1 : it->second;
  }

  std::unordered_map<uint64_t, int32_t> edges_;  // (node << 8 | byte) -> child node
  std::vector<int32_t> node_token_;              // [n_nodes] token id ending here, -1 if none
  std::vector<int32_t> rank_;                    // [n_vocab] by_length priority (0 = first), -1
  int32_t n_tokens_ = 0;
};

}  // namespace lumen::tok
