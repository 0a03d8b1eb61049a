#include "grammar/matcher.h"

#include <gtest/gtest.h>

#include <random>

#include "grammar/grammar_test_util.h"

namespace lumen::grammar {
namespace {

using testing::byte_vocab;
using testing::compile_or_die;
using testing::matches;
using testing::random_vocab;
using testing::random_walks_match_brute_force;
using testing::read_testdata;

TEST(GrammarMatch, LlamaCppExampleGrammarsAcceptAndReject) {
  auto vocab = byte_vocab();
  struct Case {
    const char* file;
    std::vector<std::string> good, bad;
  };
  const Case cases[] = {
      {"json.gbnf",
       {R"({"a": [1, 2.5, "x\n\u00e9"], "b": {"c": null, "d": true}})", "{}", "{\"k\":-0.5e+12}"},
       {R"({"a" 1})", "{", "[1]", R"({"a": 01x})", "{\"a\":\"\x01\"}"}},
      {"arithmetic.gbnf", {"x=1\n", "a+b*(c-2)=42\nq=q\n"}, {"x=1", "=1\n", "X=1\n"}},
      {"list.gbnf", {"- a\n", "- one\n- two\n"}, {"- \n", "* a\n", "- a"}},
      {"chess.gbnf", {"1. e4 e5\n2. Nf3 Nc6\n", "1. O-O-O Qxd8#\n1. d4 d5\n"}, {"1. e4 e5\n", "2. e4 e5\n"}},
      {"c.gbnf", {"int main(){return 0;}", "int f(int x){x = x+1;return x;}float g(){}"}, {"main(){}", "int main(){return 0}"}},
      {"japanese.gbnf", {"こんにちは", "ひらがな カタカナ"}, {"hello", "こんにちは "}},
      {"english.gbnf", {"Hello, world!", "a b\nc"}, {"", "é"}},
  };
  for (const Case& c : cases) {
    auto g = compile_or_die(read_testdata(c.file), vocab);
    ASSERT_NE(g, nullptr);
    for (const std::string& s : c.good) EXPECT_TRUE(matches(g, s)) << c.file << ": " << s;
    for (const std::string& s : c.bad) EXPECT_FALSE(matches(g, s)) << c.file << ": " << s;
  }
}

TEST(GrammarMatch, RepetitionCounts) {
  auto vocab = byte_vocab();
  struct Case {
    const char* gbnf;
    std::vector<std::string> good, bad;
  };
  const Case cases[] = {
      {"root ::= \"a\"{2,3}\n", {"aa", "aaa"}, {"", "a", "aaaa"}},
      {"root ::= \"ab\"{2}\n", {"abab"}, {"ab", "ababab", "aba"}},
      {"root ::= [a-c]{0,2} \"x\"\n", {"x", "ax", "cbx"}, {"abcx", "dx"}},
      {"root ::= (\"ab\"{1,2} \",\"){2}\n", {"ab,ab,", "abab,ab,", "ab,abab,"}, {"ab,", "ababab,ab,", "ab,ab,ab,"}},
      {"root ::= [0-9]+ (\".\" [0-9]*)?\n", {"1", "12.", "3.14"}, {"", ".5", "1..2"}},
      {"root ::= \"a\"{3,}\n", {"aaa", "aaaaaaaa"}, {"aa"}},
      {"root ::= (\"\" | \"a\"){0,3} \"b\"\n", {"b", "ab", "aaab"}, {"aaaab"}},
      {"root ::= x* \"!\"\nx ::= \"\" | \"y\"\n", {"!", "yyy!"}, {"y"}},
      {"root ::= \"a\"{0}\n", {""}, {"a"}},
  };
  for (const Case& c : cases) {
    auto g = compile_or_die(c.gbnf, vocab);
    ASSERT_NE(g, nullptr) << c.gbnf;
    for (const std::string& s : c.good) EXPECT_TRUE(matches(g, s)) << c.gbnf << ": " << s;
    for (const std::string& s : c.bad) EXPECT_FALSE(matches(g, s)) << c.gbnf << ": " << s;
  }
}

TEST(GrammarMatch, Utf8ClassesMatchWholeCharactersOnly) {
  auto vocab = byte_vocab();
  auto g = compile_or_die("root ::= [^a]+\n", vocab);
  EXPECT_TRUE(matches(g, "b\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80"));  // b é € 😀
  EXPECT_FALSE(matches(g, "ba"));
  EXPECT_FALSE(matches(g, "\xC3"));          // half a character: not complete
  EXPECT_FALSE(matches(g, "\xFF"));          // never UTF-8
  EXPECT_FALSE(matches(g, "\xED\xA0\x80"));  // a surrogate
  EXPECT_FALSE(matches(g, "\xC0\x80"));      // overlong
  GrammarMatcher m(g);
  EXPECT_TRUE(m.accept_bytes("\xC3"));       // a prefix of a character is a valid state
  EXPECT_FALSE(m.can_end());
  EXPECT_TRUE(m.accept_bytes("\xA9"));
  EXPECT_TRUE(m.can_end());
  auto any = compile_or_die("root ::= . \"!\"\n", vocab);
  EXPECT_TRUE(matches(any, "\n!"));
  EXPECT_TRUE(matches(any, "\xF4\x8F\xBF\xBF!"));  // U+10FFFF
  EXPECT_FALSE(matches(any, "ab!"));
}

TEST(GrammarMatch, TokensRollbackAndEnd) {
  auto vocab = byte_vocab({"ab", "abc", "c"});  // ids 256, 257, 258; 259 = end of generation
  auto g = compile_or_die("root ::= \"ab\" \"c\"?\n", vocab);
  GrammarMatcher m(g);
  EXPECT_FALSE(m.can_end());
  EXPECT_FALSE(m.accept_token(259));
  EXPECT_TRUE(m.accept_token(256));
  EXPECT_TRUE(m.can_end());
  EXPECT_FALSE(m.must_end());
  EXPECT_TRUE(m.accept_token('c'));
  EXPECT_TRUE(m.must_end());
  EXPECT_FALSE(m.accept_token('c'));
  EXPECT_EQ(m.n_tokens(), 2);
  m.rollback(2);
  EXPECT_EQ(m.n_tokens(), 0);
  EXPECT_TRUE(m.accept_token(257));
  EXPECT_TRUE(m.accept_token(259));
  EXPECT_TRUE(m.terminated());
  EXPECT_FALSE(m.accept_token('a'));
  std::vector<uint64_t> mask(5);
  ASSERT_TRUE(m.fill_mask(mask));
  EXPECT_EQ(mask[259 / 64], uint64_t{1} << (259 % 64));  // only the end of generation
  m.rollback(1);
  EXPECT_FALSE(m.terminated());
}

TEST(GrammarMask, JsonGrammarMatchesBruteForce) {
  auto vocab = random_vocab("{}[]\":, \n0123456789.-eEabtrufnls\\\xC3\xA9", 3000, 1);
  random_walks_match_brute_force(read_testdata("json.gbnf"), vocab, 6, 60, 11);
}

TEST(GrammarMask, BoundedRepetitionsMatchBruteForce) {
  auto vocab = random_vocab("\"abc,x{}: \\\xC3\xA9", 2000, 2);
  const std::string gbnf =
      "root ::= \"{\" ( item \",\" ){0,3} item \"}\"\n"
      "item ::= \"\\\"\" ( [^\"\\\\] | \"\\\\\" [\"\\\\] ){2,7} \"\\\"\" \":\" \" \"? val\n"
      "val ::= [abc]{1,4} | \"x\"+\n";
  random_walks_match_brute_force(gbnf, vocab, 8, 50, 12);
}

TEST(GrammarMask, OtherGrammarsMatchBruteForce) {
  random_walks_match_brute_force(read_testdata("arithmetic.gbnf"), random_vocab("abxyz019_+-*/()= \t\n", 1500, 3), 4,
                                 40, 13);
  random_walks_match_brute_force(read_testdata("c.gbnf"),
                                 random_vocab("intfloachr mwe(){}=;+-*/<>!,0123456789xyz_\n", 2000, 4), 4, 40, 14);
  random_walks_match_brute_force(read_testdata("chess.gbnf"), random_vocab("12345678. abcdefghNBKQRxO-+#=\n", 1500, 5),
                                 4, 40, 15);
  random_walks_match_brute_force(read_testdata("list.gbnf"), random_vocab("- ab\n\xC3\xA9\r", 800, 6), 4, 40, 16);
}

// Long conditional lists get cumulative bitsets (CountedTokens checkpoints). Tokens
// [ab]^k [xy]^m "."? with k, m up to 40 spread j over many values, so the ranges asked for
// end between checkpoints (a list segment is walked), start at the smallest j (prefix
// bitsets: near a repetition's max) or end at the largest (suffix bitsets: below its min).
TEST(GrammarMask, CheckpointedRepetitionsMatchBruteForce) {
  std::mt19937_64 rng(7);
  std::vector<std::string> extra;
  while (extra.size() < 3000) {
    const auto k = static_cast<int>(rng() % 41), m = rng() % 2 ? 0 : static_cast<int>(rng() % 41);
    std::string t;
    for (int i = 0; i < k; ++i) t += "ab"[rng() % 2];
    for (int i = 0; i < m; ++i) t += "xy"[rng() % 2];
    if (rng() % 4 == 0) t += ".";
    if (!t.empty()) extra.push_back(t);
  }
  auto vocab = byte_vocab(extra);
  const std::string gbnf = "root ::= [ab]{25,70} [xy]{20,60} \".\"\n";
  auto g = compile_or_die(gbnf, vocab);
  ASSERT_NE(g, nullptr);
  size_t longest_stays = 0, longest_exits = 0;
  for (int32_t pos = 0; pos < g->pda().n_elems(); ++pos)
    if (const PositionMask* pm = g->position(pos)) {
      longest_stays = std::max(longest_stays, pm->stays.size());
      longest_exits = std::max(longest_exits, pm->exits.size());
    }
  EXPECT_GT(longest_stays, 1000u);  // lists over 512 entries get checkpoints
  EXPECT_GT(longest_exits, 1000u);
  random_walks_match_brute_force(gbnf, vocab, 12, 30, 17);
}

// CountedTokens::or_range against the plain definition, for every range over lists whose
// j are spread thin (many checkpoints, walked segments), bunched (one j over a segment) or
// few (no checkpoints), with tokens listed at several j (the ranges bounded on both sides).
TEST(GrammarMask, CountedTokenRangesEqualTheirDefinition) {
  std::mt19937_64 rng(3);
  const int32_t n_vocab = 5000;
  for (const auto& [n, j_span] : std::vector<std::pair<int, int>>{{3000, 60}, {3000, 4}, {1200, 200}, {100, 10}}) {
    std::vector<CountedToken> list;
    for (int i = 0; i < n; ++i)
      list.push_back({static_cast<int32_t>(rng() % n_vocab), static_cast<int32_t>(rng() % (j_span + 1))});
    CountedTokens ct;
    ct.assign(list, n_vocab, /*with_suffix=*/true);
    const size_t n_words = (n_vocab + 63) / 64;
    for (int64_t lo = -2; lo <= j_span + 2; ++lo) {
      for (int64_t hi = lo - 1; hi <= j_span + 2; ++hi) {
        // Bits already set in the mask (other tops') stay set; the scratch starts dirty.
        std::vector<uint64_t> got(n_words, 0), scratch(n_words, ~uint64_t{0});
        for (int k = 0; k < 8; ++k) got[rng() % n_words] |= uint64_t{1} << (rng() % 64);
        std::vector<uint64_t> want = got;
        ct.or_range(lo, hi, got.data(), scratch.data());
        for (const CountedToken& e : list)
          if (e.j >= lo && e.j <= hi) want[static_cast<size_t>(e.token) / 64] |= uint64_t{1} << (e.token % 64);
        ASSERT_EQ(got, want) << "n " << n << ", j in [0, " << j_span << "], range [" << lo << ", " << hi << "]";
      }
    }
  }
}

}  // namespace
}  // namespace lumen::grammar
