// cohort/telemetry without a job: the straggler detector on synthetic
// samples (closed-form ratios), the JSON forms round-tripping, the epoch
// and event counters in a store, and the publisher's threads over a
// MemoryStore naming a rank fed slow steps.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "cohort/common/error.h"
#include "cohort/rendezvous/memory_store.h"
#include "cohort/telemetry/job_record.h"
#include "cohort/telemetry/keys.h"
#include "cohort/telemetry/publisher.h"
#include "cohort/telemetry/rank_sample.h"
#include "cohort/telemetry/step_accounting.h"
#include "cohort/telemetry/straggler.h"

namespace cohort::telemetry {
namespace {

RankSample sample(int rank, double compute, double input = 0, double transfer = 1, double peer_wait = 0) {
  return {.rank = rank,
          .size = 3,
          .host = "h" + std::to_string(rank),
          .pid = 100 + rank,
          .window_steps = 10,
          .step_ms = compute + input + transfer + peer_wait,
          .compute_ms = compute,
          .peer_wait_ms = peer_wait,
          .transfer_ms = transfer,
          .input_ms = input};
}

TEST(Straggler, TheSlowestOwnTimeAgainstTheOthersMedianAndItsCause) {
  // Own times 11, 16, 13: rank 1 is 16 / median(11, 13) - 1 = 1/3 slower, at compute.
  const auto slow = slowest_rank({sample(0, 10), sample(1, 15, 0, 1, 0), sample(2, 12)});
  ASSERT_TRUE(slow);
  EXPECT_EQ(slow->rank, 1);
  EXPECT_DOUBLE_EQ(slow->slower_by, 16.0 / 12.0 - 1);
  EXPECT_EQ(slow->cause, "compute");
  // Waiting for peers is not own time: rank 0 waits 30 ms and is not slow.
  EXPECT_EQ(slowest_rank({sample(0, 10, 0, 1, 30), sample(1, 10), sample(2, 14)})->rank, 2);
  EXPECT_EQ(slowest_rank({sample(0, 10), sample(1, 10, 6), sample(2, 10)})->cause, "input");
  EXPECT_EQ(slowest_rank({sample(0, 10), sample(1, 10), sample(2, 10, 0, 7)})->cause, "network");
  // Fewer than two ranks with steps: nothing to compare.
  RankSample idle = sample(1, 50);
  idle.window_steps = 0;
  EXPECT_FALSE(slowest_rank({sample(0, 10), idle}));
}

TEST(Straggler, NamedOnlyAfterHoldingAboveTheThreshold) {
  StragglerDetector d({.threshold = 0.2, .hold_s = 2});
  const std::vector<RankSample> slow = {sample(0, 10), sample(1, 14), sample(2, 10)};  // 15/11: 36% slower
  EXPECT_FALSE(d.observe(slow, 100.0).present);
  EXPECT_FALSE(d.observe(slow, 101.5).present);
  const StragglerVerdict v = d.observe(slow, 102.0);
  ASSERT_TRUE(v.present);
  EXPECT_TRUE(d.changed());
  EXPECT_EQ(v.rank, 1);
  EXPECT_EQ(v.host, "h1");
  EXPECT_EQ(v.pid, 101);
  EXPECT_EQ(v.cause, "compute");
  EXPECT_DOUBLE_EQ(v.since_unix_s, 100.0);
  EXPECT_EQ(v.message(), "rank 1 (pid 101 on h1) is 36% slower than the median of the others at compute for 2.0 s");
  EXPECT_TRUE(d.observe(slow, 103.0).present);
  EXPECT_FALSE(d.changed());
  // 19% slower is below the threshold: cleared at once, and the hold starts over.
  const std::vector<RankSample> close = {sample(0, 10), sample(1, 12.09), sample(2, 10)};
  EXPECT_FALSE(d.observe(close, 104.0).present);
  EXPECT_TRUE(d.changed());
  EXPECT_FALSE(d.observe(slow, 105.0).present);
  // Another rank taking over restarts the hold.
  EXPECT_FALSE(d.observe({sample(0, 10), sample(1, 10), sample(2, 14)}, 106.0).present);
  EXPECT_FALSE(d.observe({sample(0, 10), sample(1, 10), sample(2, 14)}, 107.9).present);
  EXPECT_EQ(d.observe({sample(0, 10), sample(1, 10), sample(2, 14)}, 108.0).rank, 2);
}

TEST(Telemetry, JsonFormsRoundTrip) {
  RankSample s = sample(2, 12.5, 0.25, 1.125, 3.5);
  s.membership_epoch = 4;
  s.epoch = 3;
  s.step = 1234;
  s.unix_time_s = 1765000000.123456;
  s.other_ms = 0.0625;
  s.samples_per_s = 812.5;
  s.rss_bytes = int64_t(1) << 33;
  const RankSample r = rank_sample_from_json(to_json(s));
  EXPECT_EQ(to_json(r), to_json(s));
  EXPECT_EQ(r.host, "h2");
  EXPECT_DOUBLE_EQ(r.unix_time_s, s.unix_time_s);
  EXPECT_EQ(r.rss_bytes, s.rss_bytes);
  EXPECT_DOUBLE_EQ(wait_ms(r), 3.5 + 1.125);

  const JobRecord job{.strategy = "multi_worker \"ddp\"",
                      .backend = "shm",
                      .size = 3,
                      .replicas = 3,
                      .global_batch = 96,
                      .epochs = 2,
                      .steps_per_epoch = 625,
                      .unix_time_s = 1765000000.5};
  EXPECT_EQ(to_json(job_record_from_json(to_json(job))), to_json(job));
  const EpochRecord epoch{
      .epoch = 1, .step = 1250, .unix_time_s = 2, .logs = {{"loss", 0.4375}, {"val_accuracy", 0.875}}};
  const EpochRecord e = epoch_record_from_json(to_json(epoch));
  EXPECT_EQ(e.logs, epoch.logs);
  EXPECT_EQ(e.step, 1250);
  StragglerDetector d({.threshold = 0.2, .hold_s = 0});
  const StragglerVerdict v = d.observe({sample(0, 10), sample(1, 20), sample(2, 10)}, 5);
  EXPECT_EQ(to_json(straggler_verdict_from_json(to_json(v))), to_json(v));
  EXPECT_THROW(rank_sample_from_json("{\"rank\": 1}"), ConfigError);
}

TEST(Telemetry, EpochCountOnlyRisesAndEventsAreNumbered) {
  rendezvous::MemoryStore store;
  publish_epoch(store, 0, {.epoch = 0, .logs = {{"loss", 1}}});
  publish_epoch(store, 1, {.epoch = 1, .logs = {{"loss", 0.5}}});
  EXPECT_EQ(store.get(keys::kEpochCount), "2");
  // An elastic redo of epoch 0 overwrites it and leaves the count.
  publish_epoch(store, 0, {.epoch = 0, .logs = {{"loss", 0.9}}});
  EXPECT_EQ(store.get(keys::kEpochCount), "2");
  EXPECT_EQ(epoch_record_from_json(store.get(keys::epoch(0))).logs.at("loss"), 0.9);
  publish_event(store, {.kind = "membership", .message = "rank 2 left"});
  publish_event(store, {.kind = "failure", .message = "rank 1 died"});
  EXPECT_EQ(store.get(keys::kEventCount), "2");
  EXPECT_EQ(event_record_from_json(store.get(keys::event(1))).message, "rank 1 died");
}

TEST(Telemetry, StepTotalsMeansAndTheRest) {
  StepAccounting a;
  a.add({.rows = 10,
         .step_ns = 10'000'000,
         .compute_ns = 6'000'000,
         .peer_wait_ns = 2'000'000,
         .transfer_ns = 1'000'000,
         .input_ns = 500'000},
        0, 1);
  a.add({.rows = 30,
         .step_ns = 30'000'000,
         .compute_ns = 20'000'000,
         .peer_wait_ns = 4'000'000,
         .transfer_ns = 3'000'000,
         .input_ns = 2'500'000},
        0, 2);
  const StepAccounting::Window w = a.take_window();
  EXPECT_EQ(w.step, 2);
  EXPECT_EQ(w.totals.steps, 2);
  EXPECT_DOUBLE_EQ(w.totals.mean_ms(&StepTotals::step_ns), 20.0);
  EXPECT_DOUBLE_EQ(w.totals.mean_ms(&StepTotals::compute_ns), 13.0);
  EXPECT_DOUBLE_EQ(w.totals.samples_per_s(), 40 / 0.04);
  EXPECT_EQ(w.totals.other_ns(), 40'000'000u - 26'000'000u - 6'000'000u - 4'000'000u - 3'000'000u);
  EXPECT_EQ(a.take_window().totals.steps, 0);  // taken
  EXPECT_EQ(a.epoch().steps, 2);               // the epoch's sums stay
  a.reset_epoch();
  EXPECT_EQ(a.epoch().steps, 0);
}

// Three publishers over one store, as three ranks: rank 1's steps compute
// twice as long; rank 0's detector names it, writes the verdict and an event.
TEST(Telemetry, PublishersNameARankFedSlowSteps) {
  auto store = std::make_shared<rendezvous::MemoryStore>();
  std::vector<StepAccounting> accounting(3);
  std::vector<std::unique_ptr<Publisher>> publishers;
  for (int r = 0; r < 3; ++r)
    publishers.push_back(std::make_unique<Publisher>(store, accounting[size_t(r)],
                                                     PublisherOptions{.rank = r,
                                                                      .size = 3,
                                                                      .period = std::chrono::milliseconds(20),
                                                                      .watch_stragglers = r == 0,
                                                                      .print = false,
                                                                      .straggler = {.threshold = 0.2, .hold_s = 0.1}}));
  StragglerVerdict v;
  for (int step = 1; step <= 2000 && !v.present; ++step) {
    for (int r = 0; r < 3; ++r) {
      const uint64_t compute = r == 1 ? 20'000'000 : 10'000'000;
      accounting[size_t(r)].add({.rows = 8,
                                 .step_ns = 21'000'000,
                                 .compute_ns = compute,
                                 .peer_wait_ns = 20'000'000 - compute,
                                 .transfer_ns = 1'000'000},
                                0, step);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    v = publishers[0]->verdict();
  }
  ASSERT_TRUE(v.present);
  EXPECT_EQ(v.rank, 1);
  EXPECT_EQ(v.cause, "compute");
  EXPECT_DOUBLE_EQ(v.slower_by, 21.0 / 11.0 - 1);
  publishers.clear();  // each publishes its last window and stops
  // Rank 0 wrote what it saw last: the slow rank still slow.
  const StragglerVerdict stored = straggler_verdict_from_json(store->get(keys::kStraggler));
  EXPECT_TRUE(stored.present);
  EXPECT_EQ(stored.rank, 1);
  const RankSample s1 = rank_sample_from_json(store->get(keys::rank_sample(1)));
  EXPECT_EQ(s1.rank, 1);
  EXPECT_DOUBLE_EQ(s1.compute_ms, 20.0);
  EXPECT_EQ(event_record_from_json(store->get(keys::event(0))).kind, "straggler");
}

}  // namespace
}  // namespace cohort::telemetry
