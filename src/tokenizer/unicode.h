// Unicode helpers for the tokenizer layer: UTF-8 coding, the GPT-2 byte <-> code point map,
// lowercase, NFD base letters (for WordPiece) and an NFC approximation (for HF normalizers).
// General categories are not tabled here: callers match \p{..} classes with PCRE2 (regex.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace lumen::tok {

namespace unicode_data {
struct LowerRun {  // lower(cp) = cp + delta for cp in [first, last], (cp - first) % stride == 0
  uint32_t first;
  uint32_t last;
  uint32_t stride;
  int32_t delta;
};
struct Decomposition {  // canonical decomposition cp -> first [+ second]
  uint32_t cp;
  uint32_t first;
  uint32_t second;  // 0 for singleton decompositions
  bool composes;    // NFC recomposes (first, second) into cp
};
extern const LowerRun kLowerRuns[];
extern const size_t kNumLowerRuns;
extern const Decomposition kDecompositions[];
extern const size_t kNumDecompositions;
}  // namespace unicode_data

inline constexpr uint32_t kReplacementChar = 0xFFFD;

// Length of the UTF-8 sequence a lead byte announces, as llama.cpp counts it (by the high
// nibble: continuation and invalid bytes count 1, 0xF8..0xFF count 4).
inline size_t utf8_seq_len(uint8_t lead) {
  static constexpr uint8_t kLen[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLen[lead >> 4];
}

// Decodes the code point at text[*pos] and advances *pos. Invalid or truncated sequences
// (overlong, surrogates, > U+10FFFF) decode as U+FFFD and advance by one byte.
uint32_t decode_utf8(std::string_view text, size_t* pos);
void append_utf8(uint32_t cp, std::string* out);
// Number of bytes of the valid (complete) UTF-8 sequence starting at text[pos], or 0 if the
// bytes there are invalid, or -1 if they are a valid but incomplete prefix (truncated at the end).
int utf8_valid_seq_len(std::string_view text, size_t pos);
// True when `text` is entirely valid UTF-8.
bool is_valid_utf8(std::string_view text);
// Copy of `text` with every invalid byte replaced by U+FFFD (as llama.cpp's code point split).
std::string sanitize_utf8(std::string_view text);

// Unicode White_Space property (Rust's char::is_whitespace, PCRE2's \s with UCP).
inline bool is_whitespace(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000;
}

// Simple lowercase mapping of one code point.
uint32_t to_lower(uint32_t cp);
std::string to_lower_utf8(std::string_view text);  // text must be valid UTF-8
// First code point of the canonical decomposition (llama.cpp's "NFD" for WordPiece:
// precomposed letters map to their base letter, Hangul syllables to their leading jamo).
uint32_t nfd_base(uint32_t cp);
// Canonical decomposition (recursive, Hangul included). Combining marks are not reordered
// by combining class.
std::string nfd_utf8(std::string_view text);
// NFC approximation: canonical decomposition, then pairwise recomposition of primary
// composites (and Hangul). Exact for text whose combining marks are in canonical order,
// which covers NFC input (identity) and the usual decomposed input.
std::string nfc_utf8(std::string_view text);

// GPT-2 byte-level alphabet: each byte maps to one printable code point.
uint32_t byte_to_unicode(uint8_t byte);
// Inverse; -1 when cp is not in the alphabet.
int unicode_to_byte(uint32_t cp);

}  // namespace lumen::tok
