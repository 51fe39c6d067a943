// An idle engine sleeps on the doorbell without burning CPU (asserted on
// process CPU time, a resource measure, with a generous bound), and wakes
// when any rank submits. A rank with ops waiting probes the group, and in an
// abandoned elastic world those probes fail what can never complete.
#include <gtest/gtest.h>

#include <atomic>
#include <optional>
#include <string>
#include <vector>

#include "tests/engine/engine_ranks.h"

namespace cohort::testing::engine_idle_test {
namespace {

using engine::Engine;

TEST(EngineIdle, SleepsWithoutBurningCpuAndWakesOnWork) {
  const int n = 3;
  std::atomic<int> measured{0};
  double cpu_used = -1;
  run_engine_ranks(n, [&](EngineRank& info, Engine& e) {
    std::vector<float> a(256, 1.0f);
    e.allreduce_async("warm", BufferView{a.data(), a.size(), DType::f32}).wait();
    // Every engine goes to sleep after its linger time, and asleep costs no
    // CPU. Asleep is observed as a state: a second in which rank 0's engine
    // ran no cycle (every cycle takes every rank, so none ran anywhere),
    // while lingering engines cycle back to back. (Counting sleeps from
    // after wait() raced with the 300 us linger: a rank descheduled that
    // long read the count after its engine had already gone to sleep, and
    // waited for another sleep that nothing would cause.)
    if (info.rank == 0) {
      EXPECT_TRUE(eventually([&] {
        const auto cycles = e.stats().cycles;
        const double cpu0 = process_cpu_seconds();
        std::this_thread::sleep_for(std::chrono::seconds(1));
        cpu_used = process_cpu_seconds() - cpu0;
        return e.stats().cycles == cycles;
      })) << "the engines never stayed asleep for a second while every rank was idle";
      measured = 1;
    }
    ASSERT_TRUE(eventually([&] { return measured.load() == 1; }));
    EXPECT_GT(e.stats().sleeps, 0u);
    // One rank's submission wakes the group; the others' complete the op.
    if (info.rank == n - 1) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    e.allreduce_async("after", BufferView{a.data(), a.size(), DType::f32}).wait();
    EXPECT_EQ(a[0], float(n * n));
  });
  // Three engines asleep for a second: far below one core-second (a spinning
  // engine thread alone would use about 1 s).
  EXPECT_GE(cpu_used, 0.0);
  EXPECT_LT(cpu_used, 0.2) << "idle engines used " << cpu_used << " s of CPU in 1 s";
}

TEST(EngineIdle, RingCountsAndBurstsWithinTheLingerDoNotRing) {
  auto options = engine_test_options();
  options.linger = std::chrono::seconds(30);  // never sleeps during this test
  run_engine_ranks(2, [&](EngineRank& info, Engine& e) {
    std::vector<float> a(4, 1.0f);
    for (int i = 0; i < 20; ++i) e.allreduce_async("burst", BufferView{a.data(), 4, DType::f32}).wait();
    EXPECT_EQ(e.stats().sleeps, 0u);
    EXPECT_EQ(e.stats().rings, 0u) << "a running engine is not rung";
  }, options);
}

TEST(EngineIdle, ARankWaitingOnOpsWakesTheGroupForLivenessProbes) {
  auto options = engine_test_options();
  options.liveness_probe = std::chrono::milliseconds(30);
  std::atomic<bool> probed{false};
  run_engine_ranks(2, [&](EngineRank& info, Engine& e) {
    std::vector<float> a(4, 1.0f);
    if (info.rank == 0) {
      engine::Handle h = e.allreduce_async("late", BufferView{a.data(), 4, DType::f32});
      // Asleep with an op waiting: the engine rings every probe interval, and
      // each ring runs a cycle on every rank (where the communicator would
      // notice a dead peer).
      const auto cycles = e.stats().cycles;
      EXPECT_TRUE(eventually([&] { return e.stats().rings >= 3 && e.stats().cycles > cycles + 2; }));
      probed = true;
      h.wait();
    } else {
      ASSERT_TRUE(eventually([&] { return probed.load(); }));
      EXPECT_EQ(e.stats().rings, 0u) << "a rank with nothing waiting does not probe";
      e.allreduce_async("late", BufferView{a.data(), 4, DType::f32}).wait();
    }
    EXPECT_EQ(a[0], 2.0f);
  }, options);
}

TEST(EngineIdle, AnAbandonedWorldFailsOpsThatMembersWhoLeftNeverSubmit) {
  // Ranks 0 and 1 gave up a wait elsewhere (a parameter server's reply) and
  // will never submit "only_mine"; their engines still take part in every
  // cycle, so no communicator check fails rank 2's wait. Once the launcher
  // abandons the world, the probes fail it on every rank, naming the loss.
  auto options = engine_test_options();
  options.liveness_probe = std::chrono::milliseconds(30);
  std::atomic<bool> abandoned{false};
  std::atomic<bool> failed{false};
  const std::string why = "member 4.0 of elastic epoch 0 was lost";
  options.abandoned = [&]() -> std::optional<std::string> {
    if (abandoned) return why;
    return std::nullopt;
  };
  run_engine_ranks(
      3,
      [&](EngineRank& info, Engine& e) {
        std::vector<float> a(4, 1.0f);
        if (info.rank == 2) {
          engine::Handle h = e.allreduce_async("only_mine", BufferView{a.data(), 4, DType::f32});
          // Probes without an abandonment leave the op waiting.
          ASSERT_TRUE(eventually([&] { return e.stats().rings >= 3; }));
          EXPECT_FALSE(h.poll());
          abandoned = true;
          try {
            h.wait();
            ADD_FAILURE() << "the op completed without ranks 0 and 1";
          } catch (const PeerLostError& x) {
            EXPECT_NE(std::string(x.what()).find("the elastic world was abandoned: " + why), std::string::npos)
                << x.what();
          }
          failed = true;
        } else {
          ASSERT_TRUE(eventually([&] { return failed.load(); }));
          // The group's engines stopped with the same cause.
          const std::string error = error_of(e.allreduce_async("after", BufferView{a.data(), 4, DType::f32}));
          EXPECT_NE(error.find("the elastic world was abandoned: " + why), std::string::npos) << error;
        }
      },
      options);
}

}  // namespace
}  // namespace cohort::testing::engine_idle_test
