// The stall inspector's bookkeeping, with an explicit clock (no sleeping).
#include <gtest/gtest.h>

#include "cohort/engine/stall_inspector.h"

namespace cohort::engine::stall_inspector_test {
namespace {

using namespace std::chrono_literals;
using Clock = StallInspector::Clock;

TEST(StallInspector, WarnsOnceEveryPeriodNamingMissingAndPresentRanks) {
  StallInspector s(10, 0);
  const auto t0 = Clock::time_point{} + 1000s;
  s.begin(t0);
  s.observe("tensor 'a'", {true, false, true});
  s.end();
  EXPECT_TRUE(s.check(t0 + 9s).warning.empty());
  EXPECT_EQ(s.next_deadline(), t0 + 10s);
  auto f = s.check(t0 + 10s);
  EXPECT_NE(f.warning.find("tensor 'a': missing rank 1 (submitted by ranks 0, 2, waiting 10.0 s)"), std::string::npos)
      << f.warning;
  EXPECT_TRUE(f.shutdown.empty());
  EXPECT_TRUE(s.check(t0 + 15s).warning.empty()) << "reported once per period";
  EXPECT_FALSE(s.check(t0 + 20s).warning.empty());
}

TEST(StallInspector, ForgetsOpsThatStopWaitingAndTracksFromFirstSight) {
  StallInspector s(10, 0);
  const auto t0 = Clock::time_point{} + 1000s;
  s.begin(t0);
  s.observe("tensor 'a'", {true, false});
  s.end();
  s.begin(t0 + 5s);
  s.observe("tensor 'b'", {false, true});
  s.end();
  EXPECT_EQ(s.waiting(), 1u);
  auto f = s.check(t0 + 12s);
  EXPECT_TRUE(f.warning.empty()) << "'a' ran, 'b' waits since t0+5s: " << f.warning;
  f = s.check(t0 + 15s);
  EXPECT_NE(f.warning.find("tensor 'b': missing rank 0"), std::string::npos) << f.warning;
  EXPECT_EQ(f.warning.find("tensor 'a'"), std::string::npos);
}

TEST(StallInspector, ShutdownAfterItsTime) {
  StallInspector s(1, 3);
  EXPECT_TRUE(s.enabled());
  EXPECT_EQ(s.pass_interval(), std::chrono::duration_cast<Clock::duration>(50ms));
  const auto t0 = Clock::time_point{} + 1000s;
  s.begin(t0);
  s.observe("ordered op #4", {false, true});
  s.end();
  EXPECT_TRUE(s.check(t0 + 2s).shutdown.empty());
  auto f = s.check(t0 + 3s);
  EXPECT_NE(f.shutdown.find("ordered op #4: missing rank 0"), std::string::npos) << f.shutdown;
  EXPECT_NE(f.shutdown.find("COHORT_STALL_SHUTDOWN_S"), std::string::npos) << f.shutdown;
  EXPECT_FALSE(StallInspector(0, 0).enabled());
}

}  // namespace
}  // namespace cohort::engine::stall_inspector_test
