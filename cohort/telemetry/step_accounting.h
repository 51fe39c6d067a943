// StepAccounting: one rank's measured step times, accumulated on the
// training thread (add(), a few adds under a mutex: no allocation, no
// collective) and read by the publisher's thread (take_window()) and by
// fit() at epoch end (epoch()).
#pragma once

#include <cstdint>
#include <mutex>

#include "cohort/telemetry/rank_sample.h"

namespace cohort::telemetry {

// Nanoseconds of one step, split as rank_sample.h describes.
struct StepTimes {
  int64_t rows = 0;
  uint64_t step_ns = 0;
  uint64_t compute_ns = 0;
  uint64_t peer_wait_ns = 0;
  uint64_t transfer_ns = 0;
  uint64_t input_ns = 0;
  uint64_t checkpoint_ns = 0;
};

// Sums over some steps: the steps' StepTimes added field by field.
struct StepTotals : StepTimes {
  int64_t steps = 0;

  void add(const StepTimes& t);
  // Per-step means in milliseconds; rows per second of step time.
  double mean_ms(uint64_t StepTotals::*part) const;
  double samples_per_s() const;
  // The time not spent in any of the five parts (bookkeeping, callbacks).
  uint64_t other_ns() const;
};

// `s` with its per-step figures (window_steps, the means, samples/s) set
// from `t`.
void set_means(RankSample& s, const StepTotals& t);

class StepAccounting {
 public:
  // The step's epoch and global step count after it (for the sample).
  void add(const StepTimes& t, int64_t epoch, int64_t step);
  // The sums since the previous take_window() (and reset them), with the
  // epoch and step of the last add().
  struct Window {
    StepTotals totals;
    int64_t epoch = 0;
    int64_t step = 0;
  };
  Window take_window();
  // The sums since reset_epoch().
  StepTotals epoch() const;
  void reset_epoch();

 private:
  mutable std::mutex mutex_;
  StepTotals window_, epoch_;
  int64_t last_epoch_ = 0, last_step_ = 0;
};

}  // namespace cohort::telemetry
