#include "spec/adaptive.h"

#include <gtest/gtest.h>

namespace lumen::spec {
namespace {

TEST(AdaptiveK, GrowsOnFullAcceptAndFollowsPartial) {
  AdaptiveK a(8);
  EXPECT_EQ(a.next_k(), 8);
  a.update(8, 3);
  EXPECT_EQ(a.next_k(), 4);
  a.update(4, 4);
  EXPECT_EQ(a.next_k(), 6);
  a.update(6, 6);
  a.update(8, 8);
  EXPECT_EQ(a.next_k(), 8);
}

TEST(AdaptiveK, PausesAfterRepeatedFailuresAndProbesAgain) {
  AdaptiveK a(8);
  for (int i = 0; i < 3; ++i) {
    EXPECT_GT(a.next_k(), 0);
    a.update(a.k(), 0);
  }
  int paused = 0;
  while (a.next_k() == 0) ++paused;
  EXPECT_EQ(paused, 8);
  EXPECT_EQ(a.k(), 1);  // probing
  a.update(1, 0);        // a failed probe pauses again at once
  paused = 0;
  while (a.next_k() == 0) ++paused;
  EXPECT_EQ(paused, 16);  // backoff doubled
  a.update(1, 1);
  EXPECT_EQ(a.next_k(), 3);
}

}  // namespace
}  // namespace lumen::spec
