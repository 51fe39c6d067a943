// EpochIterator: one epoch of a training input as fit() runs it (Keras's
// EpochIterator): the stream's batches in order, each with its step's global
// rows, from the step fit() stands at until the epoch's last, or until the
// processes agree to stop or to end for a preemption (StepVote, decided
// before a step). A step whose global batch is empty ends the epoch (the
// data ran out), except under a strategy's own sampling (DP-SGD's Poisson
// steps may be empty everywhere and are still steps).
//
// Contract with the stream (data/batch_stream.h): a step that the vote
// cancels takes nothing from it, so its state never counts a batch that was
// not trained on; a batch whose rows differ from what next_rows() said is a
// MismatchError.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>

#include "cohort/torch/core/strategy.h"
#include "cohort/torch/data/batch_stream.h"
#include "cohort/torch/fit/step_vote.h"

namespace cohort {

class EpochIterator {
 public:
  enum class End { running, data, stop, preempt };
  struct Step {
    int64_t index = 0;  // in the epoch
    Batch batch;        // this process's rows
    int64_t global_rows = 0;
  };

  // The stream's epoch is started; steps [first, last) remain. `requests`
  // says what this process asks for when a vote is cast.
  EpochIterator(BatchStream& stream, int64_t first, int64_t last, bool sampled, StepVote& vote,
                std::function<StepVote::Requests()> requests);

  // The next step, or nullopt when the epoch ends (end() says why).
  std::optional<Step> next();
  End end() const { return end_; }

 private:
  BatchStream& stream_;
  int64_t step_, last_;
  bool sampled_;
  StepVote& vote_;
  std::function<StepVote::Requests()> requests_;
  End end_ = End::running;
};

}  // namespace cohort
