#include "grammar/json_schema.h"

#include <gtest/gtest.h>

#include <random>

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

TEST(JsonSchema, NumberRangesWithIntegerBounds) {
  expect_texts(R"({"type": "number", "minimum": 0, "maximum": 10})", {"0", "3.5", "9.999", "10", "10.00"},
               {"-1", "10.5", "11", "1e3", "-0.5"});
  expect_texts(R"({"type": "number", "minimum": -2, "maximum": -1})", {"-2", "-1.5", "-1", "-2.0"},
               {"-2.5", "-0.5", "0"});
  auto bad = json_schema_to_gbnf(R"({"type": "number", "minimum": 0.2, "maximum": 0.8})");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("enclose an integer"), std::string::npos) << bad.message();
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
      {R"({"type": "integer", "multipleOf": 3})", "unsupported keyword 'multipleOf'"},
      {R"({"not": {"type": "null"}})", "unsupported keyword 'not'"},
      {R"({"type": "string", "format": "hostname"})", "/format: unsupported format 'hostname'"},
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
      std::vector<int32_t> allowed;
      for (int32_t id = 0; id < vocab->n_vocab(); ++id)
        if ((mask[id / 64] >> (id % 64)) & 1) allowed.push_back(id);
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
