// The vocabulary as the grammar sees it: each token's bytes (llama.cpp's token_to_piece
// without special tokens), which ids end generation, and a byte trie of every token that
// can be matched, in preorder, so a walk over the vocabulary shares prefixes and skips a
// whole subtree when its prefix fails.
//
//   tokens "a" "ab" "abc" "b"     trie (preorder)   0 root          end 5
//                                                   1 'a' [a]       end 4
//                                                   2  'b' [ab]     end 4
//                                                   3   'c' [abc]   end 4
//                                                   4 'b' [b]       end 5
//
// Tokens with no bytes (control tokens, unused ids) and end-of-generation tokens are not in
// the trie: the first are never allowed under a grammar, the second only when the grammar
// is complete. Built once per tokenizer; immutable and shared by every grammar.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace lumen::grammar {

struct TrieNode {
  uint8_t byte = 0;        // the byte on the edge into this node (root: 0)
  uint16_t depth = 0;      // bytes from the root
  int32_t end = 0;         // one past the last node of this subtree
  int32_t tok_begin = 0;   // tokens whose bytes end here: trie_tokens()[tok_begin, tok_end)
  int32_t tok_end = 0;
};

class TokenTable {
 public:
  // n_vocab: the model's vocabulary size (rows of its output); ids the tokenizer does not
  // know are never allowed.
  static std::shared_ptr<const TokenTable> build(const tok::Tokenizer& tokenizer, int32_t n_vocab);
  // For tests: tokens given as byte strings; eog lists end-of-generation ids.
  static std::shared_ptr<const TokenTable> from_pieces(const std::vector<std::string>& pieces,
                                                       const std::vector<int32_t>& eog);

  int32_t n_vocab() const { return n_vocab_; }
  std::string_view bytes(int32_t id) const {
    return std::string_view(bytes_).substr(static_cast<size_t>(offsets_[static_cast<size_t>(id)]),
                                          static_cast<size_t>(offsets_[static_cast<size_t>(id) + 1] -
                                                              offsets_[static_cast<size_t>(id)]));
  }
  bool is_eog(int32_t id) const { return eog_[static_cast<size_t>(id)] != 0; }
  const std::vector<int32_t>& eog_ids() const { return eog_ids_; }
  const std::vector<TrieNode>& trie() const { return trie_; }
  const std::vector<int32_t>& trie_tokens() const { return trie_tokens_; }
  size_t memory_bytes() const;

 private:
  void build_trie();

  int32_t n_vocab_ = 0;
  std::string bytes_;               // every token's bytes, concatenated
  std::vector<int64_t> offsets_;    // [n_vocab + 1]
  std::vector<uint8_t> eog_;        // [n_vocab]
  std::vector<int32_t> eog_ids_;
  std::vector<TrieNode> trie_;
  std::vector<int32_t> trie_tokens_;  // ids in trie (byte) order
};

}  // namespace lumen::grammar
