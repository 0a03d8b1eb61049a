#include "convert/imatrix_file.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <unistd.h>

namespace lumen::convert {
namespace {

Imatrix sample() {
  Imatrix m;
  m.entries["blk.0.attn_q.weight"] = ImatrixEntry{3, {0.3f, 6.0f, 0.0f, 1.5f}};
  m.entries["blk.0.ffn_down.weight"] = ImatrixEntry{3, {1.0f, 2.0f}};
  m.n_chunks = 3;
  m.dataset = "calib.txt";
  return m;
}

void put_i32(std::string* s, int32_t v) { s->append(reinterpret_cast<const char*>(&v), 4); }

TEST(ImatrixFile, RoundTripsAndDividesByCalls) {
  const Imatrix m = sample();
  const std::string bytes = serialize_imatrix(m);
  // Layout: count, then per entry (len, name, n_calls, n_values, values), then chunks, dataset.
  int32_t n_entries;
  std::memcpy(&n_entries, bytes.data(), 4);
  EXPECT_EQ(n_entries, 2);
  auto back = parse_imatrix(bytes);
  ASSERT_TRUE(back.ok()) << back.message();
  EXPECT_EQ(back->entries.size(), 2u);
  EXPECT_EQ(back->n_chunks, 3);
  EXPECT_EQ(back->dataset, "calib.txt");
  EXPECT_EQ(back->entries.at("blk.0.attn_q.weight").values, m.entries.at("blk.0.attn_q.weight").values);
  const std::vector<float> w = back->weights("blk.0.attn_q.weight");
  ASSERT_EQ(w.size(), 4u);
  EXPECT_EQ(w[0], 0.3f / 3.0f);
  EXPECT_EQ(w[1], 2.0f);
  EXPECT_TRUE(back->weights("output.weight").empty());
  // Without the optional trailer (older files) it still reads.
  std::string old = bytes.substr(0, bytes.size() - (4 + 4 + 9));
  auto old_m = parse_imatrix(old);
  ASSERT_TRUE(old_m.ok()) << old_m.message();
  EXPECT_EQ(old_m->n_chunks, 0);

  const std::string path = ::testing::TempDir() + "lumen_imatrix_" + std::to_string(::getpid()) + ".dat";
  ASSERT_TRUE(write_imatrix(path, m).ok());
  auto from_file = read_imatrix(path);
  ASSERT_TRUE(from_file.ok()) << from_file.message();
  EXPECT_EQ(serialize_imatrix(*from_file), bytes);
  std::remove(path.c_str());
  auto missing = read_imatrix(path);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.message().find("cannot open imatrix file"), std::string::npos) << missing.message();
}

void expect_error(const std::string& bytes, const std::string& what) {
  auto m = parse_imatrix(bytes);
  ASSERT_FALSE(m.ok()) << "expected an error containing '" << what << "'";
  EXPECT_NE(m.message().find(what), std::string::npos) << m.message();
}

TEST(ImatrixFileFuzz, HostileFilesGetClearErrors) {
  const std::string good = serialize_imatrix(sample());
  // Every truncation of the entries is an error naming what is missing (the optional trailer
  // may end early only at its start).
  for (size_t n = 0; n + 17 < good.size(); ++n) {
    auto m = parse_imatrix(good.substr(0, n));
    EXPECT_FALSE(m.ok()) << "truncated at " << n;
  }
  expect_error("", "truncated: no entry count");
  std::string s;
  put_i32(&s, 0);
  expect_error(s, "entry count 0");
  s.clear();
  put_i32(&s, 1);
  put_i32(&s, -5);
  expect_error(s, "name length -5");
  s.clear();
  put_i32(&s, 1);
  put_i32(&s, 1 << 30);
  expect_error(s, "name length 1073741824");
  auto entry = [](const std::string& name, int32_t n_calls, int32_t n_values, std::vector<float> values) {
    std::string e;
    put_i32(&e, static_cast<int32_t>(name.size()));
    e += name;
    put_i32(&e, n_calls);
    put_i32(&e, n_values);
    e.append(reinterpret_cast<const char*>(values.data()), values.size() * 4);
    return e;
  };
  s.clear();
  put_i32(&s, 1);
  s += entry("w", 1, 1 << 28, {1.0f});
  expect_error(s, "values do not fit");
  s.clear();
  put_i32(&s, 1);
  s += entry("w", 1, 0, {});
  expect_error(s, "0 values do not fit");
  s.clear();
  put_i32(&s, 1);
  s += entry("w", -1, 1, {1.0f});
  expect_error(s, "negative call count");
  for (float bad : {NAN, INFINITY, -1.0f}) {
    s.clear();
    put_i32(&s, 1);
    s += entry("w", 1, 2, {1.0f, bad});
    expect_error(s, "value 1 is");
  }
  s.clear();
  put_i32(&s, 2);
  s += entry("w", 1, 1, {1.0f});
  s += entry("w", 1, 1, {2.0f});
  expect_error(s, "duplicate name 'w'");
  s = good + "x";
  expect_error(s, "unexpected trailing bytes");
  s = good.substr(0, good.size() - 9);  // dataset name cut
  expect_error(s, "dataset name length 9 does not fit");
  // Random byte flips never crash (ASan) and either parse or fail with a message.
  uint32_t state = 12345;
  for (int iter = 0; iter < 2000; ++iter) {
    std::string f = good;
    for (int k = 0; k < 3; ++k) {
      state = state * 1664525u + 1013904223u;
      f[(state >> 8) % f.size()] = static_cast<char>(state >> 24);
    }
    auto m = parse_imatrix(f);
    if (!m.ok()) {
      EXPECT_FALSE(m.message().empty());
    }
  }
}

}  // namespace
}  // namespace lumen::convert
