// cohort/engine/autotune.h: the search converges on synthetic cost surfaces
// with a known optimum (exactly without noise, within 5% with noise), keeps
// the configured baseline when it is best, ignores warm-up and settle steps;
// and engines with COHORT_AUTOTUNE on agree on rank 0's choice.
#include "cohort/engine/autotune.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iostream>
#include <set>
#include <sstream>
#include <thread>

#include "tests/engine/engine_ranks.h"

namespace cohort::engine::autotune_test {
namespace {

using Cost = std::function<double(const AutotuneParams&)>;

// A bowl in log space: quadratic in log2(threshold) and in the cycle time's
// index, minimal at (threshold_opt, cycle_opt).
Cost bowl(int64_t threshold_opt, int64_t cycle_opt) {
  return [=](const AutotuneParams& p) {
    const double lt = std::log2(double(std::max<int64_t>(p.fusion_threshold_bytes, 16 << 10)));
    const double lo = std::log2(double(std::max<int64_t>(threshold_opt, 16 << 10)));
    const double lc = std::log2(1 + double(p.cycle_time_us)), lco = std::log2(1 + double(cycle_opt));
    return 0.100 * (1 + 0.02 * (lt - lo) * (lt - lo) + 0.01 * (lc - lco) * (lc - lco));
  };
}

// Multiplicative noise that only adds time, up to `amount`, deterministic.
struct Noise {
  uint64_t state = 12345;
  double amount = 0;
  double operator()() {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return 1 + amount * double(state >> 11) / double(uint64_t(1) << 53);
  }
};

struct Outcome {
  AutotuneParams result;
  int steps = 0;
};

Outcome drive(Autotuner& t, const Cost& cost, double noise = 0, int max_steps = 1000) {
  Noise n{12345, noise};
  for (int s = 0; s < max_steps && !t.converged(); ++s) t.on_step(cost(t.current()) * n());
  return {t.current(), t.converged_at_step()};
}

TEST(Autotune, FindsTheOptimumOfANoiselessBowlInUnder50Steps) {
  for (int64_t thr : {int64_t(0), int64_t(64) << 10, int64_t(1) << 20, int64_t(16) << 20, int64_t(64) << 20})
    for (int64_t cyc : {int64_t(0), int64_t(1000), int64_t(4000)}) {
      Autotuner t({256 << 10, 0});
      const Outcome r = drive(t, bowl(thr, cyc));
      ASSERT_TRUE(t.converged());
      EXPECT_LT(r.steps, 50) << thr << " " << cyc;
      EXPECT_EQ(r.result.fusion_threshold_bytes, thr) << thr << " " << cyc;
      EXPECT_EQ(r.result.cycle_time_us, cyc) << thr << " " << cyc;
    }
}

TEST(Autotune, WithinFivePercentOfTheOptimumUnderNoise) {
  // Step times up to 5% slower at random: the choice's true cost must be
  // within 5% of the optimum's.
  for (uint64_t seed : {1, 2, 3, 4, 5, 6, 7, 8})
    for (int64_t thr : {int64_t(64) << 10, int64_t(4) << 20, int64_t(64) << 20}) {
      const Cost cost = bowl(thr, 1000);
      Autotuner t({256 << 10, 0});
      Noise n{seed, 0.05};
      while (!t.converged()) t.on_step(cost(t.current()) * n());
      EXPECT_LT(t.converged_at_step(), 50);
      EXPECT_LE(cost(t.current()), 1.05 * cost({thr, 1000})) << seed << " " << thr;
    }
}

// The bowl with a third coordinate, DDP's bucket cap (log2 as the threshold).
Cost bowl3(int64_t threshold_opt, int64_t cycle_opt, int64_t bucket_opt) {
  const Cost two = bowl(threshold_opt, cycle_opt);
  return [=](const AutotuneParams& p) {
    const double lb = std::log2(double(p.bucket_bytes)) - std::log2(double(bucket_opt));
    return two(p) + 0.100 * 0.03 * lb * lb;
  };
}

// As the engine sets it up when DDP drives the steps (engine.h, tune_step).
AutotuneOptions with_buckets() {
  AutotuneOptions o;
  o.bucket_bytes = default_bucket_grid();
  o.settle_steps = 0;
  return o;
}

TEST(Autotune, TunesTheBucketCapWithTheEnginesKnobsInUnder50Steps) {
  for (int64_t bucket : default_bucket_grid())
    for (int64_t thr : {int64_t(0), int64_t(1) << 20, int64_t(64) << 20})
      for (int64_t cyc : {int64_t(0), int64_t(4000)}) {
        Autotuner t({256 << 10, 0, 25 << 20}, with_buckets());
        const Outcome r = drive(t, bowl3(thr, cyc, bucket));
        ASSERT_TRUE(t.converged());
        EXPECT_LT(r.steps, 50) << bucket << " " << thr << " " << cyc;
        EXPECT_EQ(r.result, (AutotuneParams{thr, cyc, bucket}));
      }
  // Under noise that only adds up to 5%: within 5% of the optimum.
  for (uint64_t seed : {1, 2, 3, 4, 5, 6}) {
    const Cost cost = bowl3(4 << 20, 1000, 1 << 20);
    Autotuner t({256 << 10, 0, 25 << 20}, with_buckets());
    Noise n{seed, 0.05};
    while (!t.converged()) t.on_step(cost(t.current()) * n());
    EXPECT_LT(t.converged_at_step(), 50) << seed;
    EXPECT_LE(cost(t.current()), 1.05 * cost({4 << 20, 1000, 1 << 20})) << seed;
  }
  // Without a bucket grid the cap is not a coordinate: it stays the start's.
  Autotuner u({256 << 10, 0});
  drive(u, bowl(1 << 20, 0));
  EXPECT_EQ(u.current().bucket_bytes, 0);
  EXPECT_THROW(Autotuner({256 << 10, 0, 0}, with_buckets()), ConfigError);
  AutotuneOptions bad = with_buckets();
  bad.bucket_bytes.push_back(-1);
  EXPECT_THROW(Autotuner({256 << 10, 0, 1 << 20}, bad), ConfigError);
}

TEST(Autotune, BayesianSearchesTheBucketCapToo) {
  AutotuneOptions o = with_buckets();
  o.method = AutotuneMethod::bayesian;
  o.max_samples = 14;
  Autotuner t({256 << 10, 0, 25 << 20}, o);
  drive(t, bowl3(4 << 20, 1000, 1 << 20));
  ASSERT_TRUE(t.converged());
  EXPECT_EQ(t.trials().size(), 14u);
  bool other_cap = false;
  for (const auto& tr : t.trials()) other_cap |= tr.params.bucket_bytes != (25 << 20);
  EXPECT_TRUE(other_cap);
}

TEST(Autotune, KeepsTheBaselineWhenItIsBest) {
  Autotuner t({256 << 10, 250});
  const Outcome r = drive(t, bowl(256 << 10, 250), 0.02);
  EXPECT_EQ(r.result, (AutotuneParams{256 << 10, 250}));
  // Values outside the grid join it.
  Autotuner u({3 << 20, 0});
  drive(u, bowl(3 << 20, 0));
  EXPECT_EQ(u.current().fusion_threshold_bytes, 3 << 20);
}

TEST(Autotune, IgnoresWarmupAndSettleSteps) {
  // Warm-up and settle steps cost 100x; they must never reach a trial.
  AutotuneOptions o;
  o.warmup_steps = 3;
  o.settle_steps = 1;
  Autotuner t({256 << 10, 0}, o);
  const Cost cost = bowl(4 << 20, 0);
  AutotuneParams last = t.current();
  int since_change = 0;
  for (int s = 0; s < 200 && !t.converged(); ++s) {
    const bool settling = s < 3 || since_change == 0;
    const bool changed = t.on_step(settling ? 100 * cost(t.current()) : cost(t.current()));
    since_change = changed ? 0 : since_change + 1;
    if (s < 3) since_change = 1;  // the warm-up is not a change
    last = t.current();
  }
  ASSERT_TRUE(t.converged());
  ASSERT_FALSE(t.trials().empty());
  for (const AutotuneTrial& tr : t.trials()) EXPECT_LT(tr.seconds_per_step, 1.0) << tr.step;
  EXPECT_EQ(last.fusion_threshold_bytes, 4 << 20);
  // The trial log lists them all.
  const std::string csv = autotune_csv(t);
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), std::ptrdiff_t(t.trials().size() + 1));
}

TEST(Autotune, BayesianStaysWithinItsBudget) {
  AutotuneOptions o;
  o.method = AutotuneMethod::bayesian;
  o.max_samples = 11;
  Autotuner t({256 << 10, 0}, o);
  const Cost cost = bowl(4 << 20, 1000);
  drive(t, cost);
  ASSERT_TRUE(t.converged());
  EXPECT_EQ(t.trials().size(), 11u);
  // The best observed point is what it keeps.
  double best = 1e9;
  for (const auto& tr : t.trials()) best = std::min(best, tr.seconds_per_step);
  EXPECT_DOUBLE_EQ(cost(t.current()), best);
}

TEST(Autotune, StepClockMarksTheFirstOpsRecurrence) {
  StepClock c;
  using C = StepClock::Clock;
  const auto t0 = C::time_point{};
  EXPECT_FALSE(c.observe(7, t0));
  EXPECT_FALSE(c.observe(8, t0 + std::chrono::milliseconds(1)));
  const auto s = c.observe(7, t0 + std::chrono::milliseconds(10));
  ASSERT_TRUE(s);
  EXPECT_EQ(*s, std::chrono::milliseconds(10));
  // Op 8 recurs too, but the marker is 7 only.
  EXPECT_FALSE(c.observe(8, t0 + std::chrono::milliseconds(11)));
  EXPECT_EQ(c.observe(7, t0 + std::chrono::milliseconds(25)), std::chrono::milliseconds(15));
  EXPECT_NE(op_identity("a"), op_identity("b"));
  EXPECT_NE(op_identity(1, 2), op_identity(1, 3));
}

TEST(Autotune, StepClockSkipsOpsThatRunOnce) {
  // The initial broadcasts (1, 2) run once; steps are ops 7, 8 repeating.
  StepClock c;
  using ms = std::chrono::milliseconds;
  const auto t0 = StepClock::Clock::time_point{};
  for (uint64_t op : {1, 2}) EXPECT_FALSE(c.observe(op, t0));
  EXPECT_FALSE(c.observe(7, t0 + ms(5)));
  EXPECT_FALSE(c.observe(8, t0 + ms(6)));
  EXPECT_EQ(c.observe(7, t0 + ms(20)), ms(15));  // nullopt while the marker is a one-off
  EXPECT_FALSE(c.observe(8, t0 + ms(21)));
  EXPECT_EQ(c.observe(7, t0 + ms(40)), ms(20));
}

// Engine options with autotune on, its log a fresh file named after `what`.
std::pair<EngineOptions, std::string> tuning_options(const std::string& what) {
  const std::string log = ::testing::TempDir() + what + "_" + std::to_string(::getpid()) + ".csv";
  std::remove(log.c_str());
  return {testing::autotune_test_options(log), log};
}

TEST(Autotune, EnginesAgreeOnRankZerosChoice) {
  // Two ranks "train" 60 steps of named allreduces with autotune on; every
  // result stays exact while the threshold and cycle time change under them,
  // rank 0 logs its trials, and after the same cycles (shutdown) both ranks
  // run with the same settings, reached through the same number of changes.
  const auto [options, log] = tuning_options("autotune");
  std::vector<EngineStats> final_stats(2);
  testing::run_engine_ranks(2, [&](testing::EngineRank& info, Engine& e) {
    std::vector<std::vector<float>> bufs(8);
    for (int step = 0; step < 60; ++step) {
      std::this_thread::sleep_for(std::chrono::microseconds(300));
      std::vector<Handle> hs;
      for (size_t i = 0; i < bufs.size(); ++i) {
        bufs[i].assign(1000 * (i + 1), float(info.rank + 1));
        hs.push_back(e.allreduce_async("g" + std::to_string(i), BufferView{bufs[i].data(), bufs[i].size(), DType::f32}));
      }
      for (auto& h : hs) h.wait();
      for (auto& b : bufs)
        for (float v : b) ASSERT_EQ(v, 3.0f);
    }
    e.shutdown();
    final_stats[size_t(info.rank)] = e.stats();
  }, options);
  EXPECT_GT(final_stats[0].tuning_changes, 0u) << "the search never moved off the configured settings";
  EXPECT_EQ(final_stats[1].tuning_changes, final_stats[0].tuning_changes);
  EXPECT_EQ(final_stats[1].fusion_threshold_bytes, final_stats[0].fusion_threshold_bytes);
  EXPECT_EQ(final_stats[1].cycle_time_us, final_stats[0].cycle_time_us);
  std::cout << "after " << final_stats[0].tuning_changes << " change(s): fusion threshold "
            << final_stats[0].fusion_threshold_bytes << " B, cycle time " << final_stats[0].cycle_time_us << " us\n";
  std::ifstream in(log);
  ASSERT_TRUE(in.good()) << "no autotune log at " << log;
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string text = buffer.str();
  EXPECT_EQ(text.rfind("step,fusion_threshold_bytes,cycle_time_us,seconds_per_step,bucket_bytes\n", 0), 0u);
  EXPECT_GE(std::count(text.begin(), text.end(), '\n'), 5);
  std::remove(log.c_str());
}

TEST(Autotune, TuneStepHandsTheStepsToRankZerosCaller) {
  // A wrapper (DDP) marks the steps on rank 0: the search then covers its
  // bucket cap too, converges, and says so; other ranks are not asked.
  auto [options, log] = tuning_options("autotune_steps");
  std::vector<int64_t> caps;
  int calls = 0;
  const int driver = 0, other = 0;
  testing::run_engine_ranks(2, [&](testing::EngineRank& info, Engine& e) {
    EXPECT_TRUE(e.autotunes());
    bool searching = true;
    for (int step = 0; step < 200 && searching; ++step) {
      const auto t = e.tune_step(&driver, 25 << 20);
      // One driver at a time: another wrapper on the same engine is not asked.
      EXPECT_FALSE(e.tune_step(&other, 25 << 20).has_value());
      if (info.rank == 0) {
        ASSERT_TRUE(t.has_value());
        if (step == 0) {
          EXPECT_EQ(t->bucket_bytes, 25 << 20);
        }
        caps.push_back(t->bucket_bytes);
        searching = t->searching;
        ++calls;
      } else {
        EXPECT_FALSE(t.has_value());
      }
      // Stands in for the step's work; rank 0's end of the search reaches
      // rank 1 the way DDP's broadcast does.
      std::vector<float> b(1000, float(info.rank + 1));
      int64_t more = searching ? 1 : 0;
      e.allreduce_async("g", BufferView{b.data(), b.size(), DType::f32}).wait();
      e.broadcast_async("more", BufferView{&more, 1, DType::i64}, 0).wait();
      searching = more != 0;
      ASSERT_EQ(b[0], 3.0f);
    }
    EXPECT_FALSE(searching) << "rank " << info.rank;
  }, options);
  // Whatever the timings: at most every point of each coordinate's grid
  // once (5 + 1 caps, 7 + 1 thresholds, 4 + 1 cycle times, sharing the
  // start) and the last two samples, 3 steps each, after 3 warm-up steps.
  EXPECT_LE(calls, 1 + 3 + 3 * (6 + 7 + 4 + 2));
  EXPECT_GT(std::set<int64_t>(caps.begin(), caps.end()).size(), 1u);
  std::ifstream in(log);
  ASSERT_TRUE(in.good()) << "no autotune log at " << log;
  std::string line;
  std::getline(in, line);
  int trials = 0;
  while (std::getline(in, line)) {
    ++trials;
    EXPECT_NE(line.substr(line.rfind(',') + 1), "0") << "a trial without a bucket cap: " << line;
  }
  EXPECT_GT(trials, 5);
  std::remove(log.c_str());
  // A driver that goes mid-search leaves the configured settings: the cap
  // it started from, and no search.
  testing::run_engine_ranks(2, [&](testing::EngineRank& info, Engine& e) {
    if (info.rank != 0) return;
    for (int step = 0; step < 8; ++step) ASSERT_TRUE(e.tune_step(&driver, 25 << 20).has_value());
    e.end_tune_steps(&driver);
    const auto t = e.tune_step(&driver, 25 << 20);
    ASSERT_TRUE(t.has_value());
    EXPECT_EQ(t->bucket_bytes, 25 << 20);
    EXPECT_FALSE(t->searching);
  }, options);
  // An engine that does not tune has nothing to say.
  options.autotune = 0;
  testing::run_engine_ranks(2, [&](testing::EngineRank&, Engine& e) {
    EXPECT_FALSE(e.autotunes());
    EXPECT_FALSE(e.tune_step(&driver, 25 << 20).has_value());
  }, options);
}

}  // namespace
}  // namespace cohort::engine::autotune_test
