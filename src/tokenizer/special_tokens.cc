#include "tokenizer/special_tokens.h"

#include <algorithm>

#include "tokenizer/unicode.h"

namespace lumen::tok {
namespace {

bool is_c_space(char c) {  // C isspace in the "C" locale, as llama.cpp's strip uses
  return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

// Emits text / token fragments from a per-byte owner map: -1 free text, -2 dropped
// (stripped whitespace), k >= 0 the token of accepted match k.
void emit_fragments(const std::vector<int32_t>& owner, const std::vector<int32_t>& match_token,
                    std::vector<Fragment>* out) {
  const size_t n = owner.size();
  size_t i = 0;
  while (i < n) {
    const int32_t o = owner[i];
    size_t j = i + 1;
    while (j < n && owner[j] == o) ++j;
    if (o == -1) {
      out->push_back({-1, i, j});
    } else if (o >= 0) {
      out->push_back({match_token[o], i, j});
    }
    i = j;
  }
}

}  // namespace

void SpecialTokenMatcher::build(const Vocab& vocab, const std::vector<int32_t>& ids) {
  edges_.clear();
  node_token_.assign(1, -1);
  rank_.assign(static_cast<size_t>(vocab.n_tokens()), -1);
  n_tokens_ = 0;
  std::vector<int32_t> order;
  for (int32_t id : ids) {
    if (vocab.valid_id(id) && !vocab.tokens[id].text.empty()) order.push_back(id);
  }
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    const size_t la = vocab.tokens[a].text.size(), lb = vocab.tokens[b].text.size();
    return la != lb ? la > lb : a < b;
  });
  order.erase(std::unique(order.begin(), order.end()), order.end());
  for (size_t r = 0; r < order.size(); ++r) {
    const int32_t id = order[r];
    rank_[id] = static_cast<int32_t>(r);
    int32_t node = 0;
    for (char c : vocab.tokens[id].text) {
      const uint64_t key = (static_cast<uint64_t>(node) << 8) | static_cast<uint8_t>(c);
      auto it = edges_.find(key);
      if (it == edges_.end()) {
        const auto next = static_cast<int32_t>(node_token_.size());
        node_token_.push_back(-1);
        it = edges_.emplace(key, next).first;
      }
      node = it->second;
    }
    // Same text twice: the first in priority order (lower id) keeps the node.
    if (node_token_[node] < 0) node_token_[node] = id;
    ++n_tokens_;
  }
}

void SpecialTokenMatcher::partition_by_length(const Vocab& vocab, std::string_view text,
                                              const std::function<bool(int32_t)>& eligible,
                                              std::vector<Fragment>* out) const {
  if (text.empty()) return;
  // 1. Every occurrence of every eligible token: (rank, position).
  struct Match {
    int32_t rank;
    int32_t id;
    size_t pos;
  };
  std::vector<Match> matches;
  for (size_t pos = 0; pos < text.size(); ++pos) {
    int32_t node = 0;
    for (size_t i = pos; i < text.size(); ++i) {
      node = child(node, static_cast<uint8_t>(text[i]));
      if (node < 0) break;
      const int32_t id = node_token_[node];
      if (id >= 0 && eligible(id)) matches.push_back({rank_[id], id, pos});
    }
  }
  if (matches.empty()) {
    out->push_back({-1, 0, text.size()});
    return;
  }
  // 2. llama.cpp's order: token by token (by rank), each left to right over what is still text.
  std::sort(matches.begin(), matches.end(), [](const Match& a, const Match& b) {
    return a.rank != b.rank ? a.rank < b.rank : a.pos < b.pos;
  });
  std::vector<int32_t> owner(text.size(), -1);
  std::vector<int32_t> match_token;
  for (const Match& m : matches) {
    const TokenData& t = vocab.tokens[m.id];
    const size_t end = m.pos + t.text.size();
    bool free = true;
    for (size_t i = m.pos; i < end && free; ++i) free = owner[i] == -1;
    if (!free) continue;
    const auto k = static_cast<int32_t>(match_token.size());
    match_token.push_back(m.id);
    std::fill(owner.begin() + static_cast<ptrdiff_t>(m.pos), owner.begin() + static_cast<ptrdiff_t>(end), k);
    if (t.lstrip) {
      for (size_t i = m.pos; i > 0 && owner[i - 1] == -1 && is_c_space(text[i - 1]); --i) owner[i - 1] = -2;
    }
    if (t.rstrip) {
      for (size_t i = end; i < text.size() && owner[i] == -1 && is_c_space(text[i]); ++i) owner[i] = -2;
    }
  }
  emit_fragments(owner, match_token, out);
}

void SpecialTokenMatcher::partition_leftmost_longest(const Vocab& vocab, std::string_view text,
                                                     const std::function<bool(int32_t)>& eligible,
                                                     std::vector<Fragment>* out) const {
  if (text.empty()) return;
  std::vector<int32_t> owner(text.size(), -1);
  std::vector<int32_t> match_token;
  size_t prev_end = 0;  // stripping never reaches into an earlier match
  size_t pos = 0;
  while (pos < text.size()) {
    int32_t best = -1;
    size_t best_end = 0;
    int32_t node = 0;
    for (size_t i = pos; i < text.size(); ++i) {
      node = child(node, static_cast<uint8_t>(text[i]));
      if (node < 0) break;
      const int32_t id = node_token_[node];
      if (id >= 0 && eligible(id)) {
        best = id;
        best_end = i + 1;
      }
    }
    if (best < 0) {
      ++pos;
      continue;
    }
    const TokenData& t = vocab.tokens[best];
    if (t.single_word) {
      // A word character (alphanumeric or '_') must not touch the match on either side.
      auto is_word_byte = [](char c) {
        const auto b = static_cast<uint8_t>(c);
        return b >= 0x80 || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
      };
      const bool left_ok = pos == 0 || !is_word_byte(text[pos - 1]);
      const bool right_ok = best_end == text.size() || !is_word_byte(text[best_end]);
      if (!left_ok || !right_ok) {
        pos = best_end;
        continue;
      }
    }
    const auto k = static_cast<int32_t>(match_token.size());
    match_token.push_back(best);
    std::fill(owner.begin() + static_cast<ptrdiff_t>(pos), owner.begin() + static_cast<ptrdiff_t>(best_end), k);
    if (t.lstrip) {
      // Walk back over whitespace code points (UTF-8 aware) down to the previous match.
      size_t i = pos;
      while (i > prev_end) {
        size_t start = i - 1;
        while (start > prev_end && (static_cast<uint8_t>(text[start]) & 0xC0) == 0x80) --start;
        size_t p = start;
        if (!is_whitespace(decode_utf8(text, &p))) break;
        for (size_t j = start; j < i; ++j) owner[j] = -2;
        i = start;
      }
    }
    size_t end = best_end;
    if (t.rstrip) {
      while (end < text.size()) {
        size_t p = end;
        if (!is_whitespace(decode_utf8(text, &p))) break;
        for (size_t j = end; j < p; ++j) owner[j] = -2;
        end = p;
      }
    }
    prev_end = end;
    pos = end;
  }
  emit_fragments(owner, match_token, out);
}

}  // namespace lumen::tok
