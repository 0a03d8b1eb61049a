// Encoding through a Hugging Face tokenizer.json pipeline (see hf_tokenizer.h).
#include "tokenizer/hf_tokenizer.h"

#include <queue>

#include "tokenizer/unicode.h"

namespace lumen::tok {
namespace {

struct HfPiece {
  std::string text;
  bool at_start;  // begins at offset 0 of the input (Metaspace prepend_scheme "first")
};

std::string replace_matches(const std::string& s, const Regex& pattern, std::string_view content) {
  std::vector<Span> matches;
  pattern.find_all(s, &matches);
  if (matches.empty()) return s;
  std::string out;
  out.reserve(s.size());
  size_t prev = 0;
  for (const Span& m : matches) {
    out.append(s, prev, m.begin - prev);
    out.append(content);
    prev = m.end;
  }
  out.append(s, prev, std::string::npos);
  return out;
}

std::string strip_whitespace(const std::string& s, bool left, bool right) {
  size_t begin = 0, end = s.size();
  if (left) {
    while (begin < end) {
      size_t p = begin;
      if (!is_whitespace(decode_utf8(s, &p))) break;
      begin = p;
    }
  }
  if (right) {
    while (end > begin) {
      size_t start = end - 1;
      while (start > begin && (static_cast<uint8_t>(s[start]) & 0xC0) == 0x80) --start;
      size_t p = start;
      if (!is_whitespace(decode_utf8(s, &p))) break;
      end = start;
    }
  }
  return s.substr(begin, end - begin);
}

std::string normalize(const HfPipeline& hf, std::string s) {
  for (const HfNormalizer& n : hf.normalizers) {
    switch (n.kind) {
      case HfNormalizer::Kind::kPrepend:
        if (!s.empty()) s.insert(0, n.content);
        break;
      case HfNormalizer::Kind::kReplace:
        s = replace_matches(s, n.pattern, n.content);
        break;
      case HfNormalizer::Kind::kNfc:
        s = nfc_utf8(s);
        break;
      case HfNormalizer::Kind::kNfd:
        s = nfd_utf8(s);
        break;
      case HfNormalizer::Kind::kLowercase:
        s = to_lower_utf8(s);
        break;
      case HfNormalizer::Kind::kStrip:
        s = strip_whitespace(s, n.left, n.right);
        break;
      case HfNormalizer::Kind::kStripAccents:
        s = replace_matches(s, n.pattern, "");
        break;
    }
  }
  return s;
}

void split_pieces(const Regex& pattern, SplitBehavior behavior, bool invert, std::vector<HfPiece>* pieces) {
  std::vector<HfPiece> next;
  next.reserve(pieces->size());
  std::vector<Span> matches, parts;
  for (HfPiece& piece : *pieces) {
    matches.clear();
    parts.clear();
    pattern.find_all(piece.text, &matches);
    split_by_matches(piece.text.size(), matches, behavior, invert, &parts);
    if (parts.size() == 1 && parts[0].begin == 0 && parts[0].end == piece.text.size()) {
      next.push_back(std::move(piece));
      continue;
    }
    for (const Span& p : parts) {
      next.push_back({piece.text.substr(p.begin, p.end - p.begin), piece.at_start && p.begin == 0});
    }
  }
  pieces->swap(next);
}

void pre_tokenize(const HfPreTokenizer& pt, std::vector<HfPiece>* pieces) {
  switch (pt.kind) {
    case HfPreTokenizer::Kind::kSplit:
      split_pieces(pt.pattern, pt.behavior, pt.invert, pieces);
      break;
    case HfPreTokenizer::Kind::kByteLevel: {
      if (pt.add_prefix_space) {
        for (HfPiece& p : *pieces) {
          if (!p.text.empty() && p.text[0] != ' ') p.text.insert(0, 1, ' ');
        }
      }
      if (pt.use_regex) split_pieces(pt.pattern, SplitBehavior::kIsolated, false, pieces);
      std::string mapped;
      for (HfPiece& p : *pieces) {
        mapped.clear();
        for (char c : p.text) append_utf8(byte_to_unicode(static_cast<uint8_t>(c)), &mapped);
        p.text.swap(mapped);
      }
      break;
    }
    case HfPreTokenizer::Kind::kMetaspace: {
      for (HfPiece& p : *pieces) {
        std::string replaced;
        replaced.reserve(p.text.size() + 8);
        for (char c : p.text) {
          if (c == ' ') {
            replaced.append(pt.replacement);
          } else {
            replaced.push_back(c);
          }
        }
        const bool starts = replaced.compare(0, pt.replacement.size(), pt.replacement) == 0;
        const bool prepend = !replaced.empty() && !starts &&
                             (pt.prepend == HfPreTokenizer::Prepend::kAlways ||
                              (pt.prepend == HfPreTokenizer::Prepend::kFirst && p.at_start));
        if (prepend) replaced.insert(0, pt.replacement);
        p.text.swap(replaced);
      }
      if (pt.split) split_pieces(pt.pattern, SplitBehavior::kMergedWithNext, false, pieces);
      break;
    }
  }
}

// ---- BPE model (HF tokenizers models::bpe) ----

struct HfSymbol {
  int32_t id;
  int32_t prev;
  int32_t next;
  uint32_t len;  // bytes of input covered; 0 once merged away
};

struct HfMerge {
  int32_t rank;
  int32_t pos;
  int32_t new_id;
};

struct HfMergeOrder {  // pop the lowest rank, then the lowest position
  bool operator()(const HfMerge& a, const HfMerge& b) const {
    return a.rank > b.rank || (a.rank == b.rank && a.pos > b.pos);
  }
};

int32_t model_find(const Vocab& vocab, std::string_view text) {
  const int32_t id = vocab.find(text);
  return id >= 0 && vocab.tokens[id].in_model ? id : -1;
}

void bpe_word(const Vocab& vocab, const HfPipeline& hf, std::string_view piece, std::vector<HfSymbol>* buf,
              std::vector<int32_t>* out) {
  if (piece.empty()) return;
  if (hf.ignore_merges) {
    if (const int32_t id = model_find(vocab, piece); id >= 0) {
      out->push_back(id);
      return;
    }
  }
  std::vector<HfSymbol>& symbols = *buf;
  symbols.clear();
  auto add = [&](int32_t id, uint32_t len) {
    const auto index = static_cast<int32_t>(symbols.size());
    if (index > 0) symbols.back().next = index;
    symbols.push_back({id, index - 1, -1, len});
  };
  int32_t unk_pending = -1;  // fused unknown run waiting to be added
  uint32_t unk_len = 0;
  std::string key;
  for (size_t i = 0; i < piece.size();) {
    const size_t n = std::min(utf8_seq_len(static_cast<uint8_t>(piece[i])), piece.size() - i);
    std::string_view c = piece.substr(i, n);
    const bool last = i + n == piece.size();
    if ((i > 0 && !hf.continuing_subword_prefix.empty()) || (last && !hf.end_of_word_suffix.empty())) {
      key.clear();
      if (i > 0) key.append(hf.continuing_subword_prefix);
      key.append(c);
      if (last) key.append(hf.end_of_word_suffix);
      c = key;
    }
    i += n;
    if (const int32_t id = model_find(vocab, c); id >= 0) {
      if (unk_pending >= 0) add(unk_pending, unk_len);
      unk_pending = -1;
      add(id, static_cast<uint32_t>(n));
      continue;
    }
    if (hf.byte_fallback) {
      bool all = true;
      for (char b : c) all = all && hf.byte_fallback_ids[static_cast<uint8_t>(b)] >= 0;
      if (all) {  // (HF adds a pending unk only later, after these bytes)
        for (char b : c) add(hf.byte_fallback_ids[static_cast<uint8_t>(b)], 1);
        continue;
      }
    }
    if (hf.unk_id >= 0) {
      if (unk_pending >= 0 && hf.fuse_unk) {
        unk_len += static_cast<uint32_t>(n);
      } else {
        if (unk_pending >= 0) add(unk_pending, unk_len);
        unk_pending = hf.unk_id;
        unk_len = static_cast<uint32_t>(n);
      }
    }
  }
  if (unk_pending >= 0) add(unk_pending, unk_len);
  if (symbols.empty()) return;

  auto find_merge = [&](int32_t a, int32_t b) -> const std::pair<int32_t, int32_t>* {
    auto it = hf.merges.find((static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b));
    return it == hf.merges.end() ? nullptr : &it->second;
  };
  std::priority_queue<HfMerge, std::vector<HfMerge>, HfMergeOrder> queue;
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(symbols.size()); ++i) {
    if (const auto* m = find_merge(symbols[i].id, symbols[i + 1].id)) queue.push({m->first, i, m->second});
  }
  while (!queue.empty()) {
    const HfMerge top = queue.top();
    queue.pop();
    HfSymbol& cur = symbols[top.pos];
    if (cur.len == 0 || cur.next == -1) continue;
    const int32_t next_pos = cur.next;
    const HfSymbol right = symbols[next_pos];
    const auto* m = find_merge(cur.id, right.id);
    if (!m || m->second != top.new_id) continue;  // stale
    cur.id = top.new_id;
    cur.len += right.len;
    cur.next = right.next;
    symbols[next_pos].len = 0;
    if (right.next >= 0) symbols[right.next].prev = top.pos;
    if (cur.prev >= 0) {
      if (const auto* pm = find_merge(symbols[cur.prev].id, cur.id)) queue.push({pm->first, cur.prev, pm->second});
    }
    if (cur.next >= 0) {
      if (const auto* nm = find_merge(cur.id, symbols[cur.next].id)) queue.push({nm->first, top.pos, nm->second});
    }
  }
  for (const HfSymbol& s : symbols) {
    if (s.len != 0) out->push_back(s.id);
  }
}

void bpe_piece(const Vocab& vocab, const HfPipeline& hf, std::string_view piece, std::vector<HfSymbol>* buf,
               std::vector<int32_t>* out) {
  // Metaspace without split (Llama-2 style) leaves the whole text as one piece; cutting it in
  // front of each word's "▁" gives the same ids when no merge can cross that point (vocab
  // check at load; ignore_merges would look up the uncut piece, so it rules this out).
  if (vocab.split_before_metaspace && !hf.ignore_merges && piece.size() > 64) {
    for_each_metaspace_word(piece, [&](std::string_view word) { bpe_word(vocab, hf, word, buf, out); });
  } else {
    bpe_word(vocab, hf, piece, buf, out);
  }
}

}  // namespace

std::vector<int32_t> hf_encode(const TokenizerImpl& impl, std::string_view text, bool add_special,
                               bool parse_special) {
  const Vocab& vocab = impl.vocab;
  const HfPipeline& hf = *impl.hf;
  const std::string input = sanitize_utf8(text);
  std::vector<int32_t> out;
  out.reserve(input.size() / 3 + 4);
  if (add_special) out.insert(out.end(), hf.prefix_ids.begin(), hf.prefix_ids.end());

  auto eligible = [&](int32_t id, bool normalized) {
    const TokenData& t = vocab.tokens[id];
    return t.normalized == normalized && (parse_special || t.type != TokenType::kControl);
  };
  std::vector<Fragment> raw_fragments;
  if (impl.special.empty()) {
    if (!input.empty()) raw_fragments.push_back({-1, 0, input.size()});
  } else {
    impl.special.partition_leftmost_longest(
        vocab, input, [&](int32_t id) { return eligible(id, false); }, &raw_fragments);
  }

  std::vector<Fragment> norm_fragments;
  std::vector<HfPiece> pieces;
  std::vector<HfSymbol> symbols;
  for (const Fragment& f : raw_fragments) {
    if (f.token_id >= 0) {
      out.push_back(f.token_id);
      continue;
    }
    const std::string normalized = normalize(hf, input.substr(f.begin, f.end - f.begin));
    norm_fragments.clear();
    if (impl.special.empty()) {
      if (!normalized.empty()) norm_fragments.push_back({-1, 0, normalized.size()});
    } else {
      impl.special.partition_leftmost_longest(
          vocab, normalized, [&](int32_t id) { return eligible(id, true); }, &norm_fragments);
    }
    for (const Fragment& g : norm_fragments) {
      if (g.token_id >= 0) {
        out.push_back(g.token_id);
        continue;
      }
      pieces.clear();
      pieces.push_back({normalized.substr(g.begin, g.end - g.begin), f.begin == 0 && g.begin == 0});
      for (const HfPreTokenizer& pt : hf.pre_tokenizers) pre_tokenize(pt, &pieces);
      for (const HfPiece& p : pieces) bpe_piece(vocab, hf, p.text, &symbols, &out);
    }
  }
  if (add_special) out.insert(out.end(), hf.suffix_ids.begin(), hf.suffix_ids.end());
  return out;
}

}  // namespace lumen::tok
