// Workloads from timelines: synthetic traces with known answers (period,
// step boundary, medians, DDP's ordered lane, errors), and the timeline a
// real engine writes while "training".
#include "tools/sim/timeline_workload.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <sstream>
#include <thread>

#include "cohort/common/error.h"
#include "cohort/common/json.h"
#include "tests/engine/engine_ranks.h"

namespace cohort::sim::timeline_test {
namespace {

// A Chrome trace in cohort's timeline layout: lanes by thread_name, one
// ALLREDUCE complete event per op (times in microseconds).
class Trace {
 public:
  void op(const std::string& lane, double bytes, double ts_us, double dur_us, bool failed = false) {
    auto [it, inserted] = lanes_.try_emplace(lane, int(lanes_.size()) + 1);
    if (inserted)
      events_ << ",\n{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 0, \"tid\": " << it->second
              << ", \"args\": {\"name\": \"" << lane << "\"}}";
    events_ << ",\n{\"name\": \"QUEUE\", \"ph\": \"X\", \"pid\": 0, \"tid\": " << it->second << ", \"ts\": " << ts_us
            << ", \"dur\": " << (lane == "grad/c" ? 250 : 1) << "}";
    events_ << ",\n{\"name\": \"ALLREDUCE\", \"ph\": \"X\", \"pid\": 0, \"tid\": " << it->second << ", \"ts\": " << ts_us
            << ", \"dur\": " << dur_us << ", \"args\": {\"bytes\": " << bytes << ", \"cached\": 1"
            << (failed ? ", \"failed\": 1" : "") << "}}";
  }
  json::Value doc() const {
    return json::parse("[\n{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": 0, \"tid\": 0, \"args\": {\"name\": \"x\"}}" +
                       events_.str() + "\n]");
  }

 private:
  std::map<std::string, int> lanes_;
  std::ostringstream events_;
};

std::string error_of(const Trace& t) {
  try {
    workload_from_timeline(t.doc(), "trace.json");
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(TimelineWorkload, RecoversTheStepFromNamedOps) {
  // Step k starts at 100k ms: forward to 40 ms, then gradients c, b, a at
  // 40, 60 and 80 ms (+ k us of jitter), each reduced in 5 ms. Before them
  // a warm-up op that does not repeat.
  Trace t;
  t.op("init", 4, 0, 10);
  for (int k = 0; k < 6; ++k) {
    const double s = 100000.0 * k + 1000;
    t.op("grad/c", 3000, s + 40000 + k, 5000);
    t.op("grad/b", 2000, s + 60000 + k, 5000);
    t.op("grad/a", 1000, s + 80000 + k, 5000);
  }
  // After training, the program reduces its timings (not a step).
  t.op("ordered", 96, 700000, 50);
  const Workload w = workload_from_timeline(t.doc(), "trace.json");
  ASSERT_EQ(w.tensors.size(), 3u);
  EXPECT_FALSE(w.ordered);
  EXPECT_EQ(w.tensors[0].name, "grad/c");
  EXPECT_EQ(w.tensors[2].name, "grad/a");
  EXPECT_EQ(w.tensors[1].bytes, 2000);
  // A step starts when the previous step's last op completed (85 ms + k us
  // into it): c comes 55 ms later (+1 us of jitter), b 75 ms, a 95 ms.
  EXPECT_NEAR(w.tensors[0].ready_s, 0.055001, 1e-9);
  EXPECT_NEAR(w.tensors[1].ready_s, 0.075001, 1e-9);
  EXPECT_NEAR(w.tensors[2].ready_s, 0.095001, 1e-9);
  EXPECT_NEAR(w.compute_end_s, 0.095001, 1e-9);
  EXPECT_NEAR(w.measured_step_s, 0.100001, 1e-9);
  // Every steady step's period: steps 2-5, after the first quarter of the
  // six (rounded up) left out as warm-up.
  ASSERT_EQ(w.step_periods_s.size(), 4u);
  for (double p : w.step_periods_s) EXPECT_NEAR(p, 0.100001, 1e-9);
  // The first op of each step waited 250 us for a cycle.
  EXPECT_NEAR(w.measured_wake_s, 250e-6, 1e-12);
}

TEST(TimelineWorkload, TheFirstOpCanBeNamed) {
  // Backward's big layer (b, 90 ms after c) waits longer than the forward
  // pass (c, 40 ms after a completes): only naming c puts the boundary right.
  Trace t;
  for (int k = 0; k < 5; ++k) {
    const double s = 150000.0 * k;
    t.op("c", 4, s + 20000, 10);
    t.op("b", 8, s + 110000, 10);
    t.op("a", 16, s + 130000, 10);
  }
  EXPECT_EQ(workload_from_timeline(t.doc(), "t").tensors[0].name, "b");
  const Workload w = workload_from_timeline(t.doc(), "t", "c");
  EXPECT_EQ(w.tensors[0].name, "c");
  EXPECT_NEAR(w.tensors[0].ready_s, 0.150000 - 0.130010 + 0.020000, 1e-9);
  EXPECT_THROW(workload_from_timeline(t.doc(), "t", "z"), ConfigError);
}

TEST(TimelineWorkload, DdpBucketsOnTheOrderedLane) {
  // The first step's buckets differ (before DDP's rebuild): it is not part
  // of the repetition.
  Trace t;
  t.op("ordered", 500, 0, 100);
  t.op("ordered", 700, 1000, 100);
  for (int k = 0; k < 5; ++k) {
    const double s = 50000.0 * (k + 1);
    t.op("ordered", 1 << 20, s + 10000, 2000);
    t.op("ordered", 1 << 20, s + 20000, 2000);
    t.op("ordered", 123, s + 30000, 2000);
  }
  const Workload w = workload_from_timeline(t.doc(), "trace.json");
  EXPECT_TRUE(w.ordered);
  ASSERT_EQ(w.tensors.size(), 3u);
  EXPECT_EQ(w.tensors[0].name, "bucket.0");
  EXPECT_EQ(w.tensors[2].bytes, 123);
  EXPECT_NEAR(w.tensors[0].ready_s, 0.028, 1e-9);  // 32 ms (end of the last bucket) -> 60 ms
}

TEST(TimelineWorkload, ErrorsSayWhatIsMissing) {
  Trace none;
  EXPECT_NE(error_of(none).find("no ALLREDUCE events"), std::string::npos);
  Trace once;
  for (int i = 0; i < 5; ++i) once.op("g" + std::to_string(i), 4, i * 10.0, 1);
  EXPECT_NE(error_of(once).find("no repeating training step"), std::string::npos) << error_of(once);
  Trace failed;
  for (int k = 0; k < 4; ++k) failed.op("g", 4, k * 10.0, 1, k == 2);
  EXPECT_NE(error_of(failed).find("failed allreduce"), std::string::npos);
  EXPECT_THROW(workload_from_timeline(json::parse("{\"x\": 1}"), "t.json"), ConfigError);
}

TEST(TimelineWorkload, FromARealEngineRun) {
  // One rank "trains": forward 20 ms, then gradients 1 ms apart, waited for
  // at the end of the step, as DistributedOptimizer does. (The forward pass
  // is the longest wait by far, as the step boundary detection assumes.)
  const std::string path = ::testing::TempDir() + "sim_timeline_" + std::to_string(::getpid()) + ".json";
  auto options = testing::engine_test_options();
  options.timeline_path = path;
  testing::run_engine_ranks(1, [&](testing::EngineRank&, engine::Engine& e) {
    std::vector<float> a(1000), b(2000), c(3000);
    for (int step = 0; step < 6; ++step) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      std::vector<engine::Handle> hs;
      hs.push_back(e.allreduce_async("grad/c", BufferView{c.data(), c.size(), DType::f32}));
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      hs.push_back(e.allreduce_async("grad/b", BufferView{b.data(), b.size(), DType::f32}));
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      hs.push_back(e.allreduce_async("grad/a", BufferView{a.data(), a.size(), DType::f32}));
      for (auto& h : hs) h.wait();
    }
  }, options);
  const Workload w = workload_from_timeline_file(path);
  std::remove(path.c_str());
  ASSERT_EQ(w.tensors.size(), 3u);
  EXPECT_EQ(w.tensors[0].name, "grad/c");
  EXPECT_EQ(w.tensors[1].name, "grad/b");
  EXPECT_EQ(w.tensors[2].name, "grad/a");
  EXPECT_EQ(w.tensors[0].bytes, 12000);
  EXPECT_EQ(w.tensors[2].bytes, 4000);
  // Sleeps are lower bounds whatever the machine's load.
  EXPECT_GE(w.tensors[0].ready_s, 0.020);
  EXPECT_GE(w.tensors[1].ready_s - w.tensors[0].ready_s, 0.001);
  EXPECT_GE(w.tensors[2].ready_s - w.tensors[1].ready_s, 0.001);
  EXPECT_GE(w.measured_step_s, 0.022);
}

}  // namespace
}  // namespace cohort::sim::timeline_test
