// Byte-level BPE as llama.cpp's llm_tokenizer_bpe: regex pre-tokenization (the sets llama.cpp
// uses per tokenizer.ggml.pre), GPT-2 byte -> code point mapping, then merges by rank.
//
//   "Hello world"  -> pieces "Hello", " world"  -> " world" becomes "Ġworld"
//   "Ġworld": symbols Ġ w o r l d; queue adjacent pairs with a merge rank; pop the lowest rank
//   (ties: leftmost), merge, queue the pairs with the new neighbours; stale entries (a side
//   changed since queued) are skipped. O(n log n) per piece.
#include <algorithm>
#include <array>
#include <cstring>
#include <queue>

#include "base/log.h"
#include "tokenizer/encoders.h"
#include "tokenizer/unicode.h"

namespace lumen::tok {

// ---- merge ranks ----

void BpeRanks::add(const Vocab& vocab, std::string_view left, std::string_view right, int32_t rank) {
  ++n_merges_;
  const int32_t l = vocab.find(left), r = vocab.find(right);
  if (l >= 0 && r >= 0) {
    by_ids_.emplace((static_cast<uint64_t>(l) << 32) | static_cast<uint32_t>(r), rank);
    return;
  }
  std::string key(4, '\0');
  const auto n = static_cast<uint32_t>(left.size());
  std::memcpy(key.data(), &n, 4);
  key.append(left).append(right);
  by_text_.emplace(std::move(key), rank);
}

int32_t BpeRanks::find(std::string_view left, int32_t left_id, std::string_view right, int32_t right_id) const {
  if (left_id >= 0 && right_id >= 0) {
    auto it = by_ids_.find((static_cast<uint64_t>(left_id) << 32) | static_cast<uint32_t>(right_id));
    return it == by_ids_.end() ? -1 : it->second;
  }
  if (by_text_.empty()) return -1;
  std::string key(4, '\0');
  const auto n = static_cast<uint32_t>(left.size());
  std::memcpy(key.data(), &n, 4);
  key.append(left).append(right);
  auto it = by_text_.find(key);
  return it == by_text_.end() ? -1 : it->second;
}

// ---- pre-tokenizer regex sets (llama.cpp llm_tokenizer_bpe, by tokenizer.ggml.pre) ----

namespace {

enum class PreSet : uint8_t {
  kDefault, kLlama3, kDeepseekLlm, kDeepseekCoder, kDeepseek3, kFalcon, kStarcoder, kGpt2, kQwen2,
  kPoro, kChatglm4, kViking, kTekken, kChameleon,
};

// The GPT-2 pattern and the llama3 / qwen2 ones (contractions spelled case-insensitively
// the way llama.cpp does, so (?i) never folds other letters into them).
constexpr const char* kGpt2Regex = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)";
constexpr const char* kLlama3Regex =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr const char* kQwen2Regex =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

// deepseek-llm / deepseek-coder's run of CJK (and everything from U+0800 to U+4E00). llama.cpp
// matches such patterns (no \p{..}: std::wregex) on a copy of the text in which every
// non-ASCII space is U+000B, so the spaces inside the range (U+1680, U+2000-U+200A, U+2028,
// U+2029, U+202F, U+205F, U+3000) never match it: "a\u3000b" is not one CJK run there.
// Likewise the punctuation class above stops at U+3001.
constexpr const char* kCjkRun = "(?:(?!\\s)[\\x{4E00}-\\x{9FA5}\\x{800}-\\x{4E00}\\x{AC00}-\\x{D7FF}])+";

std::vector<std::string> regexes_for(PreSet set) {
  switch (set) {
    case PreSet::kLlama3:
    case PreSet::kChatglm4:
      return {kLlama3Regex};
    case PreSet::kDeepseekLlm:
      return {
          "[\r\n]",
          "\\s?["
          "\\x{41}-\\x{5A}\\x{61}-\\x{7A}\\x{B5}\\x{C0}-\\x{D6}\\x{D8}-\\x{F6}\\x{F8}-\\x{1BA}"
          "\\x{1BC}-\\x{1BF}\\x{1C4}-\\x{293}\\x{295}-\\x{2AF}\\x{370}-\\x{373}\\x{376}\\x{377}"
          "\\x{37B}-\\x{37D}\\x{37F}\\x{386}\\x{388}-\\x{38A}\\x{38C}\\x{38E}-\\x{3A1}\\x{3A3}-\\x{3F5}"
          "\\x{3F7}-\\x{481}\\x{48A}-\\x{52F}\\x{531}-\\x{556}\\x{10A0}-\\x{10C5}\\x{13A0}-\\x{13F5}"
          "\\x{13F8}-\\x{13FD}\\x{1C90}-\\x{1CBA}\\x{1CBD}-\\x{1CBF}\\x{1D00}-\\x{1D2B}\\x{1D6B}-\\x{1D77}"
          "\\x{1D79}-\\x{1D9A}\\x{1E00}-\\x{1F15}\\x{1F18}-\\x{1F1D}\\x{1F20}-\\x{1F45}\\x{1F48}-\\x{1F4D}"
          "\\x{1F50}-\\x{1F57}\\x{1F59}\\x{1F5B}\\x{1F5D}\\x{1F5F}-\\x{1F7D}\\x{1F80}-\\x{1FB4}"
          "\\x{1FB6}-\\x{1FBC}\\x{1FBE}\\x{1FC2}-\\x{1FC4}\\x{1FC6}-\\x{1FCC}\\x{1FD0}-\\x{1FD3}"
          "\\x{1FD6}-\\x{1FDB}\\x{1FE0}-\\x{1FEC}\\x{1FF2}-\\x{1FF4}\\x{1FF6}-\\x{1FFC}\\x{2102}\\x{2107}"
          "\\x{210A}-\\x{2113}\\x{2115}\\x{2119}-\\x{211D}\\x{2124}\\x{2126}\\x{2128}\\x{212A}-\\x{212D}"
          "\\x{212F}-\\x{2134}\\x{2139}\\x{213C}-\\x{213F}\\x{2145}-\\x{2149}\\x{214E}\\x{2183}\\x{2184}"
          "\\x{2C00}-\\x{2C7B}\\x{2C7E}-\\x{2CE4}\\x{2CEB}-\\x{2CEE}\\x{2CF2}\\x{2CF3}\\x{A640}-\\x{A66D}"
          "\\x{A680}-\\x{A69B}\\x{A722}-\\x{A76F}\\x{A771}-\\x{A787}\\x{A78B}-\\x{A78E}\\x{AB70}-\\x{ABBF}"
          "\\x{FB00}-\\x{FB06}\\x{FB13}-\\x{FB17}\\x{FF21}-\\x{FF3A}\\x{FF41}-\\x{FF5A}"
          "\\x{10400}-\\x{1044F}\\x{104B0}-\\x{104D3}\\x{104D8}-\\x{104FB}\\x{10C80}-\\x{10CB2}"
          "\\x{10CC0}-\\x{10CF2}\\x{118A0}-\\x{118DF}\\x{1E900}-\\x{1E943}"
          "]+",
          "\\s?[!-/:-~\\x{FF01}-\\x{FF0F}\\x{FF1A}-\\x{FF5E}\\x{2018}-\\x{201F}\\x{3001}-\\x{3002}]+",  // U+3000: see kCjkRun
          "\\s+$",
          kCjkRun,
          "\\p{N}+",
      };
    case PreSet::kDeepseekCoder:
      return {"[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", kCjkRun, "\\p{N}"};
    case PreSet::kDeepseek3:
      return {
          "\\p{N}{1,3}",
          "[\\x{4E00}-\\x{9FA5}\\x{3040}-\\x{309F}\\x{30A0}-\\x{30FF}]+",
          "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| "
          "?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+",
      };
    case PreSet::kFalcon:
      return {"[\\p{P}\\$\\+<=>\\^~\\|`]+", kGpt2Regex, "[0-9][0-9][0-9]"};
    case PreSet::kStarcoder:
      return {"\\p{N}", kGpt2Regex};
    case PreSet::kGpt2:
      return {kGpt2Regex};
    case PreSet::kQwen2:
      return {kQwen2Regex};
    case PreSet::kPoro:
      return {" ?[^(\\s|.,!?\\x{2026}\\x{3002}\\x{FF0C}\\x{3001}\\x{964}\\x{6D4}\\x{60C})]+"};
    case PreSet::kViking:
      return {" ?[^(\\s|.,!?\\x{2026}\\x{3002}\\x{FF0C}\\x{3001}\\x{964}\\x{6D4}\\x{60C})]+", "\\p{N}"};
    case PreSet::kTekken:
      // The original tokenizer.json pattern (PCRE2 has the classes llama.cpp had to emulate).
      return {"[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+|"
              "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*|"
              "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"};
    case PreSet::kChameleon:
      return {"<sentinel:[0-9]+>", "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z", "([\\t\\n]|    |  )", "\\p{N}",
              "[\\p{P}!-/:-@\\[-`{-~]", kGpt2Regex};
    case PreSet::kDefault:
      break;
  }
  return {"[\\p{P}\\$\\+<=>\\^~\\|]+", kGpt2Regex, "\\p{N}+", "[0-9][0-9][0-9]"};
}

struct PreInfo {
  std::string_view name;
  PreSet set;
  bool clean_spaces;
  bool ignore_merges;
  bool add_bos;
};

// Names as llama.cpp accepts them (llama-vocab.cpp, early 2025), with its per-name flags.
constexpr PreInfo kPreInfos[] = {
    {"default", PreSet::kDefault, true, false, false},
    {"llama3", PreSet::kLlama3, true, true, true},
    {"llama-v3", PreSet::kLlama3, true, true, true},
    {"llama-bpe", PreSet::kLlama3, true, true, true},
    {"falcon3", PreSet::kLlama3, true, true, true},
    {"deepseek-llm", PreSet::kDeepseekLlm, false, false, false},
    {"deepseek-coder", PreSet::kDeepseekCoder, false, false, false},
    {"deepseek-v3", PreSet::kDeepseek3, false, false, false},
    {"falcon", PreSet::kFalcon, true, false, false},
    {"mpt", PreSet::kGpt2, true, false, false},
    {"gpt-neox", PreSet::kGpt2, true, false, false},
    {"starcoder", PreSet::kStarcoder, true, false, false},
    {"refact", PreSet::kStarcoder, true, false, false},
    {"command-r", PreSet::kStarcoder, false, false, false},
    {"smollm", PreSet::kStarcoder, false, false, false},
    {"codeshell", PreSet::kStarcoder, true, false, false},
    {"exaone", PreSet::kStarcoder, true, false, false},
    {"minerva-7b", PreSet::kStarcoder, true, false, false},
    {"gpt-2", PreSet::kGpt2, true, false, false},
    {"phi-2", PreSet::kGpt2, true, false, false},
    {"jina-es", PreSet::kGpt2, true, false, false},
    {"jina-de", PreSet::kGpt2, true, false, false},
    {"gigachat", PreSet::kGpt2, true, false, false},
    {"jina-v1-en", PreSet::kGpt2, true, false, false},
    {"jina-v2-es", PreSet::kGpt2, true, false, false},
    {"jina-v2-de", PreSet::kGpt2, true, false, false},
    {"jina-v2-code", PreSet::kGpt2, true, false, false},
    {"roberta-bpe", PreSet::kGpt2, true, false, false},
    {"olmo", PreSet::kGpt2, true, false, false},
    {"jais", PreSet::kGpt2, true, false, false},
    {"dbrx", PreSet::kLlama3, true, false, false},
    {"smaug-bpe", PreSet::kLlama3, true, false, false},
    {"qwen2", PreSet::kQwen2, false, false, false},
    {"stablelm2", PreSet::kQwen2, true, false, false},
    {"megrez", PreSet::kQwen2, true, false, false},
    {"poro-chat", PreSet::kPoro, false, false, false},
    {"bloom", PreSet::kPoro, true, false, false},
    {"gpt3-finnish", PreSet::kPoro, true, false, false},
    {"chatglm-bpe", PreSet::kChatglm4, true, false, false},
    {"viking", PreSet::kViking, false, false, false},
    {"tekken", PreSet::kTekken, false, true, true},
    {"chameleon", PreSet::kChameleon, false, false, true},
};

}  // namespace

Result<BpePreTokenizer> make_bpe_pre_tokenizer(std::string_view pre_name, bool* known) {
  *known = true;
  PreInfo info = kPreInfos[0];  // missing pre name: llama.cpp's "default" set
  if (!pre_name.empty()) {
    const auto* it = std::find_if(std::begin(kPreInfos), std::end(kPreInfos),
                                  [&](const PreInfo& p) { return p.name == pre_name; });
    if (it != std::end(kPreInfos)) {
      info = *it;
    } else {
      *known = false;
      info = {"gpt-2", PreSet::kGpt2, true, false, false};
    }
  }
  BpePreTokenizer pre;
  pre.ignore_merges = info.ignore_merges;
  pre.clean_spaces = info.clean_spaces;
  pre.add_bos = info.add_bos;
  for (const std::string& pattern : regexes_for(info.set)) {
    LUMEN_ASSIGN_OR_RETURN(Regex re, Regex::compile(pattern));
    pre.regexes.push_back(std::move(re));
  }
  return pre;
}

void regex_split_all(const std::vector<Regex>& regexes, std::string_view text, std::vector<Span>* pieces) {
  pieces->clear();
  if (text.empty()) return;
  pieces->push_back({0, text.size()});
  std::vector<Span> next, matches, sub;
  for (const Regex& re : regexes) {
    next.clear();
    for (const Span& piece : *pieces) {
      matches.clear();
      sub.clear();
      re.find_all(text.substr(piece.begin, piece.end - piece.begin), &matches);
      split_by_matches(piece.end - piece.begin, matches, SplitBehavior::kIsolated, false, &sub);
      for (const Span& s : sub) next.push_back({piece.begin + s.begin, piece.begin + s.end});
    }
    pieces->swap(next);
  }
}

// ---- merging ----

namespace {

struct BpeSymbol {
  uint32_t begin;  // byte offset into the word
  uint32_t n;      // byte length; 0 once merged into its left neighbour
  int32_t prev;
  int32_t next;
  int32_t id;  // token id of the text, -1 if it is no token
};

struct BpeBigram {
  int32_t rank;
  int32_t left;
  int32_t right;
  uint32_t n_left;  // sizes when queued: a changed side makes the entry stale
  uint32_t n_right;
};

struct BpeBigramOrder {  // pop the lowest rank, then the leftmost
  bool operator()(const BpeBigram& a, const BpeBigram& b) const {
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
  }
};

void bpe_encode_word(const Vocab& vocab, const BpeRanks& ranks, bool ignore_merges, std::string_view word,
                     std::vector<BpeSymbol>* symbols_buf, std::vector<int32_t>* out) {
  if (word.empty()) return;
  if (ignore_merges) {
    if (const int32_t id = vocab.find(word); id >= 0) {
      out->push_back(id);
      return;
    }
  }
  std::vector<BpeSymbol>& symbols = *symbols_buf;
  symbols.clear();
  for (size_t offs = 0; offs < word.size();) {
    const size_t n = std::min(utf8_seq_len(static_cast<uint8_t>(word[offs])), word.size() - offs);
    const auto index = static_cast<int32_t>(symbols.size());
    symbols.push_back({static_cast<uint32_t>(offs), static_cast<uint32_t>(n), index - 1,
                       offs + n == word.size() ? -1 : index + 1, vocab.find(word.substr(offs, n))});
    offs += n;
  }
  std::priority_queue<BpeBigram, std::vector<BpeBigram>, BpeBigramOrder> queue;
  auto add_bigram = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const BpeSymbol& l = symbols[left];
    const BpeSymbol& r = symbols[right];
    const int32_t rank = ranks.find(word.substr(l.begin, l.n), l.id, word.substr(r.begin, r.n), r.id);
    if (rank >= 0) queue.push({rank, left, right, l.n, r.n});
  };
  for (int32_t i = 1; i < static_cast<int32_t>(symbols.size()); ++i) add_bigram(i - 1, i);
  while (!queue.empty()) {
    const BpeBigram bigram = queue.top();
    queue.pop();
    BpeSymbol& left = symbols[bigram.left];
    BpeSymbol& right = symbols[bigram.right];
    if (left.n != bigram.n_left || right.n != bigram.n_right || right.n == 0 || left.next != bigram.right) {
      continue;  // stale
    }
    left.n += right.n;
    right.n = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = bigram.left;
    left.id = vocab.find(word.substr(left.begin, left.n));
    add_bigram(left.prev, bigram.left);
    add_bigram(bigram.left, left.next);
  }
  for (int32_t i = 0; i != -1; i = symbols[i].next) {
    const BpeSymbol& sym = symbols[i];
    if (sym.id >= 0) {
      out->push_back(sym.id);
      continue;
    }
    // As llama.cpp: spell an unknown symbol with single-byte tokens where they exist.
    for (char c : word.substr(sym.begin, sym.n)) {
      if (const int32_t id = vocab.find(std::string_view(&c, 1)); id >= 0) out->push_back(id);
    }
  }
}

}  // namespace

void bpe_encode(const Vocab& vocab, const BpeRanks& ranks, const BpePreTokenizer& pre, std::string_view text,
                std::vector<int32_t>* out) {
  const std::string clean = sanitize_utf8(text);  // invalid bytes -> U+FFFD, as llama.cpp
  std::vector<Span> pieces;
  regex_split_all(pre.regexes, clean, &pieces);
  // The GPT-2 alphabet, each byte's code point pre-encoded as UTF-8.
  static const std::array<std::string, 256> kByteChars = [] {
    std::array<std::string, 256> chars;
    for (int b = 0; b < 256; ++b) append_utf8(byte_to_unicode(static_cast<uint8_t>(b)), &chars[b]);
    return chars;
  }();
  std::string word;
  std::vector<BpeSymbol> symbols;
  for (const Span& piece : pieces) {
    word.clear();
    for (size_t i = piece.begin; i < piece.end; ++i) word.append(kByteChars[static_cast<uint8_t>(clean[i])]);
    bpe_encode_word(vocab, ranks, pre.ignore_merges, word, &symbols, out);
  }
}

}  // namespace lumen::tok
