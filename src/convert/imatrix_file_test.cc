#include "convert/imatrix_file.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <unistd.h>

#include <vector>

#include "gguf/gguf_writer.h"
#include "gguf/model_file.h"

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

// 2000 copies of `good` with 3 random bytes changed at or after `from` never crash (ASan) and
// either parse or fail with a message.
void expect_byte_flips_parse_or_fail(const std::string& good, size_t from, uint32_t seed) {
  uint32_t state = seed;
  for (int iter = 0; iter < 2000; ++iter) {
    std::string f = good;
    for (int k = 0; k < 3; ++k) {
      state = state * 1664525u + 1013904223u;
      f[from + (state >> 8) % (f.size() - from)] = static_cast<char>(state >> 24);
    }
    auto m = parse_imatrix(f);
    if (!m.ok()) {
      EXPECT_FALSE(m.message().empty());
    }
  }
}

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
  expect_byte_flips_parse_or_fail(good, 0, 12345);
}


// The GGUF form newer llama-imatrix writes (imatrix.gguf), built here with its layout:
// NAME.in_sum2 [columns, matrices], NAME.counts [1, matrices], NAME.in_sum (ignored) and the
// three imatrix.* keys.
struct GgufImatrixBuilder {
  gguf::GgufWriter w;
  GgufImatrixBuilder() {
    w.set("general.type", gguf::MetaValue::of_string("imatrix"));
    w.set("imatrix.datasets", gguf::MetaValue::of_string_array({"calib.txt"}));
    w.set("imatrix.chunk_count", gguf::MetaValue::of_u32(8));
    w.set("imatrix.chunk_size", gguf::MetaValue::of_u32(512));
  }
  void add(const std::string& name, std::vector<float> v, std::initializer_list<int64_t> ne, DType dtype = DType::kF32) {
    ASSERT_TRUE(w.add_tensor_copy(name, dtype, ne, std::as_bytes(std::span(v))).ok()) << name;
  }
  std::string bytes() const {
    const std::vector<std::byte> b = w.serialize();
    return std::string(reinterpret_cast<const char*>(b.data()), b.size());
  }
};

TEST(ImatrixGguf, ReadsSumsOverCountsPerMatrix) {
  GgufImatrixBuilder b;
  b.add("blk.0.attn_q.weight.in_sum2", {2, 4, 0, 8}, {4, 1});
  b.add("blk.0.attn_q.weight.counts", {4}, {1, 1});
  b.add("blk.0.attn_q.weight.in_sum", {1, -1, 0, 2}, {4, 1});
  // Two experts; the second met no calibration token: importance 1 (as llama-quantize).
  b.add("blk.0.ffn_down_exps.weight.in_sum2", {3, 6, 9, 5, 5, 5}, {3, 2});
  b.add("blk.0.ffn_down_exps.weight.counts", {3, 0}, {1, 2});
  auto m = parse_imatrix(b.bytes());
  ASSERT_TRUE(m.ok()) << m.message();
  EXPECT_EQ(m->entries.size(), 2u);
  EXPECT_EQ(m->n_chunks, 8);
  EXPECT_EQ(m->dataset, "calib.txt");
  EXPECT_EQ(m->weights("blk.0.attn_q.weight"), (std::vector<float>{0.5f, 1.0f, 0.0f, 2.0f}));
  EXPECT_EQ(m->weights("blk.0.ffn_down_exps.weight"), (std::vector<float>{1.0f, 2.0f, 3.0f, 1.0f, 1.0f, 1.0f}));
  // Division in f32, as llama-quantize: 1/3 is the f32 quotient, not a double's.
  GgufImatrixBuilder b3;
  b3.add("w.in_sum2", {1}, {1, 1});
  b3.add("w.counts", {3}, {1, 1});
  auto m3 = parse_imatrix(b3.bytes());
  ASSERT_TRUE(m3.ok()) << m3.message();
  EXPECT_EQ(m3->weights("w")[0], 1.0f / 3.0f);
  // Written back in the .dat form, llama-quantize reads the same importance.
  auto back = parse_imatrix(serialize_imatrix(*m));
  ASSERT_TRUE(back.ok()) << back.message();
  EXPECT_EQ(back->weights("blk.0.attn_q.weight"), m->weights("blk.0.attn_q.weight"));
}

// write_imatrix_gguf: a count per matrix ([1, n_mat]), sums [n_columns, n_mat]; read back
// as the same importance (an expert of count 0: 1). Sums that do not split into the
// matrices are refused.
TEST(ImatrixGguf, WritesACountPerExpert) {
  const std::string path = ::testing::TempDir() + "lumen_imatrix_gguf_" + std::to_string(::getpid()) + ".gguf";
  std::map<std::string, ImatrixSums> sums;
  sums["blk.0.attn_q.weight"] = {{2, 4, 0, 8}, {4}};
  sums["blk.0.ffn_down_exps.weight"] = {{3, 6, 9, 5, 5, 5}, {3, 0}};
  ASSERT_TRUE(write_imatrix_gguf(path, sums, "calib.txt", 8, 512).ok());
  auto m = read_imatrix(path);
  ASSERT_TRUE(m.ok()) << m.message();
  EXPECT_EQ(m->n_chunks, 8);
  EXPECT_EQ(m->weights("blk.0.attn_q.weight"), (std::vector<float>{0.5f, 1.0f, 0.0f, 2.0f}));
  EXPECT_EQ(m->weights("blk.0.ffn_down_exps.weight"), (std::vector<float>{1.0f, 2.0f, 3.0f, 1.0f, 1.0f, 1.0f}));
  auto file = gguf::open_gguf(path);
  ASSERT_TRUE(file.ok()) << file.message();
  EXPECT_EQ(file->find_tensor("blk.0.ffn_down_exps.weight.in_sum2")->view.shape_string(), "[3, 2]");
  EXPECT_EQ(file->find_tensor("blk.0.ffn_down_exps.weight.counts")->view.shape_string(), "[1, 2]");
  sums["bad"] = {{1, 2, 3}, {1, 1}};
  const Status st = write_imatrix_gguf(path, sums, "calib.txt", 8, 512);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("'bad': 3 sums do not split into 2 matrices"), std::string::npos) << st.message();
  std::remove(path.c_str());
}

TEST(ImatrixGguf, BadFilesGetClearErrors) {
  auto expect_gguf_error = [](const GgufImatrixBuilder& b, const std::string& want) {
    auto m = parse_imatrix(b.bytes());
    ASSERT_FALSE(m.ok()) << want;
    EXPECT_NE(m.message().find(want), std::string::npos) << m.message();
  };
  {
    GgufImatrixBuilder b;
    b.add("w.in_sum2", {1, 2}, {2, 1});
    expect_gguf_error(b, "'w' has in_sum2 but no counts");
  }
  {
    GgufImatrixBuilder b;
    b.add("w.counts", {1}, {1, 1});
    expect_gguf_error(b, "'w' has counts but no in_sum2");
  }
  {
    GgufImatrixBuilder b;
    b.add("w.in_sum2", {1, 2, 3, 4}, {2, 2});
    b.add("w.counts", {1}, {1, 1});
    expect_gguf_error(b, "do not fit");
  }
  {
    GgufImatrixBuilder b;
    b.add("w.in_sum2", {1, -2}, {2, 1});
    b.add("w.counts", {1}, {1, 1});
    expect_gguf_error(b, "in_sum2 value 1 is -2");
  }
  {
    GgufImatrixBuilder b;
    b.add("w.in_sum2", {1, 2}, {2, 1});
    b.add("w.counts", {NAN}, {1, 1});
    expect_gguf_error(b, "'w': count nan");
  }
  {
    GgufImatrixBuilder b;
    b.add("w.in_sum2", {1, 2}, {2, 1}, DType::kF32);
    std::vector<uint16_t> c = {0x3c00};
    ASSERT_TRUE(b.w.add_tensor_copy("w.counts", DType::kF16, {1, 1}, std::as_bytes(std::span(c))).ok());
    expect_gguf_error(b, "must be f32");
  }
  {
    GgufImatrixBuilder b;
    b.add("token_embd.weight", {1, 2}, {2, 1});
    expect_gguf_error(b, "no NAME.in_sum2 / NAME.counts tensors");
  }
  {
    gguf::GgufWriter w;  // a model, not an importance matrix
    w.set("general.architecture", gguf::MetaValue::of_string("llama"));
    const std::vector<std::byte> bytes = w.serialize();
    auto m = parse_imatrix(std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
    ASSERT_FALSE(m.ok());
    EXPECT_NE(m.message().find("no 'imatrix.datasets'"), std::string::npos) << m.message();
  }
  // Truncations and random byte flips never crash (ASan) and either parse or fail with a message.
  GgufImatrixBuilder b;
  b.add("blk.0.attn_q.weight.in_sum2", {2, 4, 0, 8}, {4, 1});
  b.add("blk.0.attn_q.weight.counts", {4}, {1, 1});
  const std::string good = b.bytes();
  // (The last 32 bytes may be the alignment padding after the last tensor, which a reader
  // need not see.)
  for (size_t n = 4; n + 32 < good.size(); n += 7) EXPECT_FALSE(parse_imatrix(good.substr(0, n)).ok()) << n;
  expect_byte_flips_parse_or_fail(good, 4, 777);  // past the magic, so it stays a GGUF file
}

}  // namespace
}  // namespace lumen::convert
