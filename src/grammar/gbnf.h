// GBNF: llama.cpp's grammar notation, parsed into a small code-point-level IR.
//
//   root   ::= object                 # rules: name ::= alternatives, one per line
//   object ::= "{" ws ( pair ( "," ws pair )* )? "}"
//   pair   ::= [a-z]+ ":" ws [0-9]{1,3}
//   ws     ::= | " " | "\n" [ \t]{0,20}
//
// Syntax (as llama.cpp's parser, commit c392e5094): names are [a-zA-Z0-9-]+; a rule ends at
// a newline unless inside parentheses; `#` starts a comment; terminals are "literals" and
// [character classes] ([^...] negated, a-z ranges) with the escapes \xHH \uHHHH \UHHHHHHHH
// \t \r \n \\ \" \[ \]; `.` is any character; ( ) groups; `*` `+` `?` `{m}` `{m,}` `{m,n}`
// repeat the item before them (a whole literal, class, reference or group). A rule defined
// twice keeps its last definition. The grammar must define `root`.
//
// Differences from llama.cpp, all stricter: characters are Unicode scalar values (a class or
// escape naming a surrogate or a value above U+10FFFF is an error, and `.` / negated classes
// never match them); the grammar text must be valid UTF-8; left recursion is reported when
// the grammar is compiled (pda.h), as llama.cpp does when it builds the grammar.
//
// Repetition stays an item with counts (no rules are generated per count), so `x{0,100000}`
// costs what `x*` costs. Limits keep hostile input cheap: see GbnfLimits.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace lumen::grammar {

struct CodeRange {
  uint32_t lo = 0, hi = 0;  // inclusive code points
};

// One item of an alternative.
struct Item {
  enum class Kind : uint8_t {
    kChars,   // one character from `chars`
    kRule,    // the rule `rule`
    kRepeat,  // the rule `rule`, min..max times (max -1: unbounded)
  };
  Kind kind = Kind::kChars;
  std::vector<CodeRange> chars;  // kChars: sorted, disjoint, non-adjacent; never empty
  int32_t rule = -1;
  int32_t min = 0, max = 0;
};

using Alternative = std::vector<Item>;

struct Rule {
  std::string name;            // generated rules: "<parent>_<n>" (a name GBNF cannot define)
  std::vector<Alternative> alts;
};

struct Grammar {
  std::vector<Rule> rules;
  int32_t root = -1;
};

struct GbnfLimits {
  size_t max_text_bytes = 1 << 20;
  int32_t max_rules = 1 << 16;       // including rules made for groups and repetitions
  int32_t max_items = 1 << 20;       // items over all alternatives
  int32_t max_repeat = 1 << 20;      // m and n in {m,n}
  int32_t max_nesting = 256;         // parentheses
};

// Parses GBNF text. Errors name the line and column: "grammar: line 3, column 12: expecting
// ::= after the rule name".
Result<Grammar> parse_gbnf(std::string_view text, const GbnfLimits& limits = {});

// A GBNF literal ("...", with \" \\ \n \r \t and \xHH escapes) for raw UTF-8 text.
std::string gbnf_literal(std::string_view text);

// Code point ranges of every Unicode scalar value (0..0x10FFFF without the surrogates).
std::vector<CodeRange> all_scalar_values();

// GBNF-like text for a grammar (debugging and error messages; generated names contain `_`).
std::string to_gbnf(const Grammar& grammar);

}  // namespace lumen::grammar
