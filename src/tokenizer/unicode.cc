#include "tokenizer/unicode.h"

#include <algorithm>
#include <array>
#include <utility>
#include <vector>

namespace lumen::tok {
namespace {

bool is_cont(uint8_t b) { return (b & 0xC0) == 0x80; }

// Hangul syllable algorithm constants (Unicode ch. 3.12).
constexpr uint32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr uint32_t kLCount = 19, kVCount = 21, kTCount = 28;
constexpr uint32_t kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

const unicode_data::Decomposition* find_decomposition(uint32_t cp) {
  const auto* begin = unicode_data::kDecompositions;
  const auto* end = begin + unicode_data::kNumDecompositions;
  const auto* it = std::lower_bound(begin, end, cp, [](const unicode_data::Decomposition& d, uint32_t c) {
    return d.cp < c;
  });
  return it != end && it->cp == cp ? it : nullptr;
}

void decompose_into(uint32_t cp, std::vector<uint32_t>* out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const uint32_t s = cp - kSBase;
    out->push_back(kLBase + s / kNCount);
    out->push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out->push_back(kTBase + s % kTCount);
    return;
  }
  const auto* d = find_decomposition(cp);
  if (!d) {
    out->push_back(cp);
    return;
  }
  decompose_into(d->first, out);
  if (d->second != 0) decompose_into(d->second, out);
}

// Primary composite of (a, b), or 0.
uint32_t compose_pair(uint32_t a, uint32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount) {
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  }
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase &&
      b < kTBase + kTCount) {
    return a + (b - kTBase);
  }
  // (first << 32 | second) -> composite, built once from the decomposition table.
  static const std::vector<std::pair<uint64_t, uint32_t>> kPairs = [] {
    std::vector<std::pair<uint64_t, uint32_t>> pairs;
    for (size_t i = 0; i < unicode_data::kNumDecompositions; ++i) {
      const auto& d = unicode_data::kDecompositions[i];
      if (d.composes) pairs.emplace_back((uint64_t{d.first} << 32) | d.second, d.cp);
    }
    std::sort(pairs.begin(), pairs.end());
    return pairs;
  }();
  const uint64_t key = (uint64_t{a} << 32) | b;
  auto it = std::lower_bound(kPairs.begin(), kPairs.end(), std::make_pair(key, uint32_t{0}));
  return it != kPairs.end() && it->first == key ? it->second : 0;
}

std::vector<uint32_t> to_codepoints(std::string_view text) {
  std::vector<uint32_t> cps;
  cps.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) cps.push_back(decode_utf8(text, &pos));
  return cps;
}

}  // namespace

int utf8_valid_seq_len(std::string_view text, size_t pos) {
  const auto b0 = static_cast<uint8_t>(text[pos]);
  if (b0 < 0x80) return 1;
  size_t len = 0;
  uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;  // no surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;  // <= U+10FFFF
  } else {
    return 0;
  }
  for (size_t i = 1; i < len; ++i) {
    if (pos + i >= text.size()) return -1;
    const auto b = static_cast<uint8_t>(text[pos + i]);
    if (i == 1 ? (b < lo || b > hi) : !is_cont(b)) return 0;
  }
  return static_cast<int>(len);
}

uint32_t decode_utf8(std::string_view text, size_t* pos) {
  const int len = utf8_valid_seq_len(text, *pos);
  const auto* p = reinterpret_cast<const uint8_t*>(text.data()) + *pos;
  uint32_t cp;
  switch (len) {
    case 1: cp = p[0]; break;
    case 2: cp = ((p[0] & 0x1Fu) << 6) | (p[1] & 0x3Fu); break;
    case 3: cp = ((p[0] & 0x0Fu) << 12) | ((p[1] & 0x3Fu) << 6) | (p[2] & 0x3Fu); break;
    case 4:
      cp = ((p[0] & 0x07u) << 18) | ((p[1] & 0x3Fu) << 12) | ((p[2] & 0x3Fu) << 6) | (p[3] & 0x3Fu);
      break;
    default:
      *pos += 1;
      return kReplacementChar;
  }
  *pos += static_cast<size_t>(len);
  return cp;
}

void append_utf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

bool is_valid_utf8(std::string_view text) {
  for (size_t pos = 0; pos < text.size();) {
    const int len = utf8_valid_seq_len(text, pos);
    if (len <= 0) return false;
    pos += static_cast<size_t>(len);
  }
  return true;
}

std::string sanitize_utf8(std::string_view text) {
  if (is_valid_utf8(text)) return std::string(text);
  std::string out;
  out.reserve(text.size() + 8);
  for (size_t pos = 0; pos < text.size();) append_utf8(decode_utf8(text, &pos), &out);
  return out;
}

uint32_t to_lower(uint32_t cp) {
  if (cp < 0x80) return (cp >= 'A' && cp <= 'Z') ? cp + 32 : cp;
  const auto* begin = unicode_data::kLowerRuns;
  const auto* end = begin + unicode_data::kNumLowerRuns;
  // Last run with first <= cp.
  const auto* it = std::upper_bound(begin, end, cp, [](uint32_t c, const unicode_data::LowerRun& r) {
    return c < r.first;
  });
  if (it == begin) return cp;
  --it;
  if (cp > it->last || (cp - it->first) % it->stride != 0) return cp;
  return static_cast<uint32_t>(static_cast<int64_t>(cp) + it->delta);
}

std::string to_lower_utf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) append_utf8(to_lower(decode_utf8(text, &pos)), &out);
  return out;
}

uint32_t nfd_base(uint32_t cp) {
  if (cp < 0xC0) return cp;
  if (cp >= kSBase && cp < kSBase + kSCount) return kLBase + (cp - kSBase) / kNCount;
  for (const auto* d = find_decomposition(cp); d; d = find_decomposition(cp)) cp = d->first;
  return cp;
}

std::string nfd_utf8(std::string_view text) {
  std::vector<uint32_t> cps;
  cps.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) decompose_into(decode_utf8(text, &pos), &cps);
  std::string out;
  out.reserve(text.size());
  for (uint32_t cp : cps) append_utf8(cp, &out);
  return out;
}

std::string nfc_utf8(std::string_view text) {
  // Fast path: pure ASCII is always NFC.
  if (std::all_of(text.begin(), text.end(), [](char c) { return static_cast<uint8_t>(c) < 0x80; })) {
    return std::string(text);
  }
  std::vector<uint32_t> decomposed;
  decomposed.reserve(text.size());
  for (uint32_t cp : to_codepoints(text)) decompose_into(cp, &decomposed);
  std::vector<uint32_t> composed;
  composed.reserve(decomposed.size());
  for (uint32_t cp : decomposed) {
    if (!composed.empty()) {
      if (uint32_t c = compose_pair(composed.back(), cp); c != 0) {
        composed.back() = c;
        continue;
      }
    }
    composed.push_back(cp);
  }
  std::string out;
  out.reserve(text.size());
  for (uint32_t cp : composed) append_utf8(cp, &out);
  return out;
}

namespace {
bool gpt2_printable(uint32_t b) {
  return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}
}  // namespace

uint32_t byte_to_unicode(uint8_t byte) {
  static const std::array<uint32_t, 256> kMap = [] {
    std::array<uint32_t, 256> map{};
    uint32_t n = 0;
    for (uint32_t b = 0; b < 256; ++b) map[b] = gpt2_printable(b) ? b : 256 + n++;
    return map;
  }();
  return kMap[byte];
}

int unicode_to_byte(uint32_t cp) {
  static const std::array<int16_t, 324> kInverse = [] {
    std::array<int16_t, 324> inv{};
    inv.fill(-1);
    for (uint32_t b = 0; b < 256; ++b) inv[byte_to_unicode(static_cast<uint8_t>(b))] = static_cast<int16_t>(b);
    return inv;
  }();
  return cp < kInverse.size() ? kInverse[cp] : -1;
}

}  // namespace lumen::tok
