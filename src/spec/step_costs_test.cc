#include "spec/step_costs.h"

#include <gtest/gtest.h>

namespace lumen::spec {
namespace {

// A memory-bound step (30 ms whatever the tokens up to 4) that turns compute-bound: each
// token past 4 costs 7 ms more (the shape measured on qwen2.5-0.5b Q4_0 at 2 threads).
StepCosts knee_at_4() {
  StepCosts c;
  c.add(1, 30);
  c.add(4, 31);
  c.add(8, 59);
  c.add(16, 115);
  return c;
}

TEST(StepCosts, InterpolatesAndExtrapolatesLinearly) {
  const StepCosts c = knee_at_4();
  EXPECT_DOUBLE_EQ(c.ms(1), 30);
  EXPECT_DOUBLE_EQ(c.ms(6), 45);
  EXPECT_DOUBLE_EQ(c.ms(16), 115);
  EXPECT_DOUBLE_EQ(c.ms(20), 143);  // last segment's slope, 7 ms per token
}

TEST(StepCosts, ADipIsNoise) {
  StepCosts c;
  c.add(1, 30);
  c.add(3, 40);
  c.add(4, 33);  // a busy machine slowed n = 3
  c.add(8, 60);
  EXPECT_DOUBLE_EQ(c.ms(4), 40);
  EXPECT_DOUBLE_EQ(c.ms(6), 50);
}

TEST(StepCosts, ExpectedTokens) {
  EXPECT_DOUBLE_EQ(expected_tokens(1.0, 8), 9.0);
  EXPECT_DOUBLE_EQ(expected_tokens(0.5, 2), 1.75);
  EXPECT_DOUBLE_EQ(expected_tokens(0.0, 8), 1.0);
}

TEST(StepCosts, BestKFollowsAcceptanceAndCost) {
  const StepCosts c = knee_at_4();
  // All accepted: every k adds a token for 7 ms at most, below 30 ms per plain token.
  EXPECT_EQ(best_k(c, 1, 1, 1.0, 16), 16);
  // Poor acceptance: only the nearly free tokens below the knee pay.
  EXPECT_EQ(best_k(c, 1, 1, 0.3, 16), 3);
  // Nothing accepted: no k pays.
  EXPECT_EQ(best_k(c, 1, 1, 0.0, 16), 0);
  // No measurement: the caller's cap.
  EXPECT_EQ(best_k(StepCosts{}, 1, 1, 0.0, 5), 5);
}

TEST(StepCosts, ProposalCostCountsAgainstK) {
  const StepCosts c = knee_at_4();
  // A draft that costs as much as a target decode step per position never pays, even when
  // every proposal is accepted (TinyStories-656K with its own F32 copy as draft).
  EXPECT_EQ(best_k(c, 1, 1, 1.0, 8, 30), 0);
  // A draft at a tenth of the target's cost still pays.
  EXPECT_GT(best_k(c, 1, 1, 0.9, 8, 3), 2);
}

TEST(StepCosts, BacksOffInALargeBatch) {
  // 16 decodes: past the knee already, a verify token costs 7 ms and brings a < 1 tokens,
  // against 115 / 16 = 7.2 ms per committed token: speculation at 0.8 acceptance must stop.
  const StepCosts c = knee_at_4();
  EXPECT_EQ(best_k(c, 16, 16, 0.8, 8), 0);
  // The same acceptance pays at concurrency 1.
  EXPECT_GT(best_k(c, 1, 1, 0.8, 8), 2);
}

}  // namespace
}  // namespace lumen::spec
