#include "calib/kld.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

namespace lumen::calib {
namespace {

std::string temp_path(const std::string& name) {
  return ::testing::TempDir() + "lumen_kld_" + std::to_string(::getpid()) + "_" + name;
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// log p(i) as a stored row gives it back.
std::vector<double> decode(const std::vector<uint16_t>& row, int64_t n_vocab) {
  float scale, min_log_prob;
  std::memcpy(&scale, row.data(), 4);
  std::memcpy(&min_log_prob, row.data() + 2, 4);
  std::vector<double> lp(static_cast<size_t>(n_vocab));
  for (int64_t i = 0; i < n_vocab; ++i) lp[i] = scale * row[4 + i] + min_log_prob;
  return lp;
}

TEST(Kld, CompressedRowKeepsTheTop16Nats) {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 4.0f);
  constexpr int64_t kVocab = 301;  // odd: the row is padded to an even count
  std::vector<float> logits(kVocab);
  for (float& l : logits) l = nd(rng);
  std::vector<uint16_t> row(static_cast<size_t>(kld_row_u16s(kVocab)), 0xffff);
  ASSERT_EQ(row.size(), 2u * 151 + 4);
  const double nll = compress_log_probs(logits, 7, row.data());
  double max = logits[0], sum = 0;
  for (float l : logits) max = std::max<double>(max, l);
  for (float l : logits) sum += std::exp(l - max);
  const double lse = max + std::log(sum);
  EXPECT_NEAR(nll, lse - logits[7], 1e-4);
  const std::vector<double> lp = decode(row, kVocab);
  float scale;
  std::memcpy(&scale, row.data(), 4);
  for (int64_t i = 0; i < kVocab; ++i) {
    const double want = logits[i] - lse;
    if (logits[i] > max - 16) EXPECT_NEAR(lp[i], want, 0.51 * scale + 1e-5) << i;
    else EXPECT_EQ(row[4 + i], 0) << i;  // below the window: the row's minimum
  }
  EXPECT_EQ(row.back(), 0);  // the padding
}

// KLD(P || Q) of a two-token distribution against its hand value; identical logits give 0.
TEST(Kld, StatisticsOfKnownDistributions) {
  const std::vector<float> base = {0.0f, 0.0f};  // p = (0.5, 0.5)
  std::vector<uint16_t> row(static_cast<size_t>(kld_row_u16s(2)));
  compress_log_probs(base, 0, row.data());
  KldStats same, other;
  for (int i = 0; i < 200; ++i) same.add(base, row.data(), 0);
  const std::vector<float> q = {std::log(0.9f), std::log(0.1f)};
  for (int i = 0; i < 200; ++i) other.add(q, row.data(), 1);
  const KldSummary s = same.summary(), o = other.summary();
  EXPECT_EQ(s.count, 200);
  EXPECT_NEAR(s.kld, 0.0, 1e-6);
  EXPECT_EQ(s.same_top, 1.0);
  EXPECT_NEAR(s.ppl, 2.0, 1e-5);
  EXPECT_NEAR(s.ppl_base, 2.0, 1e-5);
  const double want = 0.5 * std::log(0.5 / 0.9) + 0.5 * std::log(0.5 / 0.1);  // 0.5108
  EXPECT_NEAR(o.kld, want, 1e-5);
  EXPECT_NEAR(o.kld_99, want, 1e-5);
  EXPECT_NEAR(o.ppl, 10.0, 1e-3);       // p(token 1) = 0.1
  EXPECT_NEAR(o.dp_mean, 0.1 - 0.5, 1e-5);
  EXPECT_NEAR(o.ppl_diff, 8.0, 1e-3);
  // base argmax: token 0 (ties keep the first), Q's: token 0 too.
  EXPECT_EQ(o.same_top, 1.0);
}

TEST(Kld, BaseFileRoundTripAndCountChecks) {
  constexpr uint32_t kCtx = 8;
  constexpr int32_t kVocab = 5, kChunks = 2;
  const int64_t rows = kChunks * (kCtx - 1 - kCtx / 2);
  std::vector<int32_t> tokens(kChunks * kCtx);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>(i % kVocab);
  const std::string path = temp_path("round.kld");
  KldBaseWriter w;
  ASSERT_TRUE(w.open(path, kCtx, kVocab, kChunks, tokens).ok());
  std::vector<float> logits(kVocab);
  for (int64_t r = 0; r < rows; ++r) {
    for (int32_t i = 0; i < kVocab; ++i) logits[i] = static_cast<float>((r + 1) * i % 7) * 0.5f;
    ASSERT_TRUE(w.write_row(logits, static_cast<int32_t>(r % kVocab)).ok());
  }
  EXPECT_FALSE(w.write_row(logits, 0).ok());  // one more than the header says
  ASSERT_TRUE(w.close().ok());
  auto b = read_kld_base(path);
  ASSERT_TRUE(b.ok()) << b.message();
  EXPECT_EQ(b->n_ctx, kCtx);
  EXPECT_EQ(b->n_vocab, kVocab);
  EXPECT_EQ(b->n_chunk, kChunks);
  EXPECT_EQ(b->tokens, tokens);
  EXPECT_EQ(b->n_rows_per_chunk(), 3);
  EXPECT_EQ(read_bytes(path).size(), 20 + 4 * tokens.size() + 2 * rows * kld_row_u16s(kVocab));

  // Too few rows: an error, and nothing at the path.
  const std::string short_path = temp_path("short.kld");
  {
    KldBaseWriter s;
    ASSERT_TRUE(s.open(short_path, kCtx, kVocab, kChunks, tokens).ok());
    ASSERT_TRUE(s.write_row(logits, 0).ok());
    const Status st = s.close();
    EXPECT_FALSE(st.ok());
    EXPECT_NE(st.message().find("rows missing"), std::string::npos) << st.message();
  }
  EXPECT_FALSE(std::ifstream(short_path).good());
  // Fewer tokens than the chunks need.
  KldBaseWriter t;
  EXPECT_FALSE(t.open(temp_path("t.kld"), kCtx, kVocab, kChunks + 1, tokens).ok());
  std::remove(path.c_str());
}

// Damaged base files (every truncation, random byte changes, huge header counts): an
// error or a file whose every field is in range, never a crash (runs under ASan).
TEST(KldBaseFuzz, DamagedFilesGiveErrorsNotCrashes) {
  constexpr uint32_t kCtx = 8;
  constexpr int32_t kVocab = 5, kChunks = 2;
  std::vector<int32_t> tokens(kChunks * kCtx, 1);
  const std::string path = temp_path("fuzz-src.kld");
  KldBaseWriter w;
  ASSERT_TRUE(w.open(path, kCtx, kVocab, kChunks, tokens).ok());
  const std::vector<float> logits = {0.1f, -2.0f, 3.0f, 0.5f, -20.0f};
  for (int r = 0; r < kChunks * 3; ++r) ASSERT_TRUE(w.write_row(logits, 2).ok());
  ASSERT_TRUE(w.close().ok());
  const std::string good = read_bytes(path);
  const std::string fuzz = temp_path("fuzz.kld");
  auto check = [&](const std::string& bytes) {
    {
      std::ofstream out(fuzz, std::ios::binary);
      out << bytes;
    }
    auto b = read_kld_base(fuzz);
    if (!b.ok()) {
      EXPECT_NE(b.message().find(fuzz), std::string::npos) << b.message();
      return false;
    }
    for (int32_t t : b->tokens) EXPECT_TRUE(t >= 0 && t < b->n_vocab);
    EXPECT_EQ(b->rows.size(), static_cast<size_t>(b->n_chunk * b->n_rows_per_chunk() * kld_row_u16s(b->n_vocab)));
    return true;
  };
  int n_ok = 0;
  for (size_t n = 0; n < good.size(); ++n) n_ok += check(good.substr(0, n));
  EXPECT_EQ(n_ok, 0);  // every truncation is an error
  std::mt19937 rng(17);
  for (int i = 0; i < 400; ++i) {
    std::string bytes = good;
    const int n_changes = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < n_changes; ++k) bytes[rng() % bytes.size()] = static_cast<char>(rng());
    check(bytes);
  }
  // Header counts whose row size overflows 64 bits.
  std::string huge = good;
  const uint32_t big_ctx = 1u << 24;
  const int32_t big = 1 << 24;
  std::memcpy(huge.data() + 8, &big_ctx, 4);
  std::memcpy(huge.data() + 12, &big, 4);
  std::memcpy(huge.data() + 16, &big, 4);
  EXPECT_FALSE(check(huge));
  std::remove(path.c_str());
  std::remove(fuzz.c_str());
}

}  // namespace
}  // namespace lumen::calib
