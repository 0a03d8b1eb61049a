// gguf::parse_ordered_json: the same value as nlohmann's ordered parser, keys in the order
// written, duplicates as nlohmann keeps them, errors with the byte, and linear time.
#include "gguf/json_util.h"

#include <gtest/gtest.h>

#include <ctime>
#include <string>

namespace lumen::gguf {
namespace {

using OJson = nlohmann::ordered_json;

TEST(OrderedJson, SameValueAndKeyOrderAsNlohmann) {
  const char* texts[] = {
      R"({"z": 1, "a": [true, null, -2, 18446744073709551615, 1.5e3, "x\u00e9"], "m": {"q": {}, "b": []}})",
      R"([1, {"b": 2, "a": 1}, [[]], ""])",
      "\"just a string\"",
      "-0.0",
      R"({"k": 1, "j": 2, "k": 3})",  // a key twice: its first place, its last value
  };
  for (const char* text : texts) {
    auto got = parse_ordered_json(text);
    ASSERT_TRUE(got.ok()) << text << ": " << got.message();
    const OJson want = OJson::parse(text);
    EXPECT_EQ(got->dump(), want.dump()) << text;
  }
  auto dup = parse_ordered_json(R"({"k": 1, "j": 2, "k": 3})");
  EXPECT_EQ(dup->dump(), R"({"k":3,"j":2})");
}

TEST(OrderedJson, ErrorsNameTheByte) {
  for (const char* text : {"", "{", R"({"a": 1,})", "[1 2]", "{} x", R"({"a" 1})"}) {
    auto got = parse_ordered_json(text);
    ASSERT_FALSE(got.ok()) << text;
    EXPECT_NE(got.message().find("not valid JSON (error at byte "), std::string::npos) << got.message();
  }
  EXPECT_EQ(parse_ordered_json("[1 2]").message(), "not valid JSON (error at byte 4)");
}

// nlohmann's ordered parser takes about a minute on this (each key scans the keys before it).
TEST(OrderedJson, ManyKeysParseInLinearTime) {
  std::string text = "{";
  constexpr int kKeys = 200000;
  for (int i = 0; i < kKeys; ++i) text += (i ? ",\"k" : "\"k") + std::to_string(i) + "\":" + std::to_string(i);
  text += "}";
  // CPU time of this thread, not wall time: a loaded machine (other builds, tests) must not
  // make a linear parse look quadratic. Quadratic insertion of 200,000 keys is ~2e10 key
  // comparisons: minutes.
  auto thread_cpu_s = [] {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
  };
  const double t0 = thread_cpu_s();
  auto got = parse_ordered_json(text);
  const double s = thread_cpu_s() - t0;
  ASSERT_TRUE(got.ok());
  ASSERT_EQ(got->size(), static_cast<size_t>(kKeys));
  EXPECT_EQ(got->begin().key(), "k0");
  EXPECT_EQ((*got)["k199999"], 199999);
  EXPECT_LT(s, 5.0) << "200,000 keys took " << s << " s of CPU";  // ~0.2 s here, under load
}

}  // namespace
}  // namespace lumen::gguf
