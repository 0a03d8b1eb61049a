// JSON Schema `pattern` (an ECMA-262 regular expression) -> a GBNF expression over the
// JSON-encoded characters between a string's quotes, plus the pattern's length bounds and a
// matcher for checking listed values (enum / const) against it.
//
// Supported (parsed by our own recursive descent; std::regex is never used):
//   alternation `|`; groups `( )`, `(?: )`, `(?<name> )`; quantifiers `* + ? {n} {n,} {n,m}`
//   and their lazy forms (`*?` ...: the same language); `.` (any character except the line
//   terminators \n \r U+2028 U+2029); classes `[...]` / `[^...]` with ranges, escapes inside,
//   `-` first or last as a literal, `\b` inside a class = backspace; `\d \D \w \W \s \S`
//   (ECMA-262's sets, less what other engines disagree on, so that generated strings also
//   validate under python-jsonschema's Unicode-aware re: \s = \t \n \v \f \r, space,
//   U+00A0, U+1680, U+2000-U+200A, U+2028, U+2029, U+202F, U+205F, U+3000 (ECMA-262 adds
//   U+FEFF); \S no engine's space; \D \W ASCII plus common symbol, punctuation and script
//   blocks that no engine calls digits / word characters: see json_pattern.cc);
//   `\t \n \r \v \f \0`, `\xHH`, `\uHHHH` (a surrogate pair of two \u escapes is one
//   character), `\cX`; an escaped character that is not an ASCII letter or digit (`\. \\ \/
//   \- \[` ...) is itself; any other UTF-8 character is itself.
// Not supported, each an error naming it (never silently dropped): lookahead / lookbehind,
//   backreferences `\1` `\k<..>`, word boundaries `\b \B` outside classes, `\p{..}`,
//   `\u{...}`, other letter escapes, inline flags `(?i)`, anchors anywhere but the start /
//   end of a top-level alternative, unbalanced ( ) or [ ], bad ranges `[z-a]`, a range with
//   a class escape `[\d-z]`, the empty classes `[]` / `[^]` (engines disagree on them),
//   `{,n}` (ECMA-262 reads a literal, other engines {0,n}), a quantifier on nothing or after
//   another quantifier, `{n,m}` with n > m or counts above PatternLimits::max_count.
//
// Lengths: min_length() / max_length() in code points; with_lengths() cuts a pattern to a
// length range where that is exact (json_schema.cc: minLength / maxLength beside pattern).
//
// Semantics: JSON Schema's pattern is a search, not a full match (python-jsonschema calls
// re.search): `^abc$` is the whole string, `^abc` a prefix followed by any characters,
// `abc$` a suffix, `abc` anywhere. Anchors are handled per top-level alternative (`^a|b$`).
//
// Encoding of the generated text: each matched character appears as JSON needs it: `"` as
// \" and `\` as \\, control characters U+0000-U+001F only as escapes (\b \t \n \f \r, the
// others \u00xx with lower-case hex), everything else raw (never \uXXXX, never \/). The
// unanchored sides take any JSON string characters (escapes included).
//
// Cost: the pattern's length and group nesting are bounded (PatternLimits); counts stay
// GBNF repeat counts (`(a{100}){100}` costs what `(a*)*` costs), and repetitions of bodies
// that can match "" are rewritten to non-empty bodies, so the compiled grammar stays small.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "grammar/gbnf.h"

namespace lumen::grammar {

struct PatternLimits {
  size_t max_pattern_bytes = 4096;
  int32_t max_depth = 32;          // nesting of groups
  int64_t max_count = 100000;      // n and m in {n,m}
  size_t max_gbnf_bytes = 1 << 20; // the generated expression
  int64_t max_match_steps = 20'000'000;  // matches(): work bound per call
};

// A parsed pattern. Errors carry no prefix: the caller adds where the pattern sits.
class JsonPattern {
 public:
  static constexpr int64_t kUnbounded = -1;

  static Result<JsonPattern> parse(std::string_view pattern, const PatternLimits& limits = {});

  // GBNF expression for the JSON-encoded characters of the strings the pattern finds a match
  // in (no quotes). `any_char` is a GBNF expression for any one JSON string character (used
  // for the unanchored sides).
  Result<std::string> to_gbnf(std::string_view any_char) const;

  // Lengths in code points of the strings to_gbnf generates (max kUnbounded: no bound; a
  // bound above 2^40 counts as none).
  int64_t min_length() const { return min_len_; }
  int64_t max_length() const { return max_len_; }

  // The pattern less its strings outside [min_len, max_len] code points (max_len kUnbounded:
  // no bound), where that is exact: each top-level alternative either lies within the range
  // already, or is anchored at both ends with one repetition of a fixed-width part among
  // fixed-width parts (^[a-z]+$, ^[A-Z]\d{2,}-x$, ^(ab)*$), whose count range is then cut;
  // alternatives left with no string are dropped. Otherwise an error saying why.
  Result<JsonPattern> with_lengths(int64_t min_len, int64_t max_len) const;

  // Whether the pattern matches somewhere in `text` (UTF-8; ECMA-262 search semantics).
  // An error for invalid UTF-8 or when the check would cost more than max_match_steps.
  Result<bool> matches(std::string_view text) const;

  // The tree (public for the implementation file's helpers; not an API).
  enum class Kind : uint8_t { kEmpty, kSet, kConcat, kAlt, kRepeat };
  struct Node {
    Kind kind = Kind::kEmpty;
    std::vector<CodeRange> set;   // kSet: sorted, disjoint, no surrogates, never empty
    std::vector<int32_t> kids;    // kConcat / kAlt: parts; kRepeat: the body
    int64_t min = 0, max = 0;     // kRepeat counts (max kUnbounded)
    bool nullable = false;        // matches ""
    int64_t min_len = 0, max_len = 0;  // code points (max_len kUnbounded)
  };
  struct Branch {                 // one top-level alternative
    int32_t node = -1;
    bool anchored_start = false, anchored_end = false;
  };

 private:
  friend class PatternParser;
  std::vector<Node> nodes_;
  std::vector<Branch> branches_;
  int64_t min_len_ = 0, max_len_ = 0;
  PatternLimits limits_;
};

}  // namespace lumen::grammar
