#include "grammar/gbnf.h"

#include <gtest/gtest.h>

#include "grammar/grammar_test_util.h"
#include "grammar/pda.h"

namespace lumen::grammar {
namespace {

using testing::read_testdata;

TEST(GbnfParse, LlamaCppExampleGrammarsParseAndCompile) {
  for (const char* name : {"json.gbnf", "json_arr.gbnf", "arithmetic.gbnf", "list.gbnf", "chess.gbnf", "c.gbnf",
                           "english.gbnf", "japanese.gbnf"}) {
    const std::string text = read_testdata(name);
    ASSERT_FALSE(text.empty()) << name;
    auto g = parse_gbnf(text);
    ASSERT_TRUE(g.ok()) << name << ": " << g.message();
    EXPECT_EQ(g->rules[g->root].name, "root");
    auto pda = Pda::compile(*g);
    EXPECT_TRUE(pda.ok()) << name << ": " << pda.message();
  }
}

TEST(GbnfParse, ErrorsNameTheLineAndColumn) {
  struct Case {
    const char* text;
    const char* want;
  };
  const Case cases[] = {
      {"root ::= foo\n", "rule 'foo' is used but never defined"},
      {"a ::= \"x\"\n", "no rule named 'root'"},
      {"root ::= \"abc\n", "line 2, column 1: unterminated literal"},
      {"root := \"a\"\n", "line 1, column 6: expecting ::="},
      {"root ::= [\\q]\n", "unknown escape \\q"},
      {"root ::= \"\\uD800\"\n", "not a Unicode scalar value"},
      {"root ::= [z-a]\n", "end before its start"},
      {"root ::= * \"a\"\n", "expecting an item before '*'"},
      {"root ::= \"a\"{3,2}\n", "n < m"},
      {"root ::= \"a\"{2\n", "expecting } to close"},
      {"root ::= (\"a\" \n", "expecting )"},
      {"root ::= \"a\" )\n", "expecting the end of the line"},
      {"root ::= \"\xff\"\n", "invalid UTF-8"},
      {"root ::= [^\\x00-\\U0010FFFF]\n", "matches no character"},
      {"root ::= \"a\"{99999999999}\n", "over the limit"},
  };
  for (const Case& c : cases) {
    auto g = parse_gbnf(c.text);
    ASSERT_FALSE(g.ok()) << c.text;
    EXPECT_NE(g.message().find(c.want), std::string::npos) << c.text << " -> " << g.message();
    EXPECT_EQ(g.message().rfind("grammar: ", 0), 0u) << g.message();
  }
}

TEST(GbnfParse, LeftRecursionIsReportedWhenCompiled) {
  for (const char* text : {"root ::= root \"a\" | \"b\"\n", "root ::= x\nx ::= y? root \"a\" | \"b\"\ny ::= \"c\"\n",
                           "root ::= (root \"a\")* \"b\"\n"}) {
    auto g = parse_gbnf(text);
    ASSERT_TRUE(g.ok()) << g.message();
    auto pda = Pda::compile(*g);
    ASSERT_FALSE(pda.ok()) << text;
    EXPECT_NE(pda.message().find("left-recursive"), std::string::npos) << pda.message();
  }
  // Right recursion is fine.
  auto g = parse_gbnf("root ::= \"a\" root | \"b\"\n");
  ASSERT_TRUE(g.ok());
  EXPECT_TRUE(Pda::compile(*g).ok());
}

TEST(GbnfParse, CommentsNewlinesAndRedefinition) {
  auto g = parse_gbnf(
      "# leading comment\n"
      "root ::= ( \"a\" # inside a group, newlines are fine\n"
      "   | \"b\" )  x\n"
      "x ::= \"1\"\n"
      "x ::= \"2\"   # the last definition wins\n");
  ASSERT_TRUE(g.ok()) << g.message();
  auto vocab = testing::byte_vocab();
  auto cg = CompiledGrammar::compile(*g, vocab);
  ASSERT_TRUE(cg.ok()) << cg.message();
  EXPECT_TRUE(testing::matches(*cg, "a2"));
  EXPECT_TRUE(testing::matches(*cg, "b2"));
  EXPECT_FALSE(testing::matches(*cg, "a1"));
}

TEST(GbnfParse, ManyRulesOrItemsAreRefused) {
  GbnfLimits limits;
  limits.max_items = 10;
  auto g = parse_gbnf("root ::= \"abcdefghijkl\"\n", limits);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.message().find("more than 10 items"), std::string::npos) << g.message();
  std::string deep = "root ::= ";
  for (int i = 0; i < 300; ++i) deep += "(";
  deep += "\"a\"";
  for (int i = 0; i < 300; ++i) deep += ")";
  deep += "\n";
  g = parse_gbnf(deep);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.message().find("nest deeper"), std::string::npos) << g.message();
}

TEST(Utf8Sequences, CoverExactlyTheRange) {
  // Every scalar value in [lo, hi] is matched by exactly one sequence, nothing else is.
  auto check = [](uint32_t lo, uint32_t hi) {
    const auto seqs = utf8_sequences(lo, hi);
    for (uint32_t c = (lo > 64 ? lo - 64 : 0); c <= std::min<uint32_t>(hi + 64, 0x10FFFF); ++c) {
      if (c >= 0xD800 && c <= 0xDFFF) continue;
      uint8_t b[4];
      int n;
      if (c < 0x80) { b[0] = static_cast<uint8_t>(c); n = 1; }
      else if (c < 0x800) { b[0] = static_cast<uint8_t>(0xC0 | (c >> 6)); b[1] = static_cast<uint8_t>(0x80 | (c & 0x3F)); n = 2; }
      else if (c < 0x10000) { b[0] = static_cast<uint8_t>(0xE0 | (c >> 12)); b[1] = static_cast<uint8_t>(0x80 | ((c >> 6) & 0x3F)); b[2] = static_cast<uint8_t>(0x80 | (c & 0x3F)); n = 3; }
      else { b[0] = static_cast<uint8_t>(0xF0 | (c >> 18)); b[1] = static_cast<uint8_t>(0x80 | ((c >> 12) & 0x3F)); b[2] = static_cast<uint8_t>(0x80 | ((c >> 6) & 0x3F)); b[3] = static_cast<uint8_t>(0x80 | (c & 0x3F)); n = 4; }
      int hits = 0;
      for (const auto& s : seqs) {
        if (static_cast<int>(s.size()) != n) continue;
        bool in = true;
        for (int i = 0; i < n; ++i) in = in && b[i] >= s[i].first && b[i] <= s[i].second;
        hits += in;
      }
      ASSERT_EQ(hits, (c >= lo && c <= hi) ? 1 : 0) << std::hex << "U+" << c << " in [" << lo << ", " << hi << "]";
    }
  };
  check(0, 0x7F);
  check(0x41, 0x7FF);
  check(0x801, 0x1234);
  check(0xD000, 0xE100);
  check(0xFFF0, 0x10010);
  check(0x10FFF0, 0x10FFFF);
}

}  // namespace
}  // namespace lumen::grammar
