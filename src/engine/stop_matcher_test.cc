#include "engine/stop_matcher.h"

#include <gtest/gtest.h>

namespace lumen::engine {
namespace {

TEST(StopMatcher, NoStopsPassesThrough) {
  StopMatcher m({});
  EXPECT_EQ(m.push("abc"), "abc");
  EXPECT_EQ(m.flush(), "");
}

TEST(StopMatcher, HoldsPartialAndTrimsMatch) {
  StopMatcher m({"</end>"});
  EXPECT_EQ(m.push("hello </"), "hello ");
  EXPECT_FALSE(m.stopped());
  EXPECT_EQ(m.push("en"), "");
  EXPECT_EQ(m.push("d> more"), "");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.push("x"), "");
}

TEST(StopMatcher, ReleasesFalseStart) {
  StopMatcher m({"STOP"});
  EXPECT_EQ(m.push("ST"), "");
  EXPECT_EQ(m.push("x"), "STx");
  EXPECT_EQ(m.push("S"), "");
  EXPECT_EQ(m.flush(), "S");
}

TEST(StopMatcher, EarliestOfSeveral) {
  StopMatcher m({"b c", "c"});
  EXPECT_EQ(m.push("a b c d"), "a ");
  EXPECT_TRUE(m.stopped());
}

}  // namespace
}  // namespace lumen::engine
