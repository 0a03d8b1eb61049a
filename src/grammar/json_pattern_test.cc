// JSON Schema `pattern` (json_pattern.h) through json_schema_to_gbnf: each construct with
// texts the grammar must accept and reject, the JSON encoding of matched characters, search
// semantics and anchors, lengths beside minLength / maxLength, errors, hostile patterns, and
// a property test against an engine that is not ours (std::wregex, ECMAScript grammar).
// Suite names start with JsonSchema so that `make test-asan` runs them under ASan + UBSan.
#include "grammar/json_pattern.h"

#include <gtest/gtest.h>

#include <chrono>
#include <random>
#include <regex>

#include <nlohmann/json.hpp>

#include "grammar/grammar_test_util.h"
#include "grammar/json_schema.h"

namespace lumen::grammar {
namespace {

using testing::byte_vocab;
using testing::matches;

std::string schema_for(const std::string& pattern) {
  return nlohmann::json({{"type", "string"}, {"pattern", pattern}}).dump();
}

std::shared_ptr<const CompiledGrammar> pattern_grammar(const std::string& pattern, std::string* gbnf_out = nullptr) {
  auto gbnf = json_schema_to_gbnf(schema_for(pattern));
  EXPECT_TRUE(gbnf.ok()) << pattern << ": " << gbnf.message();
  if (!gbnf.ok()) return nullptr;
  if (gbnf_out) *gbnf_out = *gbnf;
  auto g = CompiledGrammar::from_gbnf(*gbnf, byte_vocab());
  EXPECT_TRUE(g.ok()) << g.message() << "\n" << *gbnf;
  return g.ok() ? *g : nullptr;
}

// good / bad: the decoded strings (they are JSON-encoded here, with quotes).
void expect_pattern(const std::string& pattern, const std::vector<std::string>& good, const std::vector<std::string>& bad) {
  std::string gbnf;
  auto g = pattern_grammar(pattern, &gbnf);
  ASSERT_NE(g, nullptr) << pattern;
  for (const std::string& s : good)
    EXPECT_TRUE(matches(g, nlohmann::json(s).dump())) << pattern << "\n  should accept " << nlohmann::json(s).dump() << "\n" << gbnf;
  for (const std::string& s : bad)
    EXPECT_FALSE(matches(g, nlohmann::json(s).dump())) << pattern << "\n  should reject " << nlohmann::json(s).dump() << "\n" << gbnf;
}

void expect_error(const std::string& schema, const std::string& want) {
  auto r = json_schema_to_gbnf(schema);
  ASSERT_FALSE(r.ok()) << schema;
  EXPECT_NE(r.message().find(want), std::string::npos) << schema << " -> " << r.message();
  EXPECT_EQ(r.message().rfind("json_schema: ", 0), 0u) << r.message();
}

TEST(JsonSchemaPattern, AlternationGroupsAndQuantifiers) {
  expect_pattern("^(cat|dog|bird)$", {"cat", "dog", "bird"}, {"", "ca", "cats", "catdog"});
  expect_pattern("^(?:ab)+$", {"ab", "abab"}, {"", "a", "aba"});
  expect_pattern("^(?<year>\\d{4})-(?<m>\\d\\d)$", {"2024-01"}, {"2024-1", "24-01"});
  expect_pattern("^a*b+c?$", {"b", "aab", "abbbc", "bc"}, {"", "a", "ac", "bcc"});
  expect_pattern("^x{3}$", {"xxx"}, {"xx", "xxxx"});
  expect_pattern("^x{2,}$", {"xx", "xxxxxxx"}, {"x", ""});
  expect_pattern("^x{1,3}$", {"x", "xxx"}, {"", "xxxx"});
  expect_pattern("^x{0}y$", {"y"}, {"xy"});
  expect_pattern("^a+?b*?c??d{1,2}?$", {"ad", "aabbcdd"}, {"bd", "acc d"});  // lazy: same language
  expect_pattern("^((a|b){2}c){1,2}$", {"abc", "bbcaac"}, {"ac", "abcab", "abcabcabc"});
  expect_pattern("^(a|)b$", {"ab", "b"}, {"aab"});
  expect_pattern("^(a?){3}$", {"", "a", "aaa"}, {"aaaa"});
  expect_pattern("^(a*)*$", {"", "aaaa"}, {"b"});
  expect_pattern("^$", {""}, {"a"});
}

TEST(JsonSchemaPattern, ClassesDotAndEscapes) {
  expect_pattern("^[a-c0-2_]+$", {"abc012_", "_"}, {"d", "3", "A"});
  expect_pattern("^[^a-c]$", {"d", "\xC3\xA9", "\"", "\\", "\t"}, {"a", "b", "dd", ""});
  expect_pattern("^[-a]$", {"-", "a"}, {"b"});
  expect_pattern("^[a-]$", {"-", "a"}, {"b"});
  expect_pattern("^[\\d\\-.]+$", {"1-2.3"}, {"a"});
  expect_pattern("^[\\b]$", {"\b"}, {"b"});
  expect_pattern("^[\\]\\[]$", {"]", "["}, {"\\"});
  expect_pattern("^.$", {"a", "\xC3\xA9", "\t", "\xF0\x9F\x98\x80", "\"", "\\"}, {"\n", "\r", "\xE2\x80\xA8", "\xE2\x80\xA9", ""});
  expect_pattern("^\\d\\D$", {"1a", "2-"}, {"12", "a1"});
  expect_pattern("^\\w\\W$", {"a-", "_ "}, {"ab", "-a"});
  // \s \S \D \W: what ECMA-262 and python's re agree on (json_pattern.cc).
  expect_pattern("^\\s+$", {" ", "\t\n", "\xC2\xA0", "\xE3\x80\x80", "\v\f\r"}, {"a", "\x1C", "\xEF\xBB\xBF"});
  expect_pattern("^\\S$", {"a", "\xE4\xB8\xAD", "\x01"}, {" ", "\xC2\xA0", "\xEF\xBB\xBF", "\x1C", "\xC2\x85"});
  expect_pattern("^\\D$", {"a", "\xC3\xA9", "\xE4\xB8\xAD", "\xE2\x82\xAC"}, {"1", "\xD9\xA3", "\xEF\xBC\x91"});
  expect_pattern("^\\W$", {"-", " ", "\xE2\x82\xAC", "\xC2\xA7"}, {"a", "_", "\xC3\xA9", "\xE4\xB8\xAD", "\xC2\xB2"});
  expect_pattern("^\\t\\n\\r\\v\\f$", {"\t\n\r\v\f"}, {"tnrvf"});
  expect_pattern("^\\0$", {std::string(1, '\0')}, {"0"});
  expect_pattern("^\\x41\\u00e9\\uD83D\\uDE00$", {"A\xC3\xA9\xF0\x9F\x98\x80"}, {"A\xC3\xA9"});
  expect_pattern("^\\cJ\\ca$", {"\n\x01"}, {"cJca"});
  expect_pattern("^\\.\\\\\\/\\-\\[\\]\\(\\)\\{\\}\\*\\+\\?\\|\\^\\$ $", {".\\/-[](){}*+?|^$ "}, {"a\\/-[](){}*+?|^$ "});
  expect_pattern("^caf\xC3\xA9 \xE2\x82\xAC[\xC3\xA0-\xC3\xBF]$", {"caf\xC3\xA9 \xE2\x82\xAC\xC3\xA8"}, {"cafe \xE2\x82\xAC\xC3\xA8"});
  expect_pattern("^a{b}c]$", {"a{b}c]"}, {"abc"});  // `{` that is no quantifier, `}` and `]`: themselves
}

// Matched characters are written as JSON needs them: `"` and `\` escaped, controls only as
// escapes (the short ones where JSON has them, else \u00xx), everything else raw.
TEST(JsonSchemaPattern, MatchedCharactersAreJsonEncoded) {
  auto g = pattern_grammar("^[\"\\\\\\n\\x01a]{1,3}$");
  ASSERT_NE(g, nullptr);
  for (const char* ok : {"\"\\\"\"", "\"\\\\\"", "\"\\n\"", "\"\\u0001\"", "\"a\\\"\\\\\"", "\"\\n\\na\""})
    EXPECT_TRUE(matches(g, ok)) << ok;
  for (const char* bad : {"\"\"\"", "\"\n\"", "\"\x01\"", "\"\\u0061\"", "\"\\u000a\"", "\"\\/\"", "\"\"", "\"aaaa\""})
    EXPECT_FALSE(matches(g, bad)) << bad;
  auto any_ctl = pattern_grammar("^[^a-z]$");
  ASSERT_NE(any_ctl, nullptr);
  for (const char* ok : {"\"\\b\"", "\"\\f\"", "\"\\t\"", "\"\\r\"", "\"\\u001f\"", "\"\\u000b\"", "\"\\u0000\"", "\"~\""})
    EXPECT_TRUE(matches(any_ctl, ok)) << ok;
  for (const char* bad : {"\"\\u0008\"", "\"\\u001F\"", "\"\x1F\"", "\"a\""}) EXPECT_FALSE(matches(any_ctl, bad)) << bad;
}

// pattern is a search: an unanchored side takes any characters (escapes included).
TEST(JsonSchemaPattern, AnchorsPerTopLevelAlternative) {
  expect_pattern("abc", {"abc", "xxabcyy", "\n abc \"", "abcabc"}, {"ab", "acb", ""});
  expect_pattern("^abc", {"abc", "abcd\n"}, {"xabc", "ab"});
  expect_pattern("abc$", {"abc", "xxabc"}, {"abcd", "abc\n"});
  expect_pattern("^a|b$", {"a", "axx", "b", "xxb"}, {"xa", "bx", ""});
  expect_pattern("^(a|b)$", {"a", "b"}, {"ab", "xa"});
  expect_pattern("a*", {"", "anything", "\\"}, {});
  expect_pattern("^\\d*", {"", "x", "12x"}, {});
  auto g = pattern_grammar("x");
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(matches(g, "\"\\u00e9x\\n\""));  // JSON escapes on the open sides
}

TEST(JsonSchemaPattern, LengthsBesideMinAndMaxLength) {
  // The pattern's own lengths lie within minLength / maxLength: accepted.
  {
    auto r = json_schema_to_gbnf(R"({"type": "string", "pattern": "^[A-Z]{2}-\\d{4}$", "minLength": 7, "maxLength": 7})");
    EXPECT_TRUE(r.ok()) << r.message();
    r = json_schema_to_gbnf(R"({"pattern": "^(ab|c){1,3}$", "minLength": 1, "maxLength": 6})");
    EXPECT_TRUE(r.ok()) << r.message();
    r = json_schema_to_gbnf(R"({"pattern": "x+", "minLength": 1})");
    EXPECT_TRUE(r.ok()) << r.message();
  }
  // Narrower: cut exactly where the pattern is anchored with one repetition of a fixed-width
  // part (JsonPattern::with_lengths); alternatives left with no string are dropped.
  auto texts = [](const std::string& schema, const std::vector<std::string>& good, const std::vector<std::string>& bad) {
    auto gbnf = json_schema_to_gbnf(schema);
    ASSERT_TRUE(gbnf.ok()) << schema << ": " << gbnf.message();
    auto g = CompiledGrammar::from_gbnf(*gbnf, byte_vocab());
    ASSERT_TRUE(g.ok()) << g.message();
    for (const std::string& t : good) EXPECT_TRUE(matches(*g, nlohmann::json(t).dump())) << schema << " should accept " << t;
    for (const std::string& t : bad) EXPECT_FALSE(matches(*g, nlohmann::json(t).dump())) << schema << " should reject " << t;
  };
  texts(R"({"type": "string", "pattern": "^[a-z]+$", "maxLength": 3})", {"a", "abc"}, {"", "abcd", "A"});
  texts(R"({"pattern": "^[A-Z]\\d{2,}-x$", "minLength": 5, "maxLength": 6})", {"A12-x", "A123-x"}, {"A1-x", "A1234-x"});
  texts(R"({"pattern": "^(?:ab)*$", "minLength": 3, "maxLength": 5})", {"abab"}, {"", "ab", "ababab"});
  texts(R"({"pattern": "^(q(\\d\\d)+)$", "minLength": 4})", {"q1234", "q123456"}, {"q12"});
  texts(R"({"pattern": "^a+$|^b{5}$|^c$", "maxLength": 3})", {"a", "aaa", "c"}, {"aaaa", "bbbbb"});
  texts(R"({"pattern": "^a{2,5}$", "minLength": 3})", {"aaa", "aaaaa"}, {"aa"});
  expect_error(R"({"type": "string", "pattern": "^(ab|c){1,3}$", "maxLength": 5})",
               "/: minLength / maxLength beside 'pattern' (whose strings have 1 to 6 characters): the part of varying "
               "length is not a repetition of a fixed-width part");
  expect_error(R"({"type": "string", "pattern": "abc", "maxLength": 10})", "an alternative open at one end");
  expect_error(R"({"type": "string", "pattern": "^[a-z]+-[a-z]+$", "maxLength": 10})", "more than one part of varying length");
  expect_error(R"({"type": "string", "pattern": "^a{5}$|^b{6}$", "maxLength": 4})",
               "no string of the pattern has a length within minLength / maxLength");
  JsonPattern p = *JsonPattern::parse("^(x{2}|y\\d{3,})(-z)?$");
  EXPECT_EQ(p.min_length(), 2);
  EXPECT_EQ(p.max_length(), JsonPattern::kUnbounded);
  p = *JsonPattern::parse("^((a|bc){2}\xC3\xA9){1,3}$|^q$");
  EXPECT_EQ(p.min_length(), 1);
  EXPECT_EQ(p.max_length(), 15);
  p = *JsonPattern::parse("^(a{100000}){100000}$");
  EXPECT_EQ(p.max_length(), int64_t{10000000000});
}

TEST(JsonSchemaPattern, SchemaKeywordsAroundPattern) {
  // No type: a string schema.
  auto g = CompiledGrammar::from_gbnf(*json_schema_to_gbnf(R"({"pattern": "^a$"})"), byte_vocab());
  ASSERT_TRUE(g.ok());
  EXPECT_TRUE(matches(*g, "\"a\""));
  EXPECT_FALSE(matches(*g, "1"));
  // Inside an object, and with nullable / a type list.
  g = CompiledGrammar::from_gbnf(*json_schema_to_gbnf(R"({"type": "object", "properties": {"id": {"type": ["string", "null"],
      "pattern": "^[a-f0-9]{4}$"}}, "required": ["id"], "additionalProperties": false})"), byte_vocab());
  ASSERT_TRUE(g.ok());
  EXPECT_TRUE(matches(*g, "{\"id\":\"0af9\"}"));
  EXPECT_TRUE(matches(*g, "{\"id\":null}"));
  EXPECT_FALSE(matches(*g, "{\"id\":\"0afg\"}"));
  // enum / const values are checked against the pattern.
  g = CompiledGrammar::from_gbnf(*json_schema_to_gbnf(R"({"enum": ["ab-12", "xy-1", "cd-99", 7], "pattern": "^[a-z]{2}-\\d{2}$"})"),
                                 byte_vocab());
  ASSERT_TRUE(g.ok());
  EXPECT_TRUE(matches(*g, "\"ab-12\""));
  EXPECT_TRUE(matches(*g, "\"cd-99\""));
  EXPECT_TRUE(matches(*g, "7"));  // pattern constrains strings only
  EXPECT_FALSE(matches(*g, "\"xy-1\""));
  expect_error(R"({"const": "abc", "pattern": "^\\d+$"})", "no 'const' value satisfies");
  expect_error(R"j({"const": "abc", "pattern": "(?=a)"})j", "/pattern: pattern '(?=a)': lookahead '(?=' is not supported");
  expect_error(R"({"type": "string", "pattern": "^\\d+$", "format": "date"})", "'format' beside 'pattern' is not supported");
  expect_error(R"({"type": "string", "pattern": 5})", "/pattern: must be a string");
}

TEST(JsonSchemaPattern, UnsupportedConstructsAreErrorsNamingThem) {
  struct Case {
    const char* pattern;
    const char* want;
  };
  const Case cases[] = {
      {"a(?=b)", "lookahead '(?='"},
      {"a(?!b)", "lookahead '(?!'"},
      {"(?<=a)b", "lookbehind '(?<='"},
      {"(?<!a)b", "lookbehind '(?<!'"},
      {"(a)\\1", "backreference '\\1'"},
      {"(?<n>a)\\k<n>", "backreference '\\k<name>'"},
      {"\\bword\\b", "word boundary '\\b'"},
      {"a\\B", "word boundary '\\B'"},
      {"\\p{L}+", "Unicode property escape '\\p{..}'"},
      {"\\P{L}", "Unicode property escape '\\P{..}'"},
      {"\\u{1F600}", "'\\u{...}' escapes are not supported"},
      {"\\q", "unknown escape '\\q'"},
      {"\\e", "unknown escape '\\e'"},
      {"a^b", "anchor '^' is supported only at the start of a top-level alternative"},
      {"(^a)", "anchor '^'"},
      {"a$b", "anchor '$' is supported only at the end of a top-level alternative"},
      {"(a$)", "anchor '$'"},
      {"(ab", "unbalanced '(' (no ')' after it)"},
      {"ab)", "unbalanced ')'"},
      {"a|b)", "unbalanced ')'"},
      {"[abc", "unbalanced '['"},
      {"[z-a]", "bad class range 'z-a'"},
      {"[\\d-z]", "a class range with a class escape"},
      {"*a", "quantifier '*' has nothing to repeat"},
      {"a|+", "quantifier '+' has nothing to repeat"},
      {"(?:)?", ""},  // fine: an empty group may be repeated
      {"{3}", "quantifier '{' has nothing to repeat"},
      {"a**", "quantifier after a quantifier"},
      {"a{2}{3}", "quantifier after a quantifier"},
      {"a{5,2}", "quantifier {n,m} with n > m"},
      {"a{1,100001}", "repetition count above the limit of 100000"},
      {"a{99999999999999999999}", "repetition count above the limit"},
      {"a{,3}", "quantifier '{,m}' is not supported"},
      {"(?i)abc", "group syntax '(?i' is not supported"},
      {"[]", "the empty class '[]'"},
      {"[^]", "the class '[^]'"},
      {"\\x4", "'\\x' must be followed by two hex digits"},
      {"\\u12", "'\\u' must be followed by four hex digits"},
      {"\\uD800", "lone surrogate '\\uD800'"},
      {"\\c1", "'\\c' must be followed by a letter"},
      {"\\01", "octal escape"},
      {"abc\\", "lone '\\'"},
      {"[^\\0-\\uffff\\ud800\\udc00-\\udbff\\udfff]", "the class matches no character"},
      {"(?<1a>x)", "bad group name"},
  };
  for (const Case& c : cases) {
    const std::string schema = R"({"type": "object", "properties": {"code": )" + schema_for(c.pattern) + "}}";
    auto r = json_schema_to_gbnf(schema);
    if (std::string(c.want).empty()) {
      EXPECT_TRUE(r.ok()) << c.pattern << ": " << r.message();
      continue;
    }
    ASSERT_FALSE(r.ok()) << c.pattern;
    EXPECT_NE(r.message().find(c.want), std::string::npos) << c.pattern << " -> " << r.message();
    EXPECT_EQ(r.message().rfind("json_schema: /properties/code/pattern: pattern '", 0), 0u) << r.message();
  }
  std::string deep;
  for (int i = 0; i < 40; ++i) deep += "(";
  deep += "a";
  for (int i = 0; i < 40; ++i) deep += ")";
  expect_error(schema_for(deep), "groups nested deeper than");
  expect_error(schema_for(std::string(5000, 'a')), "5000 bytes, over the limit of 4096");
}

// Hostile patterns convert to grammars that stay small and compile quickly.
TEST(JsonSchemaPattern, HostilePatternsStayCheap) {
  const std::vector<std::string> hostile = {
      "(a|a)*b", "(.*)*x", "[^\"]{0,10000}", "^(a{100}){100}$", "^((a?){50}){50}$", "^(a*b*)*c$", "(x+x+)+y",
      "^(([a-z])+.)+[A-Z]([a-z])+$", "^(\\w+\\s?)*$", "^((a|ab)(c|bcd))(d*)$", "(.*a){20}",
      "^(.{0,100}){0,100}$", "^([^\"]{1,1000}){1,1000}$", "((((((((((a*)*)*)*)*)*)*)*)*)*)*b"};
  for (const std::string& p : hostile) {
    const auto t0 = std::chrono::steady_clock::now();
    auto gbnf = json_schema_to_gbnf(schema_for(p));
    ASSERT_TRUE(gbnf.ok()) << p << ": " << gbnf.message();
    EXPECT_LT(gbnf->size(), 20000u) << p;
    // Long tokens are where ambiguous grammars multiply their parses (a real vocabulary has
    // runs of 16 letters and more).
    auto g = CompiledGrammar::from_gbnf(*gbnf, byte_vocab({"aa", "ab", "xy", "\"a", "a\"", "aaaa", std::string(16, 'a'),
                                                           std::string(32, 'a'), "abababababababab", "xxxxxxxxxxxxxxxxxxxxxxxx"}));
    ASSERT_TRUE(g.ok()) << p << ": " << g.message() << "\n" << *gbnf;
    GrammarMatcher m(*g);
    std::string text = "\"";
    for (int i = 0; i < 300; ++i) text += "ab"[i % 7 == 0];
    m.accept_bytes(text);  // whatever the verdict: it must be quick and not fail
    EXPECT_FALSE(m.failed()) << p << ": " << m.error();
    std::vector<uint64_t> mask(8);
    EXPECT_TRUE(m.fill_mask(mask)) << p << ": " << m.error();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_LT(s, 10.0) << p;
  }
}

// ---------------------------------------------------------------------------------------
// Property test: texts drawn from the grammar match under std::wregex (ECMAScript, search),
// and for mutated texts the grammar's verdict equals std::regex_search's.

std::wstring to_wide(const std::string& utf8) {
  std::wstring out;
  for (size_t i = 0; i < utf8.size();) {
    const auto b = static_cast<unsigned char>(utf8[i]);
    const int len = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
    uint32_t cp = len == 1 ? b : b & (0x3F >> (len - 1));
    for (int k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<unsigned char>(utf8[i + static_cast<size_t>(k)]) & 0x3F);
    out += static_cast<wchar_t>(cp);
    i += static_cast<size_t>(len);
  }
  return out;
}

// The class escapes as json_pattern.h defines them (what ECMA-262 and python's re agree on),
// for libstdc++: its \s is ASCII only, so ECMA-262's set less U+FEFF is spelled out; its \W
// holds every non-ASCII letter, which python's re calls word characters, so the letters of
// the mutation alphabet's scripts are taken out of it.
std::wstring for_std_regex(const std::wstring& p) {
  const std::wstring members = L"\\t\\n\\v\\f\\r \\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000";
  std::wstring out;
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] == L'\\' && i + 1 < p.size()) {
      if (p[i + 1] == L's') out += in_class ? members : L"[" + members + L"]";
      else if (p[i + 1] == L'S' && !in_class) out += L"[^" + members + L"\\ufeff\\x1c-\\x1f\\x85]";
      else if (p[i + 1] == L'W' && !in_class) out += L"(?:(?![\\u00c0-\\u00d6\\u00d8-\\u00f6\\u00f8-\\u024f\\u0400-\\u04ff\\u4e00-\\u9fff])\\W)";
      else out += p.substr(i, 2);
      ++i;
      continue;
    }
    if (!in_class && p.compare(i, 3, L"(?<") == 0 && i + 3 < p.size() && p[i + 3] != L'=' && p[i + 3] != L'!') {
      out += L"(?:";  // named groups: libstdc++ lacks them; the name changes nothing
      i = p.find(L'>', i);
      continue;
    }
    if (p[i] == L'[') in_class = true;
    if (p[i] == L']') in_class = false;
    out += p[i];
  }
  return out;
}

const std::vector<std::string>& user_patterns() {
  static const std::vector<std::string> k = {
      "^\\+?[1-9]\\d{1,14}$",                                   // E.164 phone
      "^\\(\\d{3}\\) \\d{3}-\\d{4}$",                          // US phone
      "^\\d{3}-\\d{3}-\\d{4}$",
      "^[A-Z]{2}$",                                             // ISO 3166 alpha-2
      "^[A-Z]{3}$",                                             // ISO 4217
      "^[a-z]{2}(-[A-Z]{2})?$",                                 // language tag
      "^(0|[1-9]\\d*)\\.(0|[1-9]\\d*)\\.(0|[1-9]\\d*)(-[0-9A-Za-z.-]+)?$",  // semver
      "^[a-z0-9]+(?:-[a-z0-9]+)*$",                             // slug
      "^#[0-9a-fA-F]{6}$",                                      // hex colour
      "^#([0-9a-fA-F]{3}|[0-9a-fA-F]{6})$",
      "^\\d{5}(-\\d{4})?$",                                     // US zip
      "^[A-Z]\\d[A-Z] ?\\d[A-Z]\\d$",                           // Canadian postcode
      "^[A-Z]{2}-\\d{4}$",
      "^[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\\.[A-Za-z]{2,}$",      // email-ish
      "^[\\w.+-]+@\\w+\\.\\w{2,4}$",
      "^(red|green|blue)$",                                     // words
      "^(small|medium|large|x-large)$",
      "^(?:yes|no|maybe)$",
      "^((a|b)c){2,3}d$",                                       // nested groups with counts
      "^(\\d{1,3}\\.){3}\\d{1,3}$",                             // IPv4-ish
      "^([0-9a-f]{2}:){5}[0-9a-f]{2}$",                         // MAC
      "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$",
      "^\\d{4}-\\d{2}-\\d{2}$",                                 // date-ish
      "^([01]\\d|2[0-3]):[0-5]\\d$",                            // time
      "^[A-Z][a-z]+( [A-Z][a-z]+)*$",                           // names
      "^[\\u00c0-\\u00ff]+$",                                   // unicode class
      "^[\\u0400-\\u04ff]{1,8}$",                               // Cyrillic
      "^[^\\u0000-\\u007f]{2,4}$",                              // non-ASCII only
      "^caf\\u00e9|th\\u00e9$",
      "^[\\u4e00-\\u9fff]{1,3}$",
      "ID-\\d+",                                                // unanchored
      "^PRE",
      "end$",
      "^[^\"\\\\]{1,6}$",                                       // no quote, no backslash
      "^[\"\\\\\\n]{1,4}$",                                     // only characters needing escapes
      "^.{2,5}$",
      "^\\S+\\s\\S+$",
      "^\\W{1,3}$",
      "^[^a-z]{3}$",
      "^(?<user>[a-z]{1,8})/(?<repo>[a-z0-9_-]{1,10})$",
      "^v?\\d+(\\.\\d+){0,2}$",
      "^(\\$|USD )\\d+(\\.\\d{2})?$",
      "^[A-HJ-NPR-Z0-9]{17}$",                                  // VIN
      "^[\\t\\x20-\\x7e]{0,5}$",
      "^a{0,3}b{1,2}?$|^z$",
      "^(?:\\d{3}|\\(\\d{3}\\))[-. ]?\\d{4}$",
  };
  return k;
}

std::string decode_json_string(const std::string& text) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_string()) return "\x01<not a JSON string>";
  return j.get<std::string>();
}

std::string mutate(std::string s, std::mt19937_64& rng) {
  static const std::vector<std::string> kUnits = {"a", "Z", "0", "9", "-", ".", " ", "#", "@", "\"", "\\", "\n",
                                                  "\t", "\xC3\xA9", "\xD0\x96", "\xE4\xB8\xAD", "(", ")", "_", "/"};
  std::vector<std::string> units;  // whole characters
  for (size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    const size_t len = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
    units.push_back(s.substr(i, len));
    i += len;
  }
  const int n_edits = 1 + static_cast<int>(rng() % 3);
  for (int e = 0; e < n_edits; ++e) {
    const size_t pos = units.empty() ? 0 : rng() % (units.size() + 1);
    switch (rng() % 4) {
      case 0: units.insert(units.begin() + static_cast<std::ptrdiff_t>(pos), kUnits[rng() % kUnits.size()]); break;
      case 1: if (pos < units.size()) units.erase(units.begin() + static_cast<std::ptrdiff_t>(pos)); break;
      case 2: if (pos < units.size()) units[pos] = kUnits[rng() % kUnits.size()]; break;
      default: if (pos < units.size()) units.insert(units.begin() + static_cast<std::ptrdiff_t>(pos), units[pos]);
    }
  }
  std::string out;
  for (const std::string& u : units) out += u;
  return out;
}

TEST(JsonSchemaPattern, PropertyGrammarAgreesWithStdRegex) {
  ASSERT_GE(user_patterns().size(), 40u);
  std::vector<std::string> extra;
  // Words the unanchored-suffix patterns end with, so that walks reach their end.
  for (const char* t : {"ab", "12", "-", "\\\"", "\\n", "\"", ".0", "a-", "\xC3\xA9", "end", "th\xC3\xA9", "ID-7"}) extra.push_back(t);
  auto vocab = byte_vocab(extra);
  std::mt19937_64 rng(17);
  std::vector<uint64_t> mask((static_cast<size_t>(vocab->n_vocab()) + 63) / 64);
  int n_generated = 0, n_mutants = 0, n_mutants_matching = 0;
  for (const std::string& pattern : user_patterns()) {
    SCOPED_TRACE(pattern);
    auto gbnf = json_schema_to_gbnf(schema_for(pattern));
    ASSERT_TRUE(gbnf.ok()) << gbnf.message();
    auto g = CompiledGrammar::from_gbnf(*gbnf, vocab);
    ASSERT_TRUE(g.ok()) << g.message();
    const std::wregex re(for_std_regex(to_wide(pattern)), std::regex::ECMAScript);
    std::vector<std::string> good;
    for (int walk = 0; walk < 25; ++walk) {
      GrammarMatcher m(*g);
      std::string text;
      for (int step = 0; step < 400 && !m.terminated(); ++step) {
        ASSERT_TRUE(m.fill_mask(mask));
        const std::vector<int32_t> allowed = testing::allowed_ids(mask, vocab->n_vocab());
        ASSERT_FALSE(allowed.empty()) << text;
        int32_t pick = allowed[rng() % allowed.size()];
        if (step > 20 && rng() % 2 == 0 && allowed.back() >= 256) {  // an extra token (ids 256..), if one fits
          auto first_extra = std::lower_bound(allowed.begin(), allowed.end(), 256);
          pick = *(first_extra + static_cast<std::ptrdiff_t>(rng() % static_cast<uint64_t>(allowed.end() - first_extra)));
        }
        // Lean towards ending once past 20 steps (unanchored sides never have to end).
        if (step > 20 && !vocab->is_eog(pick) && m.can_end()) pick = vocab->n_vocab() - 1;
        ASSERT_TRUE(m.accept_token(pick));
        text += vocab->bytes(pick);
      }
      if (!m.terminated()) continue;
      const std::string s = decode_json_string(text);
      ++n_generated;
      EXPECT_TRUE(std::regex_search(to_wide(s), re)) << "generated " << text;
      EXPECT_TRUE(*JsonPattern::parse(pattern)->matches(s)) << "generated " << text;
      good.push_back(s);
    }
    ASSERT_FALSE(good.empty());
    auto g_bytes = CompiledGrammar::from_gbnf(*gbnf, byte_vocab());
    ASSERT_TRUE(g_bytes.ok());
    const JsonPattern ours = *JsonPattern::parse(pattern);
    for (int k = 0; k < 60; ++k) {
      const std::string s = mutate(good[rng() % good.size()], rng);
      const bool want = std::regex_search(to_wide(s), re);
      ++n_mutants;
      n_mutants_matching += want;
      EXPECT_EQ(matches(*g_bytes, nlohmann::json(s).dump()), want) << "mutant " << nlohmann::json(s).dump();
      EXPECT_EQ(*ours.matches(s), want) << "mutant (matcher) " << nlohmann::json(s).dump();
    }
  }
  EXPECT_GT(n_generated, 40 * 20);
  EXPECT_GT(n_mutants_matching, n_mutants / 10);           // both verdicts are exercised
  EXPECT_LT(n_mutants_matching, n_mutants - n_mutants / 10);
}

}  // namespace
}  // namespace lumen::grammar
