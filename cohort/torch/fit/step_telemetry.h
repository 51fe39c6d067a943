// StepTelemetry: fit()'s per-rank step accounting (cohort/telemetry).
//
// Every step is timed on the training thread: the input (the next batch,
// less any time blocked in a collective meanwhile: the step vote), the
// compute (the strategy's train_step and the metric update, less the time
// blocked in collectives, split by engine/blocked_time.h into waiting for
// the slowest peer and moving bytes). The sums feed
// - a telemetry::Publisher (a thread: the rank's sample in the job's store a
//   few times a second; on rank 0 the straggler detector and its line), in
//   a job with a world (cohort::init());
// - the epoch's end: each process's totals ride in the collective that
//   already merges the metrics (no collective of their own), so every rank
//   gets every rank's figures (epoch_ranks()) and the same logs:
//   slowest_rank, and slowest_rank_share, the fraction of a step the other
//   ranks spent waiting for it (its own time less the others' median, over
//   the mean step time).
// The chief also publishes the run's JobRecord and each EpochRecord, which
// the dashboard reads. COHORT_TELEMETRY=0 (read when fit() starts) turns
// all of it off but the records: no timing, no thread, empty epoch figures
// (the merge keeps its shape, so ranks that disagree on it still agree).
#pragma once

#include <ATen/Tensor.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cohort/engine/blocked_time.h"
#include "cohort/rendezvous/store.h"
#include "cohort/telemetry/job_record.h"
#include "cohort/telemetry/publisher.h"
#include "cohort/telemetry/rank_sample.h"
#include "cohort/telemetry/step_accounting.h"
#include "cohort/torch/fit/callback.h"

namespace cohort {

// Times a checkpoint write (checkpoint_writer.cc) from its construction to
// its destruction, less the collectives meanwhile (which count as waits),
// into this thread's total, which StepTelemetry reads.
class CheckpointTimer {
 public:
  CheckpointTimer();
  ~CheckpointTimer();
  CheckpointTimer(const CheckpointTimer&) = delete;
  CheckpointTimer& operator=(const CheckpointTimer&) = delete;

 private:
  std::chrono::steady_clock::time_point start_;
  engine::BlockedTime blocked_;
};
uint64_t this_thread_checkpoint_ns();

class StepTelemetry {
 public:
  using Clock = std::chrono::steady_clock;

  // `processes`: the strategy's process count (rows of the epoch merge);
  // rank and world come from cohort::init() when there is one.
  StepTelemetry(int processes, bool chief);
  ~StepTelemetry();

  // The marks of one step, in order.
  void step_begins() {
    if (!enabled_) return;
    begin_ = Clock::now();
    blocked_begin_ = engine::this_thread_blocked_time();
    checkpoint_begin_ = this_thread_checkpoint_ns();
  }
  void input_ready() {
    if (!enabled_) return;
    input_end_ = Clock::now();
    blocked_input_ = engine::this_thread_blocked_time();
  }
  void compute_begins() {
    if (!enabled_) return;
    compute_begin_ = Clock::now();
    blocked_compute_begin_ = engine::this_thread_blocked_time();
  }
  void compute_done() {
    if (!enabled_) return;
    compute_end_ = Clock::now();
    blocked_compute_ = engine::this_thread_blocked_time();
  }
  void step_ends(int64_t rows, int64_t epoch, int64_t step);

  // The epoch's totals of this process as a row of the merge (zeros but
  // this process's row), and, after the merge, every process's figures and
  // the logs they give. Empty with one process.
  at::Tensor epoch_rows() const;
  void finish_epoch(const at::Tensor& merged_rows, Logs& logs);
  const std::vector<telemetry::RankSample>& epoch_ranks() const { return epoch_ranks_; }

  // The chief's records for the dashboard (no-ops elsewhere or without a store).
  void publish_job(const telemetry::JobRecord& job);
  void publish_epoch(int64_t epoch, int64_t step, const Logs& logs);

 private:
  int processes_;
  bool enabled_;  // COHORT_TELEMETRY
  int rank_ = 0;
  bool chief_;
  std::shared_ptr<rendezvous::Store> store_;
  telemetry::StepAccounting accounting_;
  std::unique_ptr<telemetry::Publisher> publisher_;
  std::vector<telemetry::RankSample> epoch_ranks_;
  Clock::time_point begin_, input_end_, compute_begin_, compute_end_;
  engine::BlockedTime blocked_begin_, blocked_input_, blocked_compute_begin_, blocked_compute_;
  // this_thread_checkpoint_ns() at the last step's end and this step's
  // begin: a checkpoint written between them (an epoch's end) counts in
  // this step.
  uint64_t checkpoint_seen_ = 0, checkpoint_begin_ = 0;
};

}  // namespace cohort
