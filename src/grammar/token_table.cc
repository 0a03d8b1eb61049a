#include "grammar/token_table.h"

#include <algorithm>

#include "base/check.h"

namespace lumen::grammar {

std::shared_ptr<const TokenTable> TokenTable::build(const tok::Tokenizer& tokenizer, int32_t n_vocab) {
  auto t = std::make_shared<TokenTable>();
  t->n_vocab_ = n_vocab;
  t->offsets_.reserve(static_cast<size_t>(n_vocab) + 1);
  t->offsets_.push_back(0);
  t->eog_.assign(static_cast<size_t>(n_vocab), 0);
  const int32_t n_known = std::min(n_vocab, tokenizer.n_vocab());
  for (int32_t id = 0; id < n_vocab; ++id) {
    if (id < n_known) {
      if (tokenizer.is_eog(id)) {
        t->eog_[static_cast<size_t>(id)] = 1;
        t->eog_ids_.push_back(id);
      } else {
        t->bytes_ += tokenizer.token_to_piece(id, /*special=*/false);
      }
    }
    t->offsets_.push_back(static_cast<int64_t>(t->bytes_.size()));
  }
  t->build_trie();
  return t;
}

std::shared_ptr<const TokenTable> TokenTable::from_pieces(const std::vector<std::string>& pieces,
                                                          const std::vector<int32_t>& eog) {
  auto t = std::make_shared<TokenTable>();
  t->n_vocab_ = static_cast<int32_t>(pieces.size());
  t->offsets_.push_back(0);
  t->eog_.assign(pieces.size(), 0);
  for (int32_t id : eog) {
    t->eog_[static_cast<size_t>(id)] = 1;
    t->eog_ids_.push_back(id);
  }
  for (size_t id = 0; id < pieces.size(); ++id) {
    if (!t->eog_[id]) t->bytes_ += pieces[id];
    t->offsets_.push_back(static_cast<int64_t>(t->bytes_.size()));
  }
  t->build_trie();
  return t;
}

void TokenTable::build_trie() {
  std::vector<int32_t> ids;
  for (int32_t id = 0; id < n_vocab_; ++id)
    if (!eog_[static_cast<size_t>(id)] && !bytes(id).empty()) ids.push_back(id);
  std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) {
    const std::string_view x = bytes(a), y = bytes(b);
    return x < y || (x == y && a < b);
  });
  trie_.clear();
  trie_tokens_ = ids;
  trie_.push_back(TrieNode{});
  std::vector<int32_t> path = {0};  // path[d]: the node at depth d on the current branch
  std::string_view prev;
  for (size_t i = 0; i < ids.size(); ++i) {
    const std::string_view s = bytes(ids[i]);
    size_t lcp = 0;
    while (lcp < s.size() && lcp < prev.size() && s[lcp] == prev[lcp]) ++lcp;
    while (path.size() > lcp + 1) {  // close the branch below the common prefix
      trie_[static_cast<size_t>(path.back())].end = static_cast<int32_t>(trie_.size());
      path.pop_back();
    }
    for (size_t d = lcp; d < s.size(); ++d) {
      TrieNode n;
      n.byte = static_cast<uint8_t>(s[d]);
      n.depth = static_cast<uint16_t>(std::min<size_t>(d + 1, 65535));
      n.tok_begin = n.tok_end = static_cast<int32_t>(i);
      path.push_back(static_cast<int32_t>(trie_.size()));
      trie_.push_back(n);
    }
    TrieNode& leaf = trie_[static_cast<size_t>(path.back())];
    if (leaf.tok_end == leaf.tok_begin) leaf.tok_begin = static_cast<int32_t>(i);
    leaf.tok_end = static_cast<int32_t>(i) + 1;
    prev = s;
  }
  while (!path.empty()) {
    trie_[static_cast<size_t>(path.back())].end = static_cast<int32_t>(trie_.size());
    path.pop_back();
  }
}

size_t TokenTable::memory_bytes() const {
  return bytes_.size() + offsets_.size() * sizeof(int64_t) + eog_.size() + trie_.size() * sizeof(TrieNode) +
         trie_tokens_.size() * sizeof(int32_t);
}

}  // namespace lumen::grammar
