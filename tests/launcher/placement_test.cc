// Where ranks go: hosts filled in order, local ranks per host, and which
// hosts are this machine.
#include "cohort/launcher/placement.h"

#include <gtest/gtest.h>

#include "cohort/launcher/options.h"

namespace cohort::launcher::placement_test {
namespace {

TEST(Placement, FillsHostsInOrder) {
  const auto p = place_ranks({{"a", 2}, {"b", 2}}, 4);
  ASSERT_EQ(p.size(), 4u);
  const std::vector<RankPlacement> expected{
      {.rank = 0, .host = "a", .host_index = 0, .local_rank = 0, .local_size = 2, .remote = true},
      {.rank = 1, .host = "a", .host_index = 0, .local_rank = 1, .local_size = 2, .remote = true},
      {.rank = 2, .host = "b", .host_index = 1, .local_rank = 0, .local_size = 2, .remote = true},
      {.rank = 3, .host = "b", .host_index = 1, .local_rank = 1, .local_size = 2, .remote = true}};
  EXPECT_EQ(p, expected);
  EXPECT_EQ(host_count(p), 2);
}

TEST(Placement, UnevenHostsAndFewerRanksThanSlots) {
  const auto p = place_ranks({{"a", 1}, {"b", 2}, {"c", 2}}, 4);
  ASSERT_EQ(p.size(), 4u);
  EXPECT_EQ(p[0].host, "a");
  EXPECT_EQ(p[0].local_size, 1);
  EXPECT_EQ(p[1].host, "b");
  EXPECT_EQ(p[2].host, "b");
  EXPECT_EQ(p[2].local_rank, 1);
  // c gets one of its two slots, and local size 1.
  EXPECT_EQ(p[3].host, "c");
  EXPECT_EQ(p[3].host_index, 2);
  EXPECT_EQ(p[3].local_rank, 0);
  EXPECT_EQ(p[3].local_size, 1);
  EXPECT_EQ(host_count(place_ranks({{"a", 4}, {"b", 4}}, 3)), 1);
}

TEST(Placement, TooManyRanksIsAnError) {
  EXPECT_THROW(place_ranks({{"a", 1}}, 2), UsageError);
}

TEST(Placement, ThisMachineRunsItsRanksDirectly) {
  EXPECT_TRUE(is_this_host("localhost"));
  EXPECT_TRUE(is_this_host("127.0.0.1"));
  EXPECT_TRUE(is_this_host(this_host_name()));
  EXPECT_FALSE(is_this_host("no-such-host-" + this_host_name()));
  EXPECT_FALSE(is_this_host("user@" + this_host_name()));  // ssh as someone else: remote
  const auto p = place_ranks({{"localhost", 1}, {"elsewhere.invalid", 1}}, 2);
  EXPECT_FALSE(p[0].remote);
  EXPECT_TRUE(p[1].remote);
  const auto local = place_locally(3, "me");
  ASSERT_EQ(local.size(), 3u);
  EXPECT_EQ(local[2].local_rank, 2);
  EXPECT_EQ(local[2].local_size, 3);
  EXPECT_FALSE(local[2].remote);
}

}  // namespace
}  // namespace cohort::launcher::placement_test
