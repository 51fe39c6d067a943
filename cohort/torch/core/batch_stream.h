// BatchStream: training input that orders, shards and resumes itself (an
// input pipeline, cohort/torch/data/pipeline_input.h), which fit() reads in
// place of an indexable Dataset. It sits in core/, beside Strategy, so that
// fit/ can drive it and data/ can implement it without either depending on
// the other.
//
// How fit() (cohort/torch/fit/model.h) drives one, on every process:
//   remaining = start_epoch(strategy, batch_size, epoch, batches_done, resume)
//   repeat remaining times (fewer when training stops):
//     rows = next_rows()   // voted on with the other processes first (unless
//                          // next_global_rows() says the step's rows alone)
//     batch = next()       // only once the vote says the step runs
//   state()                // inside save_fit_state(): into the checkpoint
// Contracts:
// - start_epoch() returns the same count on every process; step k of every
//   process together is one global batch of at most `global_batch_size`
//   rows, and over the epoch every row is read exactly once by exactly one
//   process, none padded.
// - `resume` is empty, or a state() of this stream saved by a run with any
//   number of processes; the epoch then continues exactly where that run's
//   processes together had got (fit() keeps counting its batches from
//   `batches_done`).
// - next_rows() says, without reading anything, how many rows the next
//   next() returns on this process (0 for an empty step, Batch{}): a step
//   that the vote cancels (preemption, a stop) takes nothing from the
//   stream, so state() never counts a batch that was not trained on.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "cohort/torch/core/strategy.h"

namespace cohort {

class BatchStream {
 public:
  virtual ~BatchStream() = default;

  // Rows in one epoch, over all processes.
  virtual int64_t size() const = 0;
  // Begins (or resumes) `epoch`; returns the steps left in it (see above).
  virtual int64_t start_epoch(const Strategy& strategy, int64_t global_batch_size, int64_t epoch,
                              int64_t batches_done, const std::string& resume) = 0;
  virtual int64_t next_rows() const = 0;
  // The rows of the next step over all processes, when this process can
  // tell them without asking the others (an indexable data set can); fit()
  // then overlaps its per-step vote with the step (model.h). nullopt: fit()
  // sums next_rows() over the processes before each step.
  virtual std::optional<int64_t> next_global_rows() const { return std::nullopt; }
  virtual Batch next() = 0;
  // Where the epoch stands after the batches taken so far, as text for a
  // checkpoint (the same on every process at a step boundary); empty when
  // fit()'s own position says it all.
  virtual std::string state() const = 0;
};

}  // namespace cohort
