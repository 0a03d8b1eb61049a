// The rejection rule against exact distributions on small hand-made vocabularies.
//
// verify_draft_token is piecewise constant in its two uniforms, so its output distribution
// can be measured deterministically: evaluate it on an N x N midpoint grid of (u_accept,
// u_residual) and weight each outcome by the proposal probability q(d). Each piece's
// measure is then off by at most 1/N per boundary, which the tolerances allow for; a rule
// that is wrong anywhere (e.g. accepting with p/q unclamped, or drawing the bonus from the
// wrong distribution) is off by far more (each test's comment says by how much).
#include "spec/rejection.h"

#include <cmath>
#include <map>
#include <vector>

#include <gtest/gtest.h>

namespace lumen::spec {
namespace {

// Exact-up-to-grid distribution of the emitted token when d ~ q (q empty: d fixed).
std::vector<double> emitted_distribution(const std::vector<float>& p, const std::vector<float>& q, int32_t fixed_d,
                                         int n_grid) {
  std::vector<double> out(p.size(), 0.0);
  for (size_t d = 0; d < p.size(); ++d) {
    const double qd = q.empty() ? (static_cast<int32_t>(d) == fixed_d ? 1.0 : 0.0) : q[d];
    if (qd == 0.0) continue;
    for (int a = 0; a < n_grid; ++a) {
      const double ua = (a + 0.5) / n_grid;
      const VerifyDraw acc = verify_draft_token(p, q, static_cast<int32_t>(d), ua, 0.5);
      if (acc.accepted) {
        EXPECT_EQ(acc.token, static_cast<int32_t>(d));
        out[d] += qd / n_grid;
        continue;
      }
      for (int r = 0; r < n_grid; ++r) {
        const VerifyDraw v = verify_draft_token(p, q, static_cast<int32_t>(d), ua, (r + 0.5) / n_grid);
        EXPECT_FALSE(v.accepted);
        out[static_cast<size_t>(v.token)] += qd / n_grid / n_grid;
      }
    }
  }
  return out;
}

void expect_near_dist(const std::vector<double>& got, const std::vector<float>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "token " << i;
}

TEST(Rejection, DraftDistributionGivesTargetExactly) {
  // A draft that over- and under-weights different tokens; the emitted token must still
  // be distributed as p. (Accepting every draft token would give q: off by 0.3 at token 0.)
  const std::vector<float> p = {0.1f, 0.4f, 0.2f, 0.3f, 0.0f};
  const std::vector<float> q = {0.4f, 0.1f, 0.2f, 0.1f, 0.2f};
  expect_near_dist(emitted_distribution(p, q, -1, 400), p, 4.0 / 400);
}

TEST(Rejection, DeterministicProposerGivesTargetExactly) {
  // q = one-hot at d (n-gram lookup): accept with p(d), else the others renormalised.
  const std::vector<float> p = {0.05f, 0.5f, 0.25f, 0.2f};
  for (int32_t d = 0; d < 4; ++d) expect_near_dist(emitted_distribution(p, {}, d, 400), p, 4.0 / 400);
}

TEST(Rejection, AcceptanceProbabilityIsMinOneRatio) {
  const std::vector<float> p = {0.1f, 0.6f, 0.3f};
  const std::vector<float> q = {0.5f, 0.3f, 0.2f};
  const int n = 10000;
  for (int32_t d = 0; d < 3; ++d) {
    int acc = 0;
    for (int a = 0; a < n; ++a) acc += verify_draft_token(p, q, d, (a + 0.5) / n, 0.5).accepted;
    EXPECT_NEAR(acc / double(n), std::min(1.0, double(p[d]) / q[d]), 2.0 / n) << "d " << d;
  }
}

TEST(Rejection, EqualDistributionsAlwaysAccept) {
  const std::vector<float> p = {0.25f, 0.25f, 0.5f};
  for (int32_t d = 0; d < 3; ++d)
    for (double u : {0.0, 0.3, 0.999999}) EXPECT_TRUE(verify_draft_token(p, p, d, u, 0.5).accepted);
}

TEST(Rejection, ImpossibleTokenIsNeverAccepted) {
  // p(d) = 0: the draft's token can never be emitted, whatever u.
  const std::vector<float> p = {0.0f, 0.5f, 0.5f};
  const std::vector<float> q = {0.9f, 0.05f, 0.05f};
  for (double u : {0.0, 0.5, 0.999}) {
    const VerifyDraw v = verify_draft_token(p, q, 0, u, u);
    EXPECT_FALSE(v.accepted);
    EXPECT_NE(v.token, 0);
  }
}

// The chain: temperature, top-k, top-p and min-p applied through Sampler::distribution,
// then verify_position with uniforms from the sampler's stream. Over many seeds, the
// emitted token's frequencies must match distribution() (and sample()'s own frequencies):
// chi-square with 5 degrees of freedom at 20000 draws; the 0.999 quantile is 20.5. A
// verifier that used the raw softmax instead of the filtered distribution puts ~6% of its
// mass on filtered-out tokens and scores in the hundreds.
double chi_square(const std::vector<int>& counts, const std::vector<float>& p, int n) {
  double chi = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] == 0.0f) {
      EXPECT_EQ(counts[i], 0) << "token " << i << " is outside the filtered distribution";
      continue;
    }
    const double e = p[i] * n;
    chi += (counts[i] - e) * (counts[i] - e) / e;
  }
  return chi;
}

TEST(Rejection, SamplerChainIsAppliedConsistently) {
  const std::vector<float> logits = {2.0f, 1.5f, 1.4f, 0.3f, -0.5f, 1.0f, 0.9f, -2.0f};
  sample::SamplingParams sp;
  sp.temperature = 0.7f;
  sp.top_k = 6;
  sp.top_p = 0.9f;
  sp.min_p = 0.05f;
  const auto n_vocab = static_cast<int32_t>(logits.size());
  std::vector<float> p(logits.size());
  sample::Sampler probe(sp, n_vocab);
  probe.distribution(logits, p);
  int n_support = 0;
  double total = 0;
  for (float v : p) {
    n_support += v > 0;
    total += v;
  }
  EXPECT_NEAR(total, 1.0, 1e-6);
  EXPECT_LT(n_support, 8);  // the filters did cut something
  // A draft that likes the tail; and a deterministic proposal of a filtered-out token.
  const std::vector<float> q = {0.05f, 0.05f, 0.1f, 0.3f, 0.3f, 0.1f, 0.05f, 0.05f};
  const int n = 20000;
  for (int mode = 0; mode < 3; ++mode) {
    std::vector<int> counts(logits.size(), 0);
    std::vector<float> work(logits.size());
    for (int s = 0; s < n; ++s) {
      sample::SamplingParams sps = sp;
      sps.seed = 1000 + static_cast<uint64_t>(s);
      sample::Sampler sampler(sps, n_vocab);
      int32_t tok;
      if (mode == 0) {
        tok = sampler.sample(logits);  // plain decoding
      } else {
        sample::SamplingParams dp;
        dp.seed = 77 + static_cast<uint64_t>(s);
        sample::Sampler draft_rng(dp, n_vocab);
        int32_t d = 7;  // mode 2: always the filtered-out tail token
        if (mode == 1) {
          double u = draft_rng.uniform(), c = 0;
          for (d = 0; d < n_vocab - 1; ++d)
            if ((c += q[d]) > u) break;
        }
        tok = verify_position(sampler, logits, d, mode == 1 ? std::span<const float>(q) : std::span<const float>(),
                              work)
                  .token;
      }
      counts[static_cast<size_t>(tok)]++;
    }
    EXPECT_LT(chi_square(counts, p, n), 20.5) << "mode " << mode;
  }
}

TEST(Rejection, GreedyAcceptsExactlyTheArgmax) {
  const std::vector<float> logits = {0.1f, 3.0f, 2.9f, -1.0f};
  sample::SamplingParams sp;
  sp.temperature = 0;
  sp.repeat_penalty = 1.5f;
  sample::Sampler s(sp, 4);
  std::vector<float> work(4);
  EXPECT_TRUE(verify_position(s, logits, 1, {}, work).accepted);
  const VerifyDraw v = verify_position(s, logits, 2, {}, work);
  EXPECT_FALSE(v.accepted);
  EXPECT_EQ(v.token, 1);
  // Penalties see the accepted tokens: after token 1 is in the history, 2 wins.
  s.accept(1);
  EXPECT_TRUE(verify_position(s, logits, 2, {}, work).accepted);
}

}  // namespace
}  // namespace lumen::spec
