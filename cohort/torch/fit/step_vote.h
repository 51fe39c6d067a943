// StepVote: how the processes of a fit agree, without stalling a step, to
// stop (stop_training() on any process), to end for a preemption (SIGTERM or
// SIGINT on any process), and, for an input that cannot tell alone, on each
// step's global rows.
//
// A vote is the sum over the processes of [rows, stop, preempt, the chief's
// seconds per step since its last vote] (Strategy::all_sum_async()).
// - Rows known (every process can tell every step's global rows, as a
//   Dataset's split says them): the vote is asynchronous and periodic. It is
//   cast as a voting step starts, runs beside that step's compute and
//   gradient exchange, and is read before the next voting step, as many
//   steps later as fit about `interval_s` at the chief's measured step time
//   (at least 1, at most kMaxStepsBetweenVotes). Every process reads the
//   same vote, so all derive the same cadence and stop at the same step; a
//   request takes effect within about two intervals, and the collective is
//   paid once per interval, not per step (one per step cost a small model
//   19% of its step on 2 ranks, bench/fit_overhead.sh). interval_s = 0:
//   every step votes, and a request made during step k - 1 ends training
//   before step k + 1.
// - Rows unknown (an input pipeline whose shards end unevenly): every step
//   votes on its rows before it runs, blocking.
//
// The vote knows nothing of models or worlds: `all_sum_async` and the
// clock are given, so it is tested with a sum over simulated processes
// (tests/torch/fit_units_test.cc).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>

#include "cohort/torch/core/tensor_handle.h"

namespace cohort {

struct StepVoteOptions {
  bool rows_known = true;  // the input tells every step's global rows (see above)
  double interval_s = 0.2;
  bool is_chief = false;  // the process whose step time sets the cadence
};

class StepVote {
 public:
  using AllSumAsync = std::function<TensorHandle(const at::Tensor& values)>;
  using Clock = std::function<std::chrono::steady_clock::time_point()>;
  // What this process asks for when it casts a vote.
  struct Requests {
    bool stop = false;
    bool preempt = false;
  };
  // What every process agreed on, before a step.
  struct Decision {
    bool stop = false;
    bool preempt = false;
    int64_t global_rows = 0;  // rows unknown: the step's rows over the processes
  };

  static constexpr int64_t kMaxStepsBetweenVotes = 10000;

  // `clock` empty: steady_clock::now.
  StepVote(AllSumAsync all_sum_async, StepVoteOptions options, Clock clock = {});
  // Waits for a vote still in flight (finish() normally did).
  ~StepVote();

  // The epoch begins at step `step` (of the epoch): rows known, casts its
  // first vote.
  void start(int64_t step, Requests requests);
  // Before step `step`, this process having `my_rows` of it: the agreed
  // decision when the step reads a vote (waiting for it), else nullopt.
  std::optional<Decision> before_step(int64_t step, int64_t my_rows, Requests requests);
  // The step that read a vote (before_step() decided it runs) starts: rows
  // known, casts the next vote, to be read at the step the decision's
  // cadence named.
  void step_starts(int64_t step, Requests requests);
  // The epoch ends: the vote in flight is finished, so that no collective
  // of the epoch outlives it (every process cast it).
  void finish();

  // Steps between the votes, for the chief's seconds per step `step_s`.
  static int64_t steps_between_votes(double interval_s, double step_s);

 private:
  TensorHandle cast(int64_t step, int64_t my_rows, Requests requests);

  AllSumAsync all_sum_;
  StepVoteOptions options_;
  Clock clock_;
  TensorHandle in_flight_;
  int64_t next_vote_step_ = 0;
  bool cast_this_step_ = false;
  std::chrono::steady_clock::time_point last_cast_;
  int64_t last_cast_step_ = -1;
};

}  // namespace cohort
