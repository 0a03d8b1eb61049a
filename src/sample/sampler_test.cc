#include "sample/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <map>
#include <new>
#include <numeric>
#include <random>
#include <set>
#include <vector>

// Allocation counter for the no-allocation test. Replacing the global operator new is the
// only way to observe every allocation, so this one piece of process-wide state lives in
// the test binary (never in the library).
namespace {
std::atomic<int64_t>& n_allocations() {
  static std::atomic<int64_t> n{0};
  return n;
}
}  // namespace

// Every replaceable form is replaced, so allocation and release always pair up.
void* operator new(std::size_t n_bytes) {
  n_allocations().fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n_bytes ? n_bytes : 1)) return p;
  throw std::bad_alloc();
}
void* operator new(std::size_t n_bytes, std::align_val_t align) {
  n_allocations().fetch_add(1, std::memory_order_relaxed);
  const std::size_t a = static_cast<std::size_t>(align);
  if (void* p = std::aligned_alloc(a, (n_bytes + a - 1) / a * a)) return p;
  throw std::bad_alloc();
}
void* operator new(std::size_t n_bytes, const std::nothrow_t&) noexcept {
  n_allocations().fetch_add(1, std::memory_order_relaxed);
  return std::malloc(n_bytes ? n_bytes : 1);
}
void* operator new[](std::size_t n_bytes) { return operator new(n_bytes); }
void* operator new[](std::size_t n_bytes, std::align_val_t align) {
  return operator new(n_bytes, align);
}
void* operator new[](std::size_t n_bytes, const std::nothrow_t& tag) noexcept {
  return operator new(n_bytes, tag);
}
// These replacements pair malloc with free on purpose; GCC 12 at -O3 sees the inlined
// operator new[] -> operator new -> malloc chain and warns that free() meets "new".
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
#pragma GCC diagnostic pop

namespace lumen::sample {
namespace {

SamplingParams greedy_params() {
  SamplingParams p;
  p.temperature = 0.0f;
  return p;
}

// Plain softmax in double, the reference for the statistical tests.
std::vector<double> softmax(const std::vector<float>& logits, double temperature = 1.0) {
  double max_l = -INFINITY;
  for (float l : logits) max_l = std::max(max_l, static_cast<double>(l));
  std::vector<double> p(logits.size());
  double sum = 0.0;
  for (size_t i = 0; i < logits.size(); ++i) {
    p[i] = std::exp((logits[i] - max_l) / temperature);
    sum += p[i];
  }
  for (double& x : p) x /= sum;
  return p;
}

// Sampling frequencies over `n_draws` draws.
std::vector<double> frequencies(Sampler& s, const std::vector<float>& logits, int n_draws) {
  std::vector<double> f(logits.size(), 0.0);
  for (int i = 0; i < n_draws; ++i) f[static_cast<size_t>(s.sample(logits))] += 1.0;
  for (double& x : f) x /= n_draws;
  return f;
}

// Expected distribution: `p` restricted to `keep`, renormalized.
std::vector<double> restricted(const std::vector<double>& p, const std::set<int>& keep) {
  std::vector<double> q(p.size(), 0.0);
  double sum = 0.0;
  for (int id : keep) sum += p[static_cast<size_t>(id)];
  for (int id : keep) q[static_cast<size_t>(id)] = p[static_cast<size_t>(id)] / sum;
  return q;
}

void expect_close_distribution(const std::vector<double>& got, const std::vector<double>& want,
                               double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (want[i] == 0.0) {
      EXPECT_EQ(got[i], 0.0) << "token " << i << " must never be drawn";
    } else {
      EXPECT_NEAR(got[i], want[i], tol) << "token " << i;
    }
  }
}

TEST(SamplerGreedy, ArgmaxTiesGoToLowestId) {
  EXPECT_EQ(argmax(std::vector<float>{1.0f, 3.0f, 3.0f, 2.0f}), 1);
  EXPECT_EQ(argmax(std::vector<float>{5.0f, 5.0f}), 0);
  EXPECT_EQ(argmax(std::vector<float>{-INFINITY, -INFINITY, -1.0f}), 2);
  EXPECT_EQ(argmax(std::vector<float>{NAN, 1.0f, 2.0f}), 2);
  EXPECT_EQ(argmax(std::vector<float>{0.5f, NAN, 0.5f}), 0);
}

// The lane-parallel argmax against the one-pass definition, on vectors of every length
// from 1 to 70 (lane tails) mixing ties, NaN, -inf and +inf, and the greedy sampler (which
// reads NaN as -inf without copying) against argmax of the cleaned copy.
TEST(SamplerGreedy, ArgmaxMatchesTheSerialDefinition) {
  auto serial = [](const std::vector<float>& x) {
    size_t best = 0;
    while (best + 1 < x.size() && std::isnan(x[best])) ++best;
    for (size_t i = best + 1; i < x.size(); ++i)
      if (x[i] > x[best]) best = i;
    return static_cast<int32_t>(best);
  };
  std::mt19937 gen(11);
  const float specials[] = {NAN, -INFINITY, INFINITY, 2.0f, 2.0f, -1.0f};
  int checked = 0;
  for (size_t n = 1; n <= 70; ++n) {
    for (int round = 0; round < 40; ++round) {
      std::vector<float> x(n);
      const int mode = round % 4;  // 0: plain, 1: some specials, 2: mostly NaN/-inf, 3: all one special
      for (float& v : x) {
        const float plain = static_cast<float>(static_cast<int>(gen() % 7)) - 3.0f;  // small ints: ties
        if (mode == 0) v = plain;
        if (mode == 1) v = gen() % 5 == 0 ? specials[gen() % 6] : plain;
        if (mode == 2) v = gen() % 8 == 0 ? plain : specials[gen() % 2];
        if (mode == 3) v = specials[round / 4 % 3];
      }
      ASSERT_EQ(argmax(x), serial(x)) << "n=" << n << " round=" << round;
      std::vector<float> clean = x;
      for (float& v : clean) v = std::isnan(v) ? -INFINITY : v;
      ASSERT_EQ(argmax_nan_as_neg_inf(x), serial(clean)) << "n=" << n << " round=" << round;
      Sampler greedy(SamplingParams{.temperature = 0.0f}, static_cast<int32_t>(n));
      ASSERT_EQ(greedy.sample(x), serial(clean)) << "n=" << n << " round=" << round;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 70 * 40);
}

TEST(SamplerGreedy, ZeroOrNegativeTemperatureIsArgmax) {
  const std::vector<float> logits = {0.1f, 2.0f, 7.0f, 7.0f, -3.0f};
  for (float t : {0.0f, -1.0f}) {
    SamplingParams p;
    p.temperature = t;
    Sampler s(p, 5);
    for (int i = 0; i < 10; ++i) EXPECT_EQ(s.sample(logits), 2);
  }
}

TEST(SamplerGreedy, PenaltiesApplyBeforeGreedy) {
  SamplingParams p = greedy_params();
  p.repeat_penalty = 2.0f;
  Sampler s(p, 3);
  const std::vector<float> logits = {3.0f, 4.0f, 1.0f};
  EXPECT_EQ(s.sample(logits), 1);
  s.accept(1);  // 4 / 2 = 2 < 3
  EXPECT_EQ(s.sample(logits), 0);
  EXPECT_EQ(logits[1], 4.0f) << "input logits must be left unchanged";
}

TEST(SamplerGreedy, InfiniteLogitsAndTinyTemperature) {
  for (int32_t top_k : {0, 2}) {
    SamplingParams p;
    p.top_k = top_k;
    p.temperature = 1.0f;
    Sampler s(p, 4);
    EXPECT_EQ(s.sample(std::vector<float>{1.0f, INFINITY, 2.0f, INFINITY}), 1);
    EXPECT_EQ(s.sample(std::vector<float>{-INFINITY, -INFINITY, -INFINITY, -INFINITY}), 0);
    EXPECT_EQ(s.sample(std::vector<float>{NAN, NAN, 3.0f, -INFINITY}), 2);
    p.temperature = 1e-45f;  // 1 / T overflows: greedy
    Sampler tiny(p, 4);
    EXPECT_EQ(tiny.sample(std::vector<float>{1.0f, 5.0f, 5.0f, 2.0f}), 1);
  }
}

TEST(SamplerTopK, TopKOneEqualsGreedy) {
  std::mt19937 gen(7);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> logits(1000);
  for (int round = 0; round < 20; ++round) {
    for (float& l : logits) l = normal(gen);
    if (round % 5 == 0) logits[17] = logits[900] = 100.0f;  // a tie at the top
    SamplingParams p;
    p.top_k = 1;
    p.temperature = 1.5f;
    p.seed = static_cast<uint64_t>(round);
    Sampler s(p, 1000);
    EXPECT_EQ(s.sample(logits), argmax(logits));
  }
}

TEST(SamplerSeed, SameSeedSameSequence) {
  std::mt19937 gen(1);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> logits(5000);
  for (float& l : logits) l = normal(gen);
  for (int32_t top_k : {0, 40}) {
    SamplingParams p;
    p.top_k = top_k;
    p.temperature = 1.0f;
    p.seed = 1234;
    Sampler a(p, 5000);
    Sampler b(p, 5000);
    for (int i = 0; i < 200; ++i) ASSERT_EQ(a.sample(logits), b.sample(logits)) << i;
  }
}

TEST(SamplerSeed, DifferentSeedsDiffer) {
  std::vector<float> logits(100, 0.0f);  // uniform: 100^50 possible sequences
  SamplingParams p;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.temperature = 1.0f;
  p.seed = 1;
  Sampler a(p, 100);
  p.seed = 2;
  Sampler b(p, 100);
  int n_differ = 0;
  for (int i = 0; i < 50; ++i) n_differ += a.sample(logits) != b.sample(logits);
  EXPECT_GT(n_differ, 25);
}

TEST(SamplerSeed, DrawMethodIsAsDocumented) {
  // u = (rng() >> 11) * 2^-53 walked over ascending ids with weights exp(l - max).
  const std::vector<float> logits = {1.0f, 0.0f, 2.0f, -1.0f};
  SamplingParams p;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.temperature = 1.0f;
  p.seed = 99;
  Sampler s(p, 4);
  std::mt19937_64 rng(99);
  for (int i = 0; i < 100; ++i) {
    std::vector<float> w(4);
    double total = 0.0;
    for (size_t j = 0; j < 4; ++j) total += w[j] = std::exp(logits[j] - 2.0f);
    const double u = static_cast<double>(rng() >> 11) * 0x1.0p-53 * total;
    double cum = 0.0;
    int32_t want = 3;
    for (int32_t j = 0; j < 4; ++j) {
      cum += w[static_cast<size_t>(j)];
      if (cum > u) { want = j; break; }
    }
    ASSERT_EQ(s.sample(logits), want) << i;
  }
}

TEST(SamplerDistribution, UnfilteredMatchesSoftmaxWithTemperature) {
  const std::vector<float> logits = {1.0f, 2.0f, 0.5f, -1.0f, 1.5f};
  SamplingParams p;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.temperature = 0.7f;
  p.seed = 5;
  Sampler s(p, 5);
  expect_close_distribution(frequencies(s, logits, 200000), softmax(logits, 0.7), 0.005);
}

TEST(SamplerDistribution, TopKKeepsTheKBest) {
  const std::vector<float> logits = {1.0f, 3.0f, 0.0f, 2.5f, 2.0f, -1.0f};
  SamplingParams p;
  p.top_k = 3;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.temperature = 1.0f;
  p.seed = 11;
  Sampler s(p, 6);
  expect_close_distribution(frequencies(s, logits, 200000),
                            restricted(softmax(logits), {1, 3, 4}), 0.005);
}

TEST(SamplerDistribution, TopPKeepsSmallestPrefixReachingP) {
  // Probabilities 0.4, 0.3, 0.2, 0.1 (ids 2, 0, 3, 1); cumulative 0.4, 0.7, 0.9, 1.0.
  // top_p = 0.65 keeps {2, 0}; 0.75 keeps {2, 0, 3}; 0.3 keeps {2}.
  const std::vector<float> logits = {std::log(0.3f), std::log(0.1f), std::log(0.4f),
                                     std::log(0.2f)};
  const std::vector<double> full = softmax(logits);
  struct Case {
    float top_p;
    std::set<int> keep;
  };
  for (const Case& c : {Case{0.65f, {2, 0}}, Case{0.75f, {2, 0, 3}}, Case{0.3f, {2}},
                        Case{0.999f, {0, 1, 2, 3}}}) {
    SamplingParams p;
    p.top_k = 0;
    p.top_p = c.top_p;
    p.min_p = 0.0f;
    p.temperature = 1.0f;
    p.seed = 3;
    Sampler s(p, 4);
    SCOPED_TRACE(c.top_p);
    expect_close_distribution(frequencies(s, logits, 50000), restricted(full, c.keep), 0.008);
  }
}

TEST(SamplerDistribution, TopPOnLargeVocabWithoutTopK) {
  // 20k tokens: 10 strong ones hold ~all the mass; the lazy chunked sort must find exactly
  // the top-p prefix among them (the vocabulary is too big for many draws in debug builds).
  const size_t n_vocab = 20000;
  std::vector<float> logits(n_vocab, -20.0f);
  for (size_t i = 0; i < 10; ++i) logits[1999 * i + 7] = static_cast<float>(i) * 0.3f;
  SamplingParams p;
  p.top_k = 0;
  p.top_p = 0.5f;
  p.min_p = 0.0f;
  p.temperature = 1.0f;
  p.seed = 8;
  const std::vector<double> full = softmax(logits);
  std::vector<int> order(n_vocab);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return logits[static_cast<size_t>(a)] > logits[static_cast<size_t>(b)];
  });
  std::set<int> keep;  // most likely first until the mass reaches top_p
  double cum = 0.0;
  for (int id : order) {
    keep.insert(id);
    cum += full[static_cast<size_t>(id)];
    if (cum >= 0.5) break;
  }
  ASSERT_GE(keep.size(), 3u);
  Sampler s(p, static_cast<int32_t>(n_vocab));
  const std::vector<double> got = frequencies(s, logits, 5000);
  std::set<int> drawn;
  for (size_t i = 0; i < n_vocab; ++i) {
    if (got[i] > 0.0) drawn.insert(static_cast<int>(i));
  }
  EXPECT_EQ(drawn, keep);
  expect_close_distribution(got, restricted(full, keep), 0.03);
}

// The histogram cut of top-p over the full vocabulary (top_k = 0) must keep exactly the
// set a sorted walk keeps (top_k = n - 1 takes the sorted path and only drops the least
// likely token, which top-p drops anyway). The draw walks ascending ids in both paths, so
// equal sets give equal sequences for the same seed. Coarse logits make ties at the cut.
TEST(SamplerDistribution, TopPHistogramCutEqualsSortedWalk) {
  const int32_t n_vocab = 3000;
  std::mt19937 gen(12);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (int round = 0; round < 6; ++round) {
    std::vector<float> logits(static_cast<size_t>(n_vocab));
    for (float& l : logits) l = std::round(normal(gen) * (round % 2 ? 2.0f : 50.0f)) / 10.0f;
    logits[0] = -1000.0f;  // the unique least likely token
    SamplingParams p;
    p.top_p = 0.3f + 0.1f * static_cast<float>(round);
    p.min_p = round % 3 == 0 ? 0.01f : 0.0f;
    p.temperature = 1.0f;
    p.seed = static_cast<uint64_t>(round);
    p.top_k = 0;
    Sampler histogram(p, n_vocab);
    p.top_k = n_vocab - 1;
    Sampler sorted(p, n_vocab);
    for (int i = 0; i < 300; ++i) {
      ASSERT_EQ(histogram.sample(logits), sorted.sample(logits)) << "round " << round << " draw " << i;
    }
  }
}

TEST(SamplerDistribution, MinPKeepsTokensAboveFractionOfMax) {
  // p = 0.5, 0.25, 0.15, 0.1; min_p = 0.3 keeps p >= 0.15: ids {0, 1, 2}.
  const std::vector<float> logits = {std::log(0.5f), std::log(0.25f), std::log(0.15f),
                                     std::log(0.1f)};
  for (int32_t top_k : {0, 4}) {  // unsorted (compaction) and sorted paths
    SamplingParams p;
    p.top_k = top_k;
    p.top_p = 1.0f;
    p.min_p = 0.29f;
    p.temperature = 1.0f;
    p.seed = 21;
    Sampler s(p, 4);
    SCOPED_TRACE(top_k);
    expect_close_distribution(frequencies(s, logits, 100000),
                              restricted(softmax(logits), {0, 1, 2}), 0.006);
  }
}

TEST(SamplerDistribution, ChainTopKThenTopPThenMinPThenTemperature) {
  // 8 tokens; top-k 6 drops ids 6, 7; top-p over the 6 survivors; min-p; then T = 2.
  const std::vector<float> logits = {3.0f, 2.6f, 2.2f, 1.5f, 1.0f, 0.2f, -1.0f, -2.0f};
  SamplingParams p;
  p.top_k = 6;
  p.top_p = 0.9f;
  p.min_p = 0.2f;
  p.temperature = 2.0f;
  p.seed = 77;
  // Reference computed step by step.
  std::vector<float> top6(logits.begin(), logits.begin() + 6);
  const std::vector<double> p6 = softmax(top6);
  std::set<int> keep;
  double cum = 0.0;
  for (int i = 0; i < 6; ++i) {
    keep.insert(i);
    cum += p6[static_cast<size_t>(i)];
    if (cum >= 0.9) break;
  }
  std::set<int> keep_min_p;
  for (int id : keep) {
    if (p6[static_cast<size_t>(id)] >= 0.2 * p6[0]) keep_min_p.insert(id);
  }
  ASSERT_LT(keep_min_p.size(), 6u);
  Sampler s(p, 8);
  expect_close_distribution(frequencies(s, logits, 200000),
                            restricted(softmax(logits, 2.0), keep_min_p), 0.006);
}

TEST(SamplerPenalties, RepeatPresenceFrequencyMath) {
  SamplingParams p;
  p.repeat_penalty = 1.5f;
  p.presence_penalty = 0.25f;
  p.frequency_penalty = 0.5f;
  p.penalty_last_n = 8;
  p.temperature = 1.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  Sampler s(p, 6);
  for (int32_t id : {1, 2, 2, 3, 3, 3}) s.accept(id);
  EXPECT_EQ(s.penalty_count(0), 0);
  EXPECT_EQ(s.penalty_count(2), 2);
  EXPECT_EQ(s.penalty_count(3), 3);
  // Expected penalized logits.
  const std::vector<float> logits = {1.0f, 3.0f, -2.0f, 0.0f, 0.5f, 0.0f};
  std::vector<float> want = logits;
  want[1] = 3.0f / 1.5f - (1 * 0.5f + 0.25f);
  want[2] = -2.0f * 1.5f - (2 * 0.5f + 0.25f);
  want[3] = 0.0f * 1.5f - (3 * 0.5f + 0.25f);
  const std::vector<double> expected = softmax(want);
  p.seed = 4;
  Sampler s2(p, 6);
  for (int32_t id : {1, 2, 2, 3, 3, 3}) s2.accept(id);
  expect_close_distribution(frequencies(s2, logits, 200000), expected, 0.005);
}

TEST(SamplerPenalties, WindowForgetsOldTokens) {
  SamplingParams p;
  p.repeat_penalty = 2.0f;
  p.penalty_last_n = 3;
  Sampler s(p, 10);
  for (int32_t id : {5, 6, 5, 7, 8}) s.accept(id);  // window: 5, 7, 8
  EXPECT_EQ(s.penalty_count(5), 1);
  EXPECT_EQ(s.penalty_count(6), 0);
  EXPECT_EQ(s.penalty_count(7), 1);
  EXPECT_EQ(s.penalty_count(8), 1);
  EXPECT_EQ(s.penalized_ids().size(), 3u);
  s.accept(9);  // window: 7, 8, 9
  EXPECT_EQ(s.penalty_count(5), 0);
  std::vector<int32_t> ids(s.penalized_ids().begin(), s.penalized_ids().end());
  std::sort(ids.begin(), ids.end());
  EXPECT_EQ(ids, (std::vector<int32_t>{7, 8, 9}));
  s.reset_history();
  EXPECT_TRUE(s.penalized_ids().empty());
  EXPECT_EQ(s.penalty_count(9), 0);
  s.accept(1);
  EXPECT_EQ(s.penalty_count(1), 1);
}

TEST(SamplerPenalties, WholeHistoryAndDisabled) {
  SamplingParams p;
  p.frequency_penalty = 1.0f;
  p.penalty_last_n = -1;
  Sampler whole(p, 4);
  for (int i = 0; i < 1000; ++i) whole.accept(2);
  EXPECT_EQ(whole.penalty_count(2), 1000);

  p.penalty_last_n = 0;
  Sampler off(p, 4);
  off.accept(2);
  EXPECT_EQ(off.penalty_count(2), 0);

  SamplingParams neutral;  // all penalties at their neutral values
  Sampler none(neutral, 4);
  none.accept(2);
  EXPECT_TRUE(none.penalized_ids().empty());
}

TEST(SamplerAlloc, SampleAndAcceptDoNotAllocate) {
  const int32_t n_vocab = 152064;
  std::mt19937 gen(3);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> logits(static_cast<size_t>(n_vocab));
  for (float& l : logits) l = normal(gen);
  std::vector<SamplingParams> configs(4);
  configs[0].repeat_penalty = 1.1f;                                   // default chain
  configs[1].top_k = 0;                                               // lazy top-p
  configs[1].frequency_penalty = 0.2f;
  configs[1].penalty_last_n = -1;
  configs[2].top_k = 0;                                               // min-p only
  configs[2].top_p = 1.0f;
  configs[3].temperature = 0.0f;                                      // greedy
  configs[3].presence_penalty = 0.5f;
  for (const SamplingParams& p : configs) {
    Sampler s(p, n_vocab);
    const int64_t before = n_allocations().load();
    for (int i = 0; i < 100; ++i) s.accept(s.sample(logits));
    EXPECT_EQ(n_allocations().load() - before, 0);
  }
}

// A mask is the same as -inf outside it: same draws for the same seed, every chain.
TEST(SamplerMask, EqualsNegativeInfinityOutsideTheMask) {
  const int32_t n_vocab = 1000;
  std::mt19937 gen(5);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> logits(static_cast<size_t>(n_vocab));
  for (float& l : logits) l = normal(gen);
  std::vector<uint64_t> mask((n_vocab + 63) / 64, 0);
  std::vector<float> cut(logits.size(), -INFINITY);
  for (int32_t id = 0; id < n_vocab; ++id)
    if (gen() % 7 == 0 || id == 999) {
      mask[id / 64] |= uint64_t{1} << (id % 64);
      cut[static_cast<size_t>(id)] = logits[static_cast<size_t>(id)];
    }
  std::vector<SamplingParams> configs(6);
  configs[1].top_k = 0;                                  // top-p over the whole vocabulary
  configs[2].top_k = 0, configs[2].top_p = 1.0f, configs[2].min_p = 0.0f;  // plain softmax
  configs[3].temperature = 0.0f;                         // greedy
  configs[4].repeat_penalty = 1.3f, configs[4].top_k = 5;
  configs[5].temperature = 1.5f, configs[5].top_p = 0.5f, configs[5].top_k = 0;
  std::vector<float> pa(logits.size()), pb(logits.size());
  for (const SamplingParams& p : configs) {
    Sampler a(p, n_vocab), b(p, n_vocab);
    for (int i = 0; i < 200; ++i) {
      // distribution() under the mask (speculative verification's p) likewise.
      a.distribution(logits, pa, mask);
      b.distribution(cut, pb);
      ASSERT_EQ(pa, pb) << "draw " << i;
      const int32_t x = a.sample(logits, mask), y = b.sample(cut);
      ASSERT_EQ(x, y) << "draw " << i;
      ASSERT_TRUE((mask[x / 64] >> (x % 64)) & 1);
      a.accept(x);
      b.accept(y);
    }
  }
}

TEST(SamplerMask, DistributionIsTheRenormalizedSoftmax) {
  const std::vector<float> logits = {1.0f, 2.0f, 0.5f, 3.0f, -1.0f, 0.0f};
  std::vector<uint64_t> mask = {0b110101};  // ids 0, 2, 4, 5
  SamplingParams p;
  p.top_k = 0, p.top_p = 1.0f, p.min_p = 0.0f, p.temperature = 1.0f;
  Sampler s(p, 6);
  std::vector<double> f(6, 0.0);
  for (int i = 0; i < 40000; ++i) f[static_cast<size_t>(s.sample(logits, mask))] += 1.0 / 40000;
  expect_close_distribution(f, restricted(softmax(logits), {0, 2, 4, 5}), 0.01);
}

TEST(SamplerMask, NoFiniteAllowedLogitGivesTheLowestAllowedId) {
  const std::vector<float> logits = {5.0f, -INFINITY, NAN, -INFINITY};
  std::vector<uint64_t> mask = {0b1110};
  for (float temp : {0.0f, 1.0f}) {
    SamplingParams p;
    p.temperature = temp;
    Sampler s(p, 4);
    EXPECT_EQ(s.sample(logits, mask), 1);
    std::vector<float> probs(4);
    s.distribution(logits, probs, mask);
    EXPECT_EQ(probs, (std::vector<float>{0.0f, 1.0f, 0.0f, 0.0f}));
  }
}

TEST(SamplerMask, MaskedSamplingDoesNotAllocate) {
  const int32_t n_vocab = 152064;
  std::vector<float> logits(static_cast<size_t>(n_vocab));
  std::mt19937 gen(3);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  for (float& l : logits) l = normal(gen);
  std::vector<uint64_t> mask((n_vocab + 63) / 64, 0x5555555555555555ull);
  for (float temp : {0.0f, 1.0f}) {
    SamplingParams p;
    p.temperature = temp;
    p.top_k = 0;
    Sampler s(p, n_vocab);
    const int64_t before = n_allocations().load();
    for (int i = 0; i < 20; ++i) s.accept(s.sample(logits, mask));
    EXPECT_EQ(n_allocations().load() - before, 0);
  }
}

TEST(SamplerValidate, RejectsBadParams) {
  EXPECT_TRUE(validate(SamplingParams{}).ok());
  SamplingParams p;
  p.repeat_penalty = 0.0f;
  Status st = validate(p);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("repeat_penalty"), std::string::npos);
  p = SamplingParams{};
  p.top_p = NAN;
  EXPECT_FALSE(validate(p).ok());
  p = SamplingParams{};
  p.penalty_last_n = -2;
  EXPECT_FALSE(validate(p).ok());
}

// The terms are expf() in float (as llama-perplexity), so each carries ~6e-8 relative error;
// the double sum keeps a 152k-term total from drifting further (a float sum would not).
TEST(SamplerLogprobs, LogSoftmaxMatchesLongDoubleReference) {
  std::mt19937 gen(5);
  std::normal_distribution<float> normal(0.0f, 4.0f);
  std::vector<float> logits(152064);
  for (float& l : logits) l = normal(gen);
  logits[123] = 30.0f;
  long double max_l = -INFINITY;
  for (float l : logits) max_l = std::max(max_l, static_cast<long double>(l));
  long double sum = 0.0L;
  for (float l : logits) sum += std::exp(static_cast<long double>(l) - max_l);
  const long double lse_ref = max_l + std::log(sum);
  EXPECT_NEAR(logsumexp(logits), static_cast<double>(lse_ref), 1e-6);
  for (int32_t id : {0, 123, 5000, 152063}) {
    const long double want = static_cast<long double>(logits[static_cast<size_t>(id)]) - lse_ref;
    EXPECT_NEAR(log_softmax_at(logits, id), static_cast<double>(want), 1e-6) << id;
  }
  // Probabilities from log_softmax_at sum to 1.
  const std::vector<float> small = {0.5f, -1.0f, 2.0f, 2.0f};
  double total = 0.0;
  for (int32_t id = 0; id < 4; ++id) total += std::exp(log_softmax_at(small, id));
  EXPECT_NEAR(total, 1.0, 1e-6);
  EXPECT_NEAR(logsumexp(std::vector<float>{0.0f, 0.0f}), std::log(2.0), 1e-12);
  // A naive float accumulation over the big vocabulary is measurably worse.
  float naive = 0.0f;
  for (float l : logits) naive += std::exp(l - static_cast<float>(max_l));
  const double naive_err = std::fabs((static_cast<double>(max_l) + std::log(naive)) - static_cast<double>(lse_ref));
  const double our_err = std::fabs(logsumexp(logits) - static_cast<double>(lse_ref));
  EXPECT_LE(our_err, naive_err + 1e-12);
}

TEST(SamplerLogprobs, TopLogprobsSortedWithIdTies) {
  const std::vector<float> logits = {1.0f, 3.0f, 3.0f, -2.0f, 2.0f, 3.0f};
  const std::vector<TokenLogprob> top = top_logprobs(logits, 4);
  ASSERT_EQ(top.size(), 4u);
  EXPECT_EQ(top[0].id, 1);
  EXPECT_EQ(top[1].id, 2);
  EXPECT_EQ(top[2].id, 5);
  EXPECT_EQ(top[3].id, 4);
  for (const TokenLogprob& t : top) EXPECT_NEAR(t.logprob, log_softmax_at(logits, t.id), 1e-12);
  EXPECT_EQ(top_logprobs(logits, 100).size(), 6u);
  EXPECT_TRUE(top_logprobs(logits, 0).empty());
}

}  // namespace
}  // namespace lumen::sample
