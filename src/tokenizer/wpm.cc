// WordPiece as llama.cpp's llm_tokenizer_wpm (BERT uncased vocabularies).
//
//   1. Each code point -> its NFD base letter ("Ä" -> "A"); classify it: whitespace ends a
//      word, control characters (and U+0000, U+FFFD) vanish, punctuation, ASCII symbols and
//      CJK ideographs become one-character words; everything else is lowercased into the word.
//   2. Each word, prefixed with "▁" (how llama.cpp's converter marks word-initial pieces; "##"
//      continuations are stored bare), is cut greedily into the longest vocab entries. A word
//      with an uncuttable rest becomes one [UNK].
#include <algorithm>

#include "tokenizer/encoders.h"
#include "tokenizer/unicode.h"

namespace lumen::tok {

Result<Regex> make_wpm_classifier() {
  // Group 1: whitespace. Group 2: dropped (NUL, U+FFFD, control / format / private use).
  // Group 3: one-character words (punctuation, ASCII symbols, CJK ideographs as BERT's
  // _is_chinese_char, including its 0x2B920 typo).
  return Regex::compile(
      "(\\s+)"
      "|([\\x{0}\\x{FFFD}\\p{Cc}\\p{Cf}\\p{Co}\\p{Cs}])"
      "|([\\p{P}$+<=>^`|~\\x{4E00}-\\x{9FFF}\\x{3400}-\\x{4DBF}\\x{20000}-\\x{2A6DF}\\x{2A700}-\\x{2B73F}"
      "\\x{2B740}-\\x{2B81F}\\x{2B920}-\\x{2CEAF}\\x{F900}-\\x{FAFF}\\x{2F800}-\\x{2FA1F}])");
}

namespace {

void wpm_encode_word(const Vocab& vocab, int32_t max_token_bytes, std::string_view word, std::string* buf,
                     std::vector<int32_t>* out) {
  buf->assign("\xE2\x96\x81");  // "▁"
  buf->append(word);
  const std::string_view w = *buf;
  const size_t n = w.size();
  const size_t n_before = out->size();
  for (size_t i = 0; i < n;) {
    bool matched = false;
    for (size_t j = std::min(n, i + static_cast<size_t>(max_token_bytes) + 1); j > i; --j) {
      if (const int32_t id = vocab.find(w.substr(i, j - i)); id >= 0) {
        out->push_back(id);
        i = j;
        matched = true;
        break;
      }
    }
    if (!matched) {
      out->resize(n_before);
      break;
    }
  }
  if (out->size() == n_before && vocab.unk_id >= 0) out->push_back(vocab.unk_id);
}

}  // namespace

void wpm_encode(const Vocab& vocab, const Regex& classifier, int32_t max_token_bytes, std::string_view text,
                std::vector<int32_t>* out) {
  std::string mapped;  // NFD base letters
  mapped.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) append_utf8(nfd_base(decode_utf8(text, &pos)), &mapped);

  std::vector<Span> matches;
  std::vector<int> groups;
  classifier.find_all(mapped, &matches, &groups);

  std::string word, buf, single;
  auto finish_word = [&] {
    if (!word.empty()) wpm_encode_word(vocab, max_token_bytes, word, &buf, out);
    word.clear();
  };
  auto append_lower = [&](size_t begin, size_t end, std::string* dst) {
    for (size_t pos = begin; pos < end;) append_utf8(to_lower(decode_utf8(mapped, &pos)), dst);
  };
  size_t prev = 0;
  for (size_t k = 0; k < matches.size(); ++k) {
    append_lower(prev, matches[k].begin, &word);
    prev = matches[k].end;
    switch (groups[k]) {
      case 1:
        finish_word();
        break;
      case 3:
        finish_word();
        single.clear();
        append_lower(matches[k].begin, matches[k].end, &single);
        wpm_encode_word(vocab, max_token_bytes, single, &buf, out);
        break;
      default:  // dropped characters do not end the word
        break;
    }
  }
  append_lower(prev, mapped.size(), &word);
  finish_word();
}

}  // namespace lumen::tok
