// Fuzz-style tests for the untrusted inputs of the grammar layer (GBNF text, JSON Schema):
// mutated and random inputs must give a result or a clear error, never a crash or a stall.
// They run under AddressSanitizer + UBSan in `make test` (the 'Fuzz' filter).
#include <gtest/gtest.h>

#include <chrono>
#include <random>

#include <nlohmann/json.hpp>

#include "grammar/grammar_test_util.h"
#include "grammar/json_pattern.h"
#include "grammar/json_schema.h"

namespace lumen::grammar {
namespace {

std::string mutate(std::string s, std::mt19937_64& rng) {
  static const std::string kAlphabet = "\"[]()|*+?{},.-^\\:=# \n\tabcxyz019root\xC3\xA9\x80\xFF";
  const int n_edits = 1 + static_cast<int>(rng() % 6);
  for (int e = 0; e < n_edits; ++e) {
    const size_t pos = s.empty() ? 0 : rng() % (s.size() + 1);
    switch (rng() % 4) {
      case 0:  // insert
        s.insert(pos, 1, kAlphabet[rng() % kAlphabet.size()]);
        break;
      case 1:  // delete
        if (!s.empty() && pos < s.size()) s.erase(pos, 1 + rng() % 4);
        break;
      case 2:  // replace
        if (!s.empty() && pos < s.size()) s[pos] = kAlphabet[rng() % kAlphabet.size()];
        break;
      default:  // duplicate a slice
        if (!s.empty() && pos < s.size()) s.insert(pos, s.substr(pos, 1 + rng() % 16));
    }
  }
  return s;
}

// Compiles and drives a few random steps; the result does not matter, only that it ends.
void exercise_gbnf(const std::string& text, const std::shared_ptr<const TokenTable>& vocab, std::mt19937_64& rng) {
  CompileLimits limits;
  limits.max_trie_steps = 2'000'000;
  auto g = CompiledGrammar::from_gbnf(text, vocab, limits);
  if (!g.ok()) {
    EXPECT_EQ(g.message().rfind("grammar: ", 0), 0u) << g.message();
    return;
  }
  GrammarMatcher m(*g);
  std::vector<uint64_t> mask((static_cast<size_t>(vocab->n_vocab()) + 63) / 64);
  for (int step = 0; step < 20 && !m.terminated(); ++step) {
    if (!m.fill_mask(mask)) return;
    const std::vector<int32_t> allowed = testing::allowed_ids(mask, vocab->n_vocab());
    if (allowed.empty()) return;
    ASSERT_TRUE(m.accept_token(allowed[rng() % allowed.size()]) || m.failed());
  }
}

TEST(GrammarFuzz, MutatedGbnfNeverCrashes) {
  const std::vector<std::string> seeds = {
      testing::read_testdata("json.gbnf"), testing::read_testdata("arithmetic.gbnf"),
      testing::read_testdata("chess.gbnf"), testing::read_testdata("list.gbnf"),
      "root ::= (\"a\" | [b-z]{2,5})* x\nx ::= \"!\"?\n", "root ::= [^\\x00-\\x7F]+ \"\\U0001F600\"\n"};
  auto vocab = testing::byte_vocab({"ab", "{\"", "\":", "\n ", "\xC3\xA9", "\xE2\x82", "root"});
  std::mt19937_64 rng(42);
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 300; ++i) {
    const std::string text = mutate(seeds[rng() % seeds.size()], rng);
    exercise_gbnf(text, vocab, rng);
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 120.0);
}

TEST(GrammarFuzz, HostileGrammarsAreRefusedOrBounded) {
  auto vocab = testing::byte_vocab();
  std::mt19937_64 rng(1);
  std::string deep_rules = "root ::= r0\n";
  for (int i = 0; i < 3000; ++i) deep_rules += "r" + std::to_string(i) + " ::= r" + std::to_string(i + 1) + " | \"a\"\n";
  deep_rules += "r3000 ::= \"b\"\n";
  const std::vector<std::string> cases = {
      deep_rules,
      "root ::= x{0,1000000}\nx ::= \"\" | \"a\"\n",           // nullable body, huge bound: refused
      "root ::= (\"a\" | \"a\" | \"a\")* \"b\"\n",               // ambiguity that stays small
      "root ::= a\na ::= \"x\" a \"y\" | \"x\" a \"z\" | \"\"\n",  // ambiguity that grows with the input
      "root ::= (((((((((((\"a\")*)*)*)*)*)*)*)*)*)*)\n",
      "root ::= \"a\"{1000000}\n",
  };
  for (const std::string& text : cases) exercise_gbnf(text, vocab, rng);
  // The ambiguity that doubles with every "x" ends in a clear error, not a stall.
  auto g = CompiledGrammar::from_gbnf("root ::= a\na ::= \"x\" a \"y\" | \"x\" a \"z\" | \"\"\n", vocab);
  ASSERT_TRUE(g.ok()) << g.message();
  GrammarMatcher m(*g);
  bool ok = true;
  for (int i = 0; i < 40 && ok; ++i) ok = m.accept_bytes("x");
  EXPECT_TRUE(m.failed() || ok);
}

TEST(GrammarFuzz, MutatedJsonSchemasNeverCrash) {
  const std::vector<std::string> seeds = {
      R"({"type": "object", "properties": {"a": {"type": "integer", "minimum": -5, "maximum": 500},
          "b": {"type": "array", "items": {"$ref": "#/$defs/x"}, "maxItems": 3}}, "required": ["a"],
          "$defs": {"x": {"anyOf": [{"type": "string", "maxLength": 4}, {"enum": [1, "two", null]}]}}})",
      R"({"type": "string", "format": "date-time"})",
      R"({"$ref": "#", "type": "object"})",
      R"({"allOf": [{"properties": {"k": {"const": [1, {"z": true}]}}}], "additionalProperties": false})",
      R"({"type": "object", "properties": {"id": {"pattern": "^[A-Z]{2}-\\d{4}$"}, "v": {"enum": ["a1", "b"], "pattern": "\\d"}}})",
  };
  auto vocab = testing::byte_vocab();
  std::mt19937_64 rng(9);
  for (int i = 0; i < 400; ++i) {
    const std::string schema = mutate(seeds[rng() % seeds.size()], rng);
    auto gbnf = json_schema_to_gbnf(schema);
    if (!gbnf.ok()) {
      EXPECT_EQ(gbnf.message().rfind("json_schema: ", 0), 0u) << gbnf.message();
      continue;
    }
    exercise_gbnf(*gbnf, vocab, rng);  // a schema that converts must give a grammar that compiles
  }
}

// JSON Schema patterns (json_pattern.h): mutated regular expressions convert or fail with a
// clear error; those that convert compile to a grammar that a few random steps can drive,
// and the matcher (enum / const values) stays within its work bound on random strings.
TEST(GrammarFuzz, MutatedPatternsNeverCrash) {
  const std::vector<std::string> seeds = {
      "^\\+?[1-9]\\d{1,14}$", "^(0|[1-9]\\d*)\\.(0|[1-9]\\d*)(-[0-9A-Za-z.-]+)?$", "^[a-z0-9]+(?:-[a-z0-9]+)*$",
      "^#([0-9a-fA-F]{3}|[0-9a-fA-F]{6})$", "^(?<y>\\d{4})-\\d\\d$|x", "[^\\s\"\\\\]{2,}?\\S\\w\\W\\D",
      "^[\\u00c0-\\u00ff\\x20\\cJ\\t\\0.]{0,8}$", "((a|b)*c){2,5}(.*)*x"};
  static const std::string kAlphabet = "()[]{}|*+?^$.\\-,:=!<>0123dDwWsSbBkpuxc\"az\xC3\xA9";
  auto vocab = testing::byte_vocab({"ab", "\\\"", "12"});
  std::mt19937_64 rng(5);
  const auto t0 = std::chrono::steady_clock::now();
  int n_ok = 0;
  for (int i = 0; i < 400; ++i) {
    std::string p = seeds[rng() % seeds.size()];
    for (int e = 0, n = 1 + static_cast<int>(rng() % 4); e < n; ++e) {
      const size_t pos = rng() % (p.size() + 1);
      if (rng() % 2 == 0) p.insert(pos, 1, kAlphabet[rng() % kAlphabet.size()]);
      else if (pos < p.size()) p.erase(pos, 1 + rng() % 3);
    }
    // A cut UTF-8 sequence becomes U+FFFD in the schema text, and so in the pattern.
    const std::string schema =
        nlohmann::json({{"type", "string"}, {"pattern", p}}).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    p = nlohmann::json::parse(schema)["pattern"].get<std::string>();
    auto gbnf = json_schema_to_gbnf(schema);
    if (!gbnf.ok()) {
      EXPECT_EQ(gbnf.message().rfind("json_schema: /pattern: pattern '", 0), 0u) << gbnf.message();
      continue;
    }
    ++n_ok;
    exercise_gbnf(*gbnf, vocab, rng);
    auto parsed = JsonPattern::parse(p);
    ASSERT_TRUE(parsed.ok()) << p;
    std::string text;
    for (int k = 0, n = static_cast<int>(rng() % 40); k < n; ++k) text += kAlphabet[rng() % (kAlphabet.size() - 2)];
    (void)parsed->matches(text);  // a verdict or a clear error; never a stall
  }
  EXPECT_GT(n_ok, 50);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 120.0);
}

}  // namespace
}  // namespace lumen::grammar
