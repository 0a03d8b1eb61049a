#include "grammar/json_schema.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <random>
#include <set>

#include <nlohmann/json.hpp>

#include "grammar/grammar_test_util.h"

namespace lumen::grammar {
namespace {

using testing::byte_vocab;
using testing::matches;

std::shared_ptr<const CompiledGrammar> schema_grammar(const std::string& schema) {
  auto gbnf = json_schema_to_gbnf(schema);
  EXPECT_TRUE(gbnf.ok()) << gbnf.message();
  if (!gbnf.ok()) return nullptr;
  auto g = CompiledGrammar::from_gbnf(*gbnf, byte_vocab());
  EXPECT_TRUE(g.ok()) << g.message() << "\n" << *gbnf;
  return g.ok() ? *g : nullptr;
}

void expect_texts(const std::string& schema, const std::vector<std::string>& good, const std::vector<std::string>& bad) {
  auto g = schema_grammar(schema);
  ASSERT_NE(g, nullptr) << schema;
  for (const std::string& s : good) EXPECT_TRUE(matches(g, s)) << schema << "\n  should accept " << s;
  for (const std::string& s : bad) EXPECT_FALSE(matches(g, s)) << schema << "\n  should reject " << s;
}

TEST(JsonSchema, ScalarsEnumsConstAndTypeLists) {
  expect_texts(R"({"type": "boolean"})", {"true", "false"}, {"1", "\"true\"", "null"});
  expect_texts(R"({"type": ["string", "null"], "maxLength": 3})", {"null", "\"ab\"", "\"\""}, {"\"abcd\"", "1"});
  expect_texts(R"({"enum": ["red", 2, null, {"a": [1]}]})", {"\"red\"", "2", "null", "{\"a\":[1]}"}, {"\"blue\"", "3"});
  expect_texts(R"({"const": "x\"y"})", {"\"x\\\"y\""}, {"\"xy\""});
  expect_texts(R"({"type": "integer", "nullable": true})", {"null", "-12", "0", "-0"}, {"1.5", "01", "+1"});
  expect_texts(R"({"type": "number"})", {"0", "-1.25", "3e10", "1.5E-2"}, {"1.", ".5", "--1", "1e100"});
  expect_texts(R"({"anyOf": [{"type": "integer"}, {"type": "string", "maxLength": 1}]})", {"5", "\"a\""}, {"true"});
}

TEST(JsonSchema, StringLengthsCountCharactersAndEscapes) {
  expect_texts(R"({"type": "string", "minLength": 2, "maxLength": 3})",
               {"\"ab\"", "\"abc\"", "\"\\n\\t\"", "\"\xC3\xA9\xC3\xA9\"", "\"\\u00e9x\""},
               {"\"a\"", "\"abcd\"", "\"\\q\"", "\"a\nb\"", "\"\\ud83d\\ude00\""});
}

TEST(JsonSchema, IntegerRangesAreExact) {
  std::mt19937_64 rng(7);
  const std::pair<int64_t, int64_t> ranges[] = {{0, 0},     {0, 9},     {1, 10},   {5, 123},    {-7, 7},
                                                {-150, -3}, {37, 4095}, {-1000, 999}, {99, 100}, {1, 1}};
  for (auto [lo, hi] : ranges) {
    auto g = schema_grammar(R"({"type": "integer", "minimum": )" + std::to_string(lo) + R"(, "maximum": )" +
                            std::to_string(hi) + "}");
    ASSERT_NE(g, nullptr);
    for (int64_t v = lo - 60; v <= hi + 60; ++v) {
      if (hi - lo > 200 && v > lo + 60 && v < hi - 60 && rng() % 16 != 0) continue;
      EXPECT_EQ(matches(g, std::to_string(v)), v >= lo && v <= hi) << "[" << lo << ", " << hi << "] " << v;
    }
  }
  // One side open, exclusive bounds, fractional bounds.
  expect_texts(R"({"type": "integer", "exclusiveMinimum": 10})", {"11", "99999"}, {"10", "-5", "9"});
  expect_texts(R"({"type": "integer", "maximum": -2})", {"-2", "-1000000"}, {"-1", "0", "5"});
  expect_texts(R"({"type": "integer", "minimum": 0.5, "exclusiveMaximum": 3})", {"1", "2"}, {"0", "3"});
}

TEST(JsonSchema, NumberRangesWithFractionalBounds) {
  expect_texts(R"({"type": "number", "minimum": 0, "maximum": 10})", {"0", "3.5", "9.999", "10", "10.00", "-0", "-0.0"},
               {"-1", "10.5", "11", "10.0000000000000001", "-0.5"});
  expect_texts(R"({"type": "number", "minimum": -2, "maximum": -1})", {"-2", "-1.5", "-1", "-2.0"},
               {"-2.5", "-0.5", "0", "-2.0000000000000001"});
  expect_texts(R"({"type": "number", "minimum": 0.2, "maximum": 0.8})", {"0.2", "0.20", "0.5", "0.8", "0.7999"},
               {"0.1999999999999999", "0.8000000000000001", "0", "1", "0.81", "-0.5"});
  expect_texts(R"({"type": "number", "exclusiveMinimum": 0, "maximum": 1})", {"0.0000000000000001", "0.5", "1", "1.0"},
               {"0", "0.0", "-0", "-0.1", "1.0000000000000001"});
  expect_texts(R"({"type": "number", "minimum": 0.01})", {"0.01", "0.010", "0.02", "1", "123456.789"},
               {"0.0099", "0.001", "0", "-1"});
  expect_texts(R"({"type": "number", "minimum": -90, "maximum": 90})", {"-90", "-89.99999", "0.5", "90.0"},
               {"-90.1", "90.01", "-91"});
  expect_texts(R"({"type": "number", "minimum": 0.5, "maximum": 5})", {"0.5", "4.5", "5"}, {"0.4", "5.5", "0"});
  expect_texts(R"({"type": "number", "minimum": -0.75, "exclusiveMaximum": 2.5E-1})",
               {"-0.75", "-0.7", "-0", "0.2499999999999999"}, {"-0.76", "0.25", "0.250", "1"});
  // An exclusive bound also holds for a validator that reads the text as a double:
  // 99.9999999999999999 reads as 100.0.
  expect_texts(R"({"type": "number", "exclusiveMaximum": 100})", {"99.999999999999", "-5"},
               {"100", "99.9999999999999999", "100.5"});
  // Ranges without a plain text: one exponent.
  expect_texts(R"({"type": "number", "minimum": 1e-20, "maximum": 3e-20})", {"1e-20", "2.5e-20", "3e-20"},
               {"0", "4e-20", "0.5e-20", "1e-21"});
  expect_texts(R"({"type": "number", "minimum": 1e20})", {"1e20", "1.5e20", "99e20"}, {"0.9e20", "1e19", "1"});
  // Beside an enum, values are compared as numbers.
  expect_texts(R"({"enum": [0.1, 0.5, 0.75, 2], "minimum": 0.2, "exclusiveMaximum": 0.75})", {"0.5"},
               {"0.1", "0.75", "2"});
  struct Case {
    const char* schema;
    const char* want;
  };
  const Case cases[] = {
      {R"({"type": "number", "minimum": 0.8, "maximum": 0.2})", "/: no number lies within minimum 0.8, maximum 0.2"},
      {R"({"type": "number", "minimum": 0.5, "exclusiveMaximum": 0.5})",
       "/: no number lies within minimum 0.5, exclusiveMaximum 0.5 (the lower bound is not below the upper one)"},
      {R"({"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1e-120})", "2-digit exponent"},
      {R"({"type": "number", "minimum": "1"})", "/minimum: must be a number"},
  };
  for (const Case& c : cases) {
    auto r = json_schema_to_gbnf(c.schema);
    ASSERT_FALSE(r.ok()) << c.schema;
    EXPECT_NE(r.message().find(c.want), std::string::npos) << c.schema << " -> " << r.message();
  }
}

// Exact values of short decimal texts: the value times 10^kScale, exactly (the tests'
// texts have at most 20 fraction digits and |x| < 1e17).
constexpr int kScale = 20;
using Scaled = __int128;

Scaled scaled_value(const std::string& text) {
  bool neg = false;
  size_t i = 0;
  if (text[i] == '-') {
    neg = true;
    ++i;
  }
  std::string digits;
  int point = -1;
  for (; i < text.size() && text[i] != 'e' && text[i] != 'E'; ++i) {
    if (text[i] == '.') point = static_cast<int>(digits.size());
    else digits += text[i];
  }
  if (point < 0) point = static_cast<int>(digits.size());
  if (i < text.size()) point += std::stoi(text.substr(i + 1));
  const int n_frac = static_cast<int>(digits.size()) - point;  // digits after the point
  EXPECT_LE(n_frac, kScale) << text;
  EXPECT_LE(point, 17) << text;
  Scaled v = 0;
  for (const char c : digits) v = v * 10 + (c - '0');
  for (int k = n_frac; k < kScale; ++k) v *= 10;
  return neg ? -v : v;
}

// "-"? digits "." digits: v / 10^n_frac, with exactly n_frac fraction digits.
std::string fixed_text(int64_t v, int n_frac) {
  const bool neg = v < 0;
  std::string digits = std::to_string(v < 0 ? -v : v);
  if (static_cast<int>(digits.size()) <= n_frac) digits = std::string(static_cast<size_t>(n_frac) + 1 - digits.size(), '0') + digits;
  std::string out = (neg ? "-" : "") + digits.substr(0, digits.size() - static_cast<size_t>(n_frac));
  if (n_frac > 0) out += "." + digits.substr(digits.size() - static_cast<size_t>(n_frac));
  return out;
}

struct RangeSide {
  std::string text;  // the bound as the schema writes it; empty: no bound
  bool exclusive = false;
};

// A random bound: an integer, a fraction with 1-4 decimals, or an exponent form.
std::string random_bound_text(std::mt19937_64& rng) {
  const int kind = static_cast<int>(rng() % 4);
  auto sym = [&](int64_t m) { return static_cast<int64_t>(rng() % static_cast<uint64_t>(2 * m + 1)) - m; };
  if (kind == 0) return std::to_string(sym(60));
  if (kind == 3) {  // mantissa with 0-2 decimals, exponent -4..2
    const int n_frac = static_cast<int>(rng() % 3);
    const std::string e = std::string(rng() % 2 ? "e" : "E") + (rng() % 3 == 0 ? "+" : "") ;
    const int exp = static_cast<int>(rng() % 7) - 4;
    std::string et = e;
    if (exp < 0) et = (rng() % 2 ? "e-" : "E-");
    return fixed_text(sym(999), n_frac) + et + std::to_string(exp < 0 ? -exp : exp);
  }
  const int n_frac = 1 + static_cast<int>(rng() % 4);
  int64_t m = 1;
  for (int k = 0; k < n_frac; ++k) m *= 10;
  return fixed_text(sym(30 * m), n_frac);
}

// For random bound pairs, every candidate text without exponent matches exactly when its
// value is within the bounds, both as an exact decimal and as a double (what a validator
// reading doubles sees); a text with an exponent matches only if it is within them.
TEST(JsonSchema, NumberRangesAreExact) {
  std::mt19937_64 rng(11);
  int n_schemas = 0, n_texts = 0, n_accepted = 0, n_exp_accepted = 0;
  for (int round = 0; round < 160; ++round) {
    RangeSide lo, hi;
    const int shape = static_cast<int>(rng() % 6);  // 0: lower only, 1: upper only, else both
    if (shape != 1) lo = {random_bound_text(rng), rng() % 3 == 0};
    if (shape != 0) hi = {random_bound_text(rng), rng() % 3 == 0};
    if (shape >= 2) {
      if (scaled_value(lo.text) > scaled_value(hi.text)) std::swap(lo.text, hi.text);
      if (rng() % 8 == 0) hi.text = lo.text;  // a single value (or none)
    }
    const std::string schema = std::string(R"({"type": "number")") +
                               (lo.text.empty() ? "" : std::string(lo.exclusive ? R"(, "exclusiveMinimum": )" : R"(, "minimum": )") + lo.text) +
                               (hi.text.empty() ? "" : std::string(hi.exclusive ? R"(, "exclusiveMaximum": )" : R"(, "maximum": )") + hi.text) + "}";
    auto in_range = [&](const std::string& t) {
      const Scaled v = scaled_value(t);
      const double d = std::strtod(t.c_str(), nullptr);
      bool ok = true;
      if (!lo.text.empty()) {
        const Scaled b = scaled_value(lo.text);
        const double bd = std::strtod(lo.text.c_str(), nullptr);
        ok = ok && (lo.exclusive ? v > b && d > bd : v >= b && d >= bd);
      }
      if (!hi.text.empty()) {
        const Scaled b = scaled_value(hi.text);
        const double bd = std::strtod(hi.text.c_str(), nullptr);
        ok = ok && (hi.exclusive ? v < b && d < bd : v <= b && d <= bd);
      }
      return ok;
    };
    const bool empty = !lo.text.empty() && !hi.text.empty() && scaled_value(lo.text) == scaled_value(hi.text) &&
                       (lo.exclusive || hi.exclusive);
    auto gbnf = json_schema_to_gbnf(schema);
    if (empty) {
      EXPECT_FALSE(gbnf.ok()) << schema;
      continue;
    }
    auto g = schema_grammar(schema);
    ASSERT_NE(g, nullptr) << schema;
    ++n_schemas;
    // Candidates: grids with 0-4 fraction digits (and trailing zeros) around each bound and
    // zero, -0 forms, texts one unit of the 16th fraction digit off each bound, exponents.
    std::set<std::string> plain, with_exp;
    std::vector<Scaled> anchors = {0};
    for (const RangeSide* side : {&lo, &hi})
      if (!side->text.empty()) anchors.push_back(scaled_value(side->text));
    Scaled one = 1;
    for (int k = 0; k < kScale; ++k) one *= 10;
    for (const Scaled a : anchors) {
      for (int n_frac = 0; n_frac <= 4; ++n_frac) {
        Scaled unit = one;
        for (int k = 0; k < n_frac; ++k) unit /= 10;
        const auto center = static_cast<int64_t>(a / unit);
        for (int64_t v = center - 12; v <= center + 12; ++v) {
          plain.insert(fixed_text(v, n_frac));
          if (n_frac < 4) plain.insert(fixed_text(v, n_frac) + (n_frac ? "0" : ".0"));  // a trailing zero
          if (v != 0 && n_frac > 0) with_exp.insert(std::to_string(v) + "e-" + std::to_string(n_frac));
          if (v != 0 && v % 10 == 0) with_exp.insert(fixed_text(v / 10, n_frac) + "E+1");
        }
      }
      // The 16th fraction digit either side of a, and a itself with 16 digits.
      const Scaled step = one / 10000000000000000LL;
      for (int d = -2; d <= 2; ++d) {
        const Scaled v = a + d * step;
        const Scaled mag = v < 0 ? -v : v;
        const auto int_part = static_cast<int64_t>(mag / one);
        const auto frac16 = static_cast<int64_t>((mag % one) / step);
        std::string f = std::to_string(frac16);
        f = std::string(16 - f.size(), '0') + f;
        plain.insert((v < 0 ? "-" : "") + std::to_string(int_part) + "." + f);
      }
    }
    for (const char* t : {"-0", "-0.0", "0.00", "-0.000"}) plain.insert(t);
    // Some values well inside the range.
    for (int k = 0; k < 40; ++k) {
      const int n_frac = static_cast<int>(rng() % 5);
      plain.insert(fixed_text(static_cast<int64_t>(rng() % 200001) - 100000, n_frac));
    }
    for (const std::string& t : plain) {
      const bool want = in_range(t);
      EXPECT_EQ(matches(g, t), want) << schema << "  " << t;
      ++n_texts;
      n_accepted += want;
    }
    for (const std::string& t : with_exp) {
      if (!matches(g, t)) continue;
      EXPECT_TRUE(in_range(t)) << schema << "  " << t;
      ++n_exp_accepted;
    }
  }
  EXPECT_GT(n_schemas, 120);
  EXPECT_GT(n_accepted, n_texts / 10);
  std::printf("%d schemas, %d texts without exponent (%d in range), %d with exponent accepted\n", n_schemas, n_texts,
              n_accepted, n_exp_accepted);
}

// A positive decimal text as digits (no leading or trailing zeros) times 10^exp.
std::pair<std::string, int> digits_and_exponent(const std::string& text) {
  std::string digits;
  int point = -1;
  size_t i = 0;
  for (; i < text.size() && text[i] != 'e' && text[i] != 'E'; ++i) {
    if (text[i] == '.') point = static_cast<int>(digits.size());
    else digits += text[i];
  }
  if (point < 0) point = static_cast<int>(digits.size());
  int exp = (i < text.size() ? std::stoi(text.substr(i + 1)) : 0) + point - static_cast<int>(digits.size());
  while (!digits.empty() && digits.back() == '0') {
    digits.pop_back();
    ++exp;
  }
  const size_t nz = digits.find_first_not_of('0');
  digits = nz == std::string::npos ? "" : digits.substr(nz);
  return {digits, exp};
}

// Exact order of two positive decimal texts.
int compare_positive(const std::string& a, const std::string& b) {
  auto [da, ea] = digits_and_exponent(a);
  auto [db, eb] = digits_and_exponent(b);
  if (da.empty() || db.empty()) return da.empty() == db.empty() ? 0 : da.empty() ? -1 : 1;
  const int len_a = static_cast<int>(da.size()) + ea, len_b = static_cast<int>(db.size()) + eb;  // leading digit position
  if (len_a != len_b) return len_a < len_b ? -1 : 1;
  const size_t n = std::max(da.size(), db.size());
  da.resize(n, '0');
  db.resize(n, '0');
  return da < db ? -1 : da > db ? 1 : 0;
}

// Ranges narrower than json-number can write without exponent: the texts with the exponent
// the grammar picks match exactly when within the bounds; no text out of them matches.
TEST(JsonSchema, NarrowNumberRangesUseOneExponentExactly) {
  std::mt19937_64 rng(5);
  for (int round = 0; round < 30; ++round) {
    const int e = 17 + static_cast<int>(rng() % 60);  // bounds around 10^-e
    auto mantissa = [&] { return fixed_text(1 + static_cast<int64_t>(rng() % 4000), 2); };
    std::string lo = mantissa(), hi = mantissa();
    if (compare_positive(lo, hi) > 0) std::swap(lo, hi);
    const bool lo_ex = rng() % 2, hi_ex = rng() % 2;
    if (lo == hi && (lo_ex || hi_ex)) continue;
    const std::string lo_text = lo + "e-" + std::to_string(e), hi_text = hi + "e-" + std::to_string(e);
    const std::string schema = std::string(R"({"type": "number", ")") + (lo_ex ? "exclusiveMinimum" : "minimum") +
                               "\": " + lo_text + ", \"" + (hi_ex ? "exclusiveMaximum" : "maximum") + "\": " + hi_text + "}";
    auto g = schema_grammar(schema);
    ASSERT_NE(g, nullptr) << schema;
    auto in_range = [&](const std::string& t) {
      const int a = compare_positive(t, lo_text), b = compare_positive(t, hi_text);
      const double d = std::strtod(t.c_str(), nullptr), dl = std::strtod(lo_text.c_str(), nullptr),
                   dh = std::strtod(hi_text.c_str(), nullptr);
      return (lo_ex ? a > 0 && d > dl : a >= 0) && (hi_ex ? b < 0 && d < dh : b <= 0);
    };
    int n_exact_exponents = 0;
    for (int shift = -3; shift <= 3; ++shift) {  // texts m e-(e + shift), m on grids around the bounds
      std::set<std::string> texts;
      for (const std::string& b : {lo, hi}) {
        const auto [digits, exp] = digits_and_exponent(b + "e" + std::to_string(shift));  // b * 10^shift
        for (int n_frac = 0; n_frac <= 4; ++n_frac) {
          // b * 10^shift on a grid of 10^-n_frac: as an integer count of 10^-n_frac.
          const int scale = exp + n_frac;
          if (scale < -8 || scale > 8) continue;
          int64_t center = std::stoll(digits);
          for (int k = 0; k < scale; ++k) center *= 10;
          for (int k = 0; k < -scale; ++k) center /= 10;
          for (int64_t v = std::max<int64_t>(center - 6, 0); v <= center + 6; ++v)
            texts.insert(fixed_text(v, n_frac) + "e-" + std::to_string(e + shift));
        }
      }
      int n_wrong = 0, n_in = 0;
      for (const std::string& t : texts) {
        const bool m = matches(g, t), want = in_range(t);
        if (m) {
          EXPECT_TRUE(want) << schema << "  " << t;
        }
        n_wrong += m != want;
        n_in += want;
      }
      if (n_wrong == 0 && n_in > 0) ++n_exact_exponents;
    }
    EXPECT_GE(n_exact_exponents, 1) << schema;
  }
}

// Integers (and numbers) with multipleOf k: exactly the multiples of k within the bounds.
TEST(JsonSchema, IntegerMultiplesAreExact) {
  struct Case {
    int64_t k;
    std::optional<int64_t> lo, hi;
  };
  const Case cases[] = {{2, 0, 100},   {3, -50, 50},     {5, 1, 99},      {7, -200, -3}, {10, std::nullopt, 1000},
                        {12, 5, std::nullopt}, {25, -1000, 1000}, {100, 0, 12345}, {1000, -5000, 100000},
                        {9, std::nullopt, std::nullopt}, {4, 13, 17}, {60, 0, 3600}, {97, -100000, 100000},
                        {768, -50000, std::nullopt}};
  for (const Case& c : cases) {
    std::string schema = R"({"type": "integer", "multipleOf": )" + std::to_string(c.k);
    if (c.lo) schema += R"(, "minimum": )" + std::to_string(*c.lo);
    if (c.hi) schema += R"(, "maximum": )" + std::to_string(*c.hi);
    schema += "}";
    auto g = schema_grammar(schema);
    ASSERT_NE(g, nullptr) << schema;
    const int64_t from = c.lo ? *c.lo - 3 * c.k : -3000, to = c.hi ? *c.hi + 3 * c.k : 3000;
    for (int64_t v = from; v <= to; v += (to - from > 20000 ? 7 : 1)) {
      const bool want = (!c.lo || v >= *c.lo) && (!c.hi || v <= *c.hi) && v % c.k == 0;
      EXPECT_EQ(matches(g, std::to_string(v)), want) << schema << "  " << v;
    }
    if (!c.hi) {  // far out: 16-digit multiples and not
      EXPECT_TRUE(matches(g, std::to_string(c.k * 1000000000000LL)));
      EXPECT_FALSE(matches(g, std::to_string(c.k * 1000000000000LL + 1)));
    }
  }
  expect_texts(R"({"type": "number", "multipleOf": 5, "minimum": 0.5, "exclusiveMaximum": 20})", {"5", "10", "15"},
               {"0", "20", "2.5", "7"});
  expect_texts(R"({"multipleOf": 3})", {"-3", "0", "999"}, {"1", "1.5"});
  struct Refusal {
    const char* schema;
    const char* want;
  };
  const Refusal refusals[] = {
      {R"({"type": "integer", "multipleOf": 7, "minimum": 1, "maximum": 6})", "/: no multiple of 7 lies within"},
      {R"({"type": "integer", "multipleOf": 0})", "/multipleOf: must be a number above 0"},
      {R"({"type": "integer", "multipleOf": 2.5})", "/multipleOf: only an integer multipleOf is supported"},
      {R"({"type": "integer", "multipleOf": 1024})", "/multipleOf: above 1000 is not supported"},
      {R"({"type": "integer", "multipleOf": 101})", "/multipleOf: 101 is not supported (its factor prime to 10"},
  };
  for (const Refusal& r : refusals) {
    auto g = json_schema_to_gbnf(r.schema);
    ASSERT_FALSE(g.ok()) << r.schema;
    EXPECT_NE(g.message().find(r.want), std::string::npos) << r.schema << " -> " << g.message();
  }
}

TEST(JsonSchema, Formats) {
  expect_texts(R"({"type": "string", "format": "date"})", {"\"2024-12-31\"", "\"1999-04-30\"", "\"2023-02-28\""},
               {"\"2024-13-01\"", "\"2024-04-31\"", "\"2023-02-30\"", "\"24-01-01\""});
  expect_texts(R"({"type": "string", "format": "date-time"})",
               {"\"2024-01-02T03:04:05Z\"", "\"2024-01-02T23:59:59.123+05:30\""}, {"\"2024-01-02T24:00:00Z\"", "\"2024-01-02 03:04:05Z\""});
  expect_texts(R"({"type": "string", "format": "uuid"})", {"\"123e4567-e89b-12d3-a456-426614174000\""},
               {"\"123e4567e89b12d3a456426614174000\""});
  expect_texts(R"({"type": "string", "format": "email"})", {"\"a.b@example.com\"", "\"x@y.io\""},
               {"\"a@b\"", "\"@example.com\""});
  expect_texts(R"({"type": "string", "format": "ipv4"})", {"\"0.0.0.0\"", "\"192.168.1.255\"", "\"10.0.99.200\""},
               {"\"256.1.1.1\"", "\"01.2.3.4\"", "\"1.2.3\"", "\"1.2.3.4.5\"", "\"1.2.3.\""});
  expect_texts(R"({"type": "string", "format": "hostname"})", {"\"localhost\"", "\"api.example-1.com\"", "\"a\""},
               {"\"-a.com\"", "\"a-.com\"", "\"a..b\"", "\"a_b.com\"", "\"\""});
  expect_texts(R"({"type": "string", "format": "ipv6"})",
               {"\"2001:0db8:85a3:0000:0000:8a2e:0370:7334\"", "\"0:0:0:0:0:0:0:1\""},
               {"\"2001:db8::1\"", "\"1:2:3:4:5:6:7\"", "\"12345:0:0:0:0:0:0:1\"", "\"g:0:0:0:0:0:0:1\""});
  expect_texts(R"({"type": "string", "format": "duration"})",
               {"\"P1D\"", "\"P3Y6M4DT12H30M5S\"", "\"PT36H\"", "\"P2W\"", "\"PT1M\"", "\"P1Y\"", "\"P1M2D\""},
               {"\"P\"", "\"PT\"", "\"P1D2M\"", "\"P1Y2D\"", "\"PT1H2S\"", "\"P1W2D\"", "\"1D\""});
  expect_texts(R"({"type": "string", "format": "uri"})",
               {"\"https://example.com\"", "\"http://a.b/c/d.html\"", "\"ftp://h/x?y=1&z=2\""},
               {"\"example.com\"", "\"https://\"", "\"https://a b\"", "\"mailto:x@y\""});
}

TEST(JsonSchema, ObjectsKeepOrderRequiredAndOptional) {
  const std::string mixed =
      R"({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}, "c": {"type": "integer"}},
          "required": ["b"], "additionalProperties": false})";
  expect_texts(mixed, {"{\"b\":1}", "{\"a\":1,\"b\":2}", "{ \"b\" : 1 , \"c\" : 3 }", "{\"a\":1,\"b\":2,\"c\":3}"},
               {"{}", "{\"a\":1}", "{\"c\":1,\"b\":1}", "{\"b\":1,\"b\":1}", "{\"b\":1,}", "{\"b\":1,\"d\":2}"});
  const std::string optional =
      R"({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}, "c": {"type": "integer"}}})";
  expect_texts(optional, {"{}", "{\"a\":1}", "{\"c\":1}", "{\"a\":1,\"c\":2}", "{\"b\":1,\"c\":2}"},
               {"{\"c\":1,\"a\":1}", "{,}", "{\"a\":1,}"});
  const std::string extra =
      R"({"type": "object", "properties": {"ab": {"type": "integer"}}, "required": ["ab"],
          "additionalProperties": {"type": "boolean"}})";
  expect_texts(extra, {"{\"ab\":1}", "{\"ab\":1,\"a\":true}", "{\"ab\":1,\"abc\":false,\"x\":true}", "{\"ab\":1,\"\":true}"},
               {"{\"ab\":1,\"ab\":true}", "{\"ab\":1,\"x\":1}", "{\"x\":true}"});
  const std::string only_extra = R"({"type": "object", "additionalProperties": {"type": "integer"}})";
  expect_texts(only_extra, {"{}", "{\"k\":1,\"j\":2}"}, {"{\"k\":\"v\"}"});
}

TEST(JsonSchema, ArraysPrefixItemsAndCounts) {
  expect_texts(R"({"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 3})",
               {"[1]", "[1,2,3]", "[ 1 , 2 ]"}, {"[]", "[1,2,3,4]", "[1,]", "[\"a\"]"});
  expect_texts(R"({"type": "array", "items": {"type": "integer"}})", {"[]", "[5]", "[1,2,3,4,5,6]"}, {"[,]"});
  expect_texts(R"({"type": "array", "prefixItems": [{"type": "string", "maxLength": 2}, {"type": "boolean"}], "items": false})",
               {"[]", "[\"a\"]", "[\"a\",true]"}, {"[true]", "[\"a\",true,1]"});
  expect_texts(R"({"type": "array", "prefixItems": [{"type": "integer"}], "items": {"type": "null"}, "minItems": 2, "maxItems": 3})",
               {"[1,null]", "[1,null,null]"}, {"[1]", "[null,null]", "[1,null,null,null]"});
}

TEST(JsonSchema, RefsDefsRecursionAndAllOf) {
  const std::string tree = R"({"$ref": "#/$defs/node", "$defs": {"node": {"type": "object",
      "properties": {"v": {"type": "integer"}, "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2}},
      "required": ["v"], "additionalProperties": false}}})";
  expect_texts(tree, {"{\"v\":1}", "{\"v\":1,\"kids\":[{\"v\":2},{\"v\":3,\"kids\":[]}]}"}, {"{\"kids\":[]}"});
  const std::string all_of = R"({"allOf": [{"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
      {"properties": {"b": {"type": "boolean"}}, "required": ["b"]}]})";
  expect_texts(all_of, {"{\"a\":1,\"b\":true}"}, {"{\"a\":1}", "{\"b\":true}"});
  expect_texts(R"({"type": "object", "properties": {"self": {"$ref": "#"}}})", {"{}", "{\"self\":{\"self\":{}}}"}, {"{\"self\":1}"});
}

// enum / const values are checked against the keywords beside them: a value the schema
// excludes is never generated, and no value left is an error (held-out sweep, s17).
TEST(JsonSchema, EnumAndConstHonourTheKeywordsBesideThem) {
  expect_texts(R"({"type": "string", "enum": ["a", "b", 3]})", {"\"a\"", "\"b\""}, {"3"});
  expect_texts(R"({"enum": ["short", "muchlonger", 7], "maxLength": 5})", {"\"short\"", "7"}, {"\"muchlonger\""});
  expect_texts(R"({"type": "integer", "enum": [1, 2.0, 2.5, "1"], "minimum": 2})", {"2.0"}, {"1", "2.5", "\"1\""});
  expect_texts(R"({"type": "string", "enum": ["x", 3], "nullable": true})", {"\"x\"", "null"}, {"3"});
  expect_texts(R"({"type": "array", "enum": [[1], [1, 2, 3]], "maxItems": 2})", {"[1]"}, {"[1,2,3]"});
  expect_texts(R"({"const": "\u00e9t\u00e9", "type": "string", "maxLength": 3})", {"\"\xC3\xA9t\xC3\xA9\""}, {});
  struct Case {
    const char* schema;
    const char* want;
  };
  const Case cases[] = {
      {R"({"type": "integer", "const": "x"})", "/: no 'const' value satisfies the keywords beside it"},
      {R"({"type": "string", "enum": [1, 2]})", "/: no 'enum' value satisfies"},
      {R"({"enum": ["a"], "const": "b"})", "not among the 'enum' values"},
      {R"({"enum": ["a", "b"], "anyOf": [{"const": "a"}]})", "'anyOf' beside 'enum' is not supported"},
      {R"({"const": "2020-01-01", "format": "date"})", "'format' beside 'const' is not supported"},
  };
  for (const Case& c : cases) {
    auto r = json_schema_to_gbnf(c.schema);
    ASSERT_FALSE(r.ok()) << c.schema;
    EXPECT_NE(r.message().find(c.want), std::string::npos) << c.schema << " -> " << r.message();
  }
}

// A required key missing from properties takes additionalProperties' schema, and is an
// error where additionalProperties is false; in allOf, a part's additionalProperties false
// admits only that part's own properties (JSON Schema's rule, not the merged object's).
TEST(JsonSchema, RequiredKeysOutsidePropertiesAndClosedAllOfParts) {
  expect_texts(R"({"type": "object", "required": ["zz"], "additionalProperties": {"type": "integer"}})",
               {"{\"zz\":1}"}, {"{\"zz\":\"x\"}", "{}"});
  auto r = json_schema_to_gbnf(R"({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a", "zz"],
      "additionalProperties": false})");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("/required: 'zz' is required but not in properties"), std::string::npos) << r.message();
  r = json_schema_to_gbnf(R"({"allOf": [{"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}],
      "additionalProperties": false})");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("excludes 'a', which allOf requires"), std::string::npos) << r.message();
  expect_texts(R"({"allOf": [{"properties": {"a": {"type": "integer"}}},
      {"properties": {"b": {"type": "integer"}}, "required": ["b"], "additionalProperties": false}]})",
               {"{\"b\":1}"}, {"{\"a\":1,\"b\":1}", "{\"a\":1}"});
}

TEST(JsonSchema, AnyValueForEmptySchemaAndJsonObject) {
  expect_texts("{}", {"1", "\"s\"", "[1,{\"a\":null}]", "{\"k\":[true,false]}"}, {"", "[1,", "{'a':1}"});
  auto g = CompiledGrammar::from_gbnf(any_json_gbnf(true), byte_vocab());
  ASSERT_TRUE(g.ok()) << g.message();
  EXPECT_TRUE(matches(*g, "{\"a\": [1, \"x\"]}"));
  EXPECT_FALSE(matches(*g, "[1]"));
}

TEST(JsonSchema, UnsupportedKeywordsAreErrorsNamingThem) {
  struct Case {
    const char* schema;
    const char* want;
  };
  const Case cases[] = {
      {R"j({"type": "string", "pattern": "^a(?=b)"})j", "/pattern: pattern '^a(?=b)': lookahead '(?=' is not supported"},
      {R"({"type": "object", "properties": {"tags": {"type": "array", "uniqueItems": true}}})",
       "/properties/tags: unsupported keyword 'uniqueItems'"},
      {R"({"type": "number", "multipleOf": 0.01})", "/multipleOf: only an integer multipleOf is supported"},
      {R"({"not": {"type": "null"}})", "unsupported keyword 'not'"},
      {R"({"type": "string", "format": "iri"})", "/format: unsupported format 'iri'"},
      {R"({"$ref": "https://example.com/s.json"})", "only references inside the schema"},
      {R"({"$ref": "#/$defs/missing"})", "points at nothing"},
      {R"({"type": "object", "properties": {"a": false}, "required": ["a"]})", "/properties/a: the schema false"},
      {R"({"type": "strin"})", "unknown type 'strin'"},
      {R"({"type": "string", "maxLength": 1, "minLength": 2})", "maxLength is below minLength"},
      {R"({"type": "array", "items": [{"type": "null"}]})", "use prefixItems"},
      {R"({"type": "integer", "minimum": 5, "maximum": 4})", "no integer lies within"},
      {R"({"anyOf": [{"type": "null"}], "type": "string"})", "'type' beside 'anyOf'"},
      {"[1, 2]", "a schema must be an object or a boolean"},
      {"{\"type\": ", "not valid JSON"},
  };
  for (const Case& c : cases) {
    auto r = json_schema_to_gbnf(c.schema);
    ASSERT_FALSE(r.ok()) << c.schema;
    EXPECT_NE(r.message().find(c.want), std::string::npos) << c.schema << " -> " << r.message();
    EXPECT_EQ(r.message().rfind("json_schema: ", 0), 0u) << r.message();
  }
  // Annotations are fine.
  EXPECT_TRUE(json_schema_to_gbnf(R"({"title": "T", "description": "d", "$schema": "x", "examples": [1],
      "type": "integer", "default": 3, "x-vendor": 1})").ok());
}

// Random texts from the grammar parse as JSON and satisfy the schema's constraints.
TEST(JsonSchema, RandomTextsFromTheGrammarAreValid) {
  const std::string schema = R"({"type": "object", "properties": {
      "name": {"type": "string", "minLength": 1, "maxLength": 8},
      "age": {"type": "integer", "minimum": 0, "maximum": 150},
      "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "maxItems": 3},
      "score": {"type": "number", "minimum": -1, "maximum": 1}},
      "required": ["name", "age"], "additionalProperties": false})";
  std::vector<std::string> extra;
  for (const char* t : {"{\"", "\":", "\",", "\"}", "name", "age", "tags", "score", "[\"", "\"]", ", ", "12", "0.", "-1"})
    extra.push_back(t);
  auto vocab = byte_vocab(extra);
  auto gbnf = json_schema_to_gbnf(schema);
  ASSERT_TRUE(gbnf.ok()) << gbnf.message();
  auto g = CompiledGrammar::from_gbnf(*gbnf, vocab);
  ASSERT_TRUE(g.ok()) << g.message();
  std::mt19937_64 rng(3);
  std::vector<uint64_t> mask((static_cast<size_t>(vocab->n_vocab()) + 63) / 64);
  int n_done = 0;
  for (int walk = 0; walk < 60; ++walk) {
    GrammarMatcher m(*g);
    std::string text;
    for (int step = 0; step < 400 && !m.terminated(); ++step) {
      ASSERT_TRUE(m.fill_mask(mask));
      const std::vector<int32_t> allowed = testing::allowed_ids(mask, vocab->n_vocab());
      ASSERT_FALSE(allowed.empty()) << text;
      const int32_t pick = allowed[rng() % allowed.size()];
      ASSERT_TRUE(m.accept_token(pick));
      text += vocab->bytes(pick);
    }
    if (!m.terminated()) continue;
    ++n_done;
    const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << text;
    ASSERT_TRUE(j.is_object()) << text;
    ASSERT_TRUE(j.contains("name") && j["name"].is_string()) << text;
    EXPECT_GE(j["name"].get<std::string>().size(), 1u) << text;
    ASSERT_TRUE(j.contains("age") && j["age"].is_number_integer()) << text;
    EXPECT_GE(j["age"].get<int64_t>(), 0) << text;
    EXPECT_LE(j["age"].get<int64_t>(), 150) << text;
    if (j.contains("tags")) {
      EXPECT_LE(j["tags"].size(), 3u) << text;
    }
    if (j.contains("score")) {
      EXPECT_GE(j["score"].get<double>(), -1.0) << text;
      EXPECT_LE(j["score"].get<double>(), 1.0) << text;
    }
    for (auto it = j.begin(); it != j.end(); ++it)
      EXPECT_TRUE(it.key() == "name" || it.key() == "age" || it.key() == "tags" || it.key() == "score") << text;
  }
  EXPECT_GT(n_done, 30);
}

}  // namespace
}  // namespace lumen::grammar
