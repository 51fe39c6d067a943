// HostWatch (a multi-host job's lost hosts) on a MemoryStore with driven
// clocks: the counters are the ones the ranks' Heartbeat threads add to.
#include "cohort/launcher/host_watch.h"

#include <gtest/gtest.h>

#include "cohort/rendezvous/membership.h"
#include "cohort/rendezvous/memory_store.h"

namespace cohort::launcher::host_watch_test {
namespace {

using namespace std::chrono_literals;

struct HostWatchTest : ::testing::Test {
  std::shared_ptr<rendezvous::MemoryStore> store = std::make_shared<rendezvous::MemoryStore>();
  // Ranks 0, 1 on h0; 2, 3 on h1.
  HostWatch watch{HostWatchOptions{.silence_s = 10}, store, {{0, "h0"}, {1, "h0"}, {2, "h1"}, {3, "h1"}}};
  HostWatch::SteadyClock::time_point t0 = HostWatch::SteadyClock::now();
  HostWatch::WallClock::time_point wall0 =
      HostWatch::WallClock::from_time_t(3600 * 24 * 365 + 12 * 3600 + 34 * 60 + 56);
  std::vector<int> all{0, 1, 2, 3};

  void beat(std::initializer_list<int> ranks) {
    for (int r : ranks) rendezvous::beat(*store, {r, 0});
  }
  std::string at(double s, const std::vector<int>& running) {
    const auto d = std::chrono::duration_cast<HostWatch::SteadyClock::duration>(std::chrono::duration<double>(s));
    return watch.check(running, t0 + d, wall0 + std::chrono::duration_cast<HostWatch::WallClock::duration>(d));
  }
};

TEST_F(HostWatchTest, BusyRanksThatBeatAreNeverJudged) {
  for (int s = 0; s <= 60; ++s) {
    beat({0, 1, 2, 3});
    EXPECT_EQ(at(s, all), "") << s;
  }
}

TEST_F(HostWatchTest, AHostWhoseRanksAllFellSilentIsNamedWithItsRanksAndSince) {
  beat({0, 1, 2, 3});
  EXPECT_EQ(at(0, all), "");
  // h1's link goes down after 2 s; h0 keeps beating.
  beat({0, 1, 2, 3});
  EXPECT_EQ(at(2, all), "");
  for (int s = 3; s < 12; ++s) {
    beat({0, 1});
    EXPECT_EQ(at(s, all), "") << "judged after " << s - 2 << " s of silence";
  }
  beat({0, 1});
  const std::string verdict = at(12, all);
  EXPECT_EQ(verdict.rfind("host h1 lost: ranks 2, 3 on it have sent no heartbeat since 12:34:58 UTC", 0), 0u)
      << verdict;
  EXPECT_NE(verdict.find("COHORT_ELASTIC_HEARTBEAT_TIMEOUT_S=10"), std::string::npos) << verdict;
  // The healthy host is not blamed.
  EXPECT_EQ(verdict.find("h0"), std::string::npos) << verdict;
}

TEST_F(HostWatchTest, ASilentRankBesideBeatingOnesIsAHungProcessNotAHost) {
  beat({0, 1, 2, 3});
  at(0, all);
  for (int s = 1; s <= 11; ++s) beat({0, 1, 2});
  const std::string verdict = at(11, all);
  EXPECT_EQ(verdict.rfind("rank 3 on h1 has sent no heartbeat since 12:34:56 UTC", 0), 0u) << verdict;
  EXPECT_NE(verdict.find("the process hangs"), std::string::npos) << verdict;
}

// The last beats of a host's ranks before its link went down are seen at
// different reads: the first to reach the limit is not a hung process while
// its neighbour's silence is about as long.
TEST_F(HostWatchTest, AHostsRanksFallingSilentAReadApartAreTheHostNotAHungRank) {
  beat({0, 1, 2, 3});
  at(0, all);
  beat({0, 1, 2});
  at(0.5, all);  // rank 2's last beat, seen half a second after rank 3's
  for (double s = 1; s < 10.5; s += 0.5) {
    beat({0, 1});
    EXPECT_EQ(at(s, all), "") << s;
  }
  beat({0, 1});
  EXPECT_EQ(at(10.5, all).rfind("host h1 lost: ranks 2, 3", 0), 0u);
}

TEST_F(HostWatchTest, RanksThatEndedOrNeverBeatAreNotWatched) {
  beat({0, 1, 2});  // rank 3 is still starting
  at(0, all);
  beat({0, 1});
  // Rank 2 ended (its beats stop with it); rank 3 never beat.
  EXPECT_EQ(at(30, {0, 1, 3}), "");
}

TEST_F(HostWatchTest, SilentHostsNotesAHostBeforeTheVerdict) {
  beat({0, 1, 2, 3});
  at(0, all);
  beat({0, 1});
  at(4, all);
  EXPECT_EQ(watch.silent_hosts(3), "host h1: ranks 2, 3 on it have sent no heartbeat since 12:34:56 UTC");
  EXPECT_EQ(watch.silent_hosts(5), "");
}

}  // namespace
}  // namespace cohort::launcher::host_watch_test
