#include "base/cpu_affinity.h"

#include <gtest/gtest.h>

#include <thread>

namespace lumen {
namespace {

TEST(CpuAffinity, ParsesLists) {
  EXPECT_EQ(*parse_cpu_list("0-3,8,10-11"), (std::vector<int>{0, 1, 2, 3, 8, 10, 11}));
  EXPECT_EQ(*parse_cpu_list("5,1,1-2"), (std::vector<int>{1, 2, 5}));
  EXPECT_EQ(*parse_cpu_list("7"), (std::vector<int>{7}));
  for (const char* bad : {"", ",", "1,", "a", "1-", "-1", "3-1", "1--2", "0x1", "1 ,2", "5000"})
    EXPECT_FALSE(parse_cpu_list(bad).ok()) << bad;
  EXPECT_NE(parse_cpu_list("3-1").message().find("3-1"), std::string::npos);
  EXPECT_EQ(format_cpu_list(std::vector<int>{0, 1, 2, 3, 8, 10, 11}), "0-3,8,10-11");
  EXPECT_EQ(format_cpu_list(std::vector<int>{}), "");
}

// Threads started after the pin inherit it; a CPU the process may not use is refused.
TEST(CpuAffinity, PinsTheThreadAndItsChildren) {
  const std::vector<int> all = allowed_cpus();
  ASSERT_FALSE(all.empty());
  std::vector<int> seen_child;
  std::thread t([&] {
    ASSERT_TRUE(pin_to_cpus(std::vector<int>{all.back()}).ok());
    EXPECT_EQ(allowed_cpus(), std::vector<int>{all.back()});
    std::thread child([&] { seen_child = allowed_cpus(); });
    child.join();
  });
  t.join();
  EXPECT_EQ(seen_child, std::vector<int>{all.back()});
  EXPECT_EQ(allowed_cpus(), all) << "the calling thread of the test is untouched";
  const Status bad = pin_to_cpus(std::vector<int>{1000});
  EXPECT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("CPU 1000"), std::string::npos);
}

TEST(CpuAffinity, NumaNodes) {
  auto node0 = cpus_of_numa_node(0);
  ASSERT_TRUE(node0.ok()) << node0.message();  // every Linux machine has node 0
  EXPECT_FALSE(node0->empty());
  EXPECT_FALSE(cpus_of_numa_node(4096).ok());
  EXPECT_FALSE(place_memory_near(*node0).empty());
}

}  // namespace
}  // namespace lumen
