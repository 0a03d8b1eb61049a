// The mask of JSON Schema grammars against the brute-force reference (every token tried on
// the automaton itself) at every step of random walks. The vocabulary mixes random strings
// of JSON characters with the tokens that cross the end of a string, a number or a list
// item (`",`, `"]`, `1,`, `]]`, ...): those are matched past the boundary from the real
// stack, with results cached by (position, stack below the boundary), so walks that fill
// lists to their maxItems and strings to their maxLength check that the cache key holds
// everything the result depends on.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "grammar/grammar_test_util.h"
#include "grammar/json_schema.h"

namespace lumen::grammar {
namespace {

using testing::random_walks_match_brute_force;

std::shared_ptr<const TokenTable> json_vocab(uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::string> extra;
  const std::string alphabet = "{}[]\",: 0123456789.-eEabcxyz\\tn\xC3\xA9";
  std::vector<std::string> crossing = {"\",", "\"]", "\"}", "\",\"", "\"],", "\"]]", "\"}]", "\"},{\"", "1,", "2]",
                                       "3}", "0,", "],", "]]", "],[", "]}", "}]", "},", "},{", "\":", "\":\"",
                                       "\": \"", ", \"", "\", \"", "\"]}"};
  for (const std::string& c : crossing) {
    extra.push_back(c);
    for (int k = 0; k < 3; ++k) {  // a few characters of a string or number, then the crossing
      std::string t;
      const int len = 1 + static_cast<int>(rng() % 4);
      for (int i = 0; i < len; ++i) t += "abxy0123"[rng() % 8];
      extra.push_back(t + c);
    }
  }
  for (int k = 0; k < 1500; ++k) {
    std::string t;
    const int len = 1 + static_cast<int>(rng() % 5);
    for (int i = 0; i < len; ++i) t += alphabet[rng() % alphabet.size()];
    extra.push_back(t);
  }
  return testing::byte_vocab(extra);
}

void schema_walks_match_brute_force(const std::string& schema, int n_walks, int max_steps, uint64_t seed) {
  auto gbnf = json_schema_to_gbnf(schema);
  ASSERT_TRUE(gbnf.ok()) << gbnf.message();
  random_walks_match_brute_force(*gbnf, json_vocab(seed), n_walks, max_steps, seed);
}

TEST(GrammarMaskReference, BoundedStringsInBoundedLists) {
  schema_walks_match_brute_force(
      R"({"type": "array", "items": {"type": "string", "minLength": 1, "maxLength": 4}, "minItems": 2, "maxItems": 4})",
      10, 40, 21);
}

TEST(GrammarMaskReference, ObjectWithStringsNumbersAndEnums) {
  schema_walks_match_brute_force(R"({"type": "object", "properties": {
      "code": {"type": "string", "minLength": 2, "maxLength": 3},
      "n": {"type": "integer", "minimum": -5, "maximum": 300},
      "x": {"type": "number"},
      "kind": {"enum": ["a", "bb", "abc"]},
      "tags": {"type": "array", "items": {"type": "string", "maxLength": 2}, "maxItems": 3}},
      "required": ["code", "n", "x", "kind", "tags"], "additionalProperties": false})",
                                 8, 60, 22);
}

TEST(GrammarMaskReference, NestedArrays) {
  schema_walks_match_brute_force(R"({"type": "array", "maxItems": 3, "items": {"type": "array", "minItems": 1,
      "maxItems": 3, "items": {"type": "integer", "minimum": 0, "maximum": 99}}})",
                                 10, 40, 23);
  schema_walks_match_brute_force(R"({"type": "array", "maxItems": 2, "items": {"type": "array", "maxItems": 2,
      "items": {"type": "string", "maxLength": 2}}})",
                                 10, 40, 24);
}

TEST(GrammarMaskReference, OptionalPropertiesAndAnyOf) {
  schema_walks_match_brute_force(R"({"type": "object", "properties": {
      "a": {"anyOf": [{"type": "string", "maxLength": 3}, {"type": "integer"}, {"type": "null"}]},
      "b": {"type": "array", "items": {"type": "number"}, "minItems": 1, "maxItems": 2},
      "c": {"type": "string", "minLength": 1}}, "required": ["a"]})",
                                 10, 50, 25);
}

// Number bounds as digit-by-digit chains (fractions, exclusive midpoints, one exponent) and
// multiples carrying a residue: tokens like "0.", "1," and "3}" end a number mid-token.
TEST(GrammarMaskReference, NumberBoundsAndMultiples) {
  schema_walks_match_brute_force(R"({"type": "object", "properties": {
      "p": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
      "q": {"type": "number", "minimum": -0.75, "exclusiveMaximum": 2.5e-1},
      "r": {"type": "number", "minimum": 1e-20, "maximum": 3e-20},
      "m": {"type": "integer", "multipleOf": 7, "minimum": -100, "maximum": 300},
      "l": {"type": "array", "items": {"type": "number", "minimum": 0.2, "maximum": 0.8}, "maxItems": 3}},
      "required": ["p", "q", "r", "m", "l"], "additionalProperties": false})",
                                 10, 60, 26);
}

}  // namespace
}  // namespace lumen::grammar
