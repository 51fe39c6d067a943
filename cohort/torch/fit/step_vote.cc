#include "cohort/torch/fit/step_vote.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "cohort/common/check.h"
#include "cohort/common/logging.h"

namespace cohort {
namespace {

// The slots of a vote.
enum Slot : int64_t { kRows, kStop, kPreempt, kChiefStepSeconds, kSlots };

}  // namespace

StepVote::StepVote(AllSumAsync all_sum_async, StepVoteOptions options, Clock clock)
    : all_sum_(std::move(all_sum_async)), options_(options), clock_(std::move(clock)) {
  if (!clock_) clock_ = [] { return std::chrono::steady_clock::now(); };
  last_cast_ = clock_();
}

StepVote::~StepVote() {
  try {
    finish();
  } catch (const std::exception& e) {
    COHORT_LOG(debug) << "fit: the last vote failed: " << e.what();
  }
}

int64_t StepVote::steps_between_votes(double interval_s, double step_s) {
  if (interval_s <= 0 || step_s <= 0) return 1;
  return static_cast<int64_t>(std::clamp(std::floor(interval_s / step_s), 1.0, double(kMaxStepsBetweenVotes)));
}

TensorHandle StepVote::cast(int64_t step, int64_t my_rows, Requests requests) {
  const auto now = clock_();
  double step_s = 0;
  if (options_.is_chief && last_cast_step_ >= 0 && step > last_cast_step_)
    step_s = std::chrono::duration<double>(now - last_cast_).count() / double(step - last_cast_step_);
  last_cast_ = now;
  last_cast_step_ = step;
  const std::vector<double> votes{double(my_rows), requests.stop ? 1.0 : 0.0, requests.preempt ? 1.0 : 0.0, step_s};
  return all_sum_(at::tensor(votes, at::kDouble));
}

void StepVote::start(int64_t step, Requests requests) {
  finish();
  next_vote_step_ = step;
  last_cast_step_ = -1;
  if (options_.rows_known) in_flight_ = cast(step, 0, requests);
}

std::optional<StepVote::Decision> StepVote::before_step(int64_t step, int64_t my_rows, Requests requests) {
  cast_this_step_ = false;
  if (options_.rows_known && step != next_vote_step_) return std::nullopt;
  const at::Tensor votes =
      (options_.rows_known ? std::exchange(in_flight_, TensorHandle()) : cast(step, my_rows, requests))
          .wait()
          .contiguous();
  COHORT_CHECK_EQ(votes.numel(), int64_t(kSlots)) << "fit: a vote of the wrong size";
  const double* v = votes.data_ptr<double>();
  Decision d{.stop = v[kStop] > 0, .preempt = v[kPreempt] > 0, .global_rows = static_cast<int64_t>(v[kRows])};
  next_vote_step_ = step + steps_between_votes(options_.interval_s, v[kChiefStepSeconds]);
  cast_this_step_ = true;
  return d;
}

void StepVote::step_starts(int64_t step, Requests requests) {
  if (options_.rows_known && cast_this_step_) in_flight_ = cast(step, 0, requests);
  cast_this_step_ = false;
}

void StepVote::finish() {
  if (in_flight_.valid()) std::exchange(in_flight_, TensorHandle()).wait();
}

}  // namespace cohort
