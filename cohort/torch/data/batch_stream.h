// BatchStream: input that orders, shards and resumes itself, as fit() reads
// it: an input pipeline (pipeline_input.h), or an indexable Dataset through
// its adapter (dataset_stream.h). It knows of the strategy only its
// InputContext (core/input_context.h): how many processes read, which one
// this is, and the global batch.
//
// How fit() (cohort/torch/fit/model.h) drives one, on every process:
//   remaining = start_epoch(context, epoch, batches_done, resume)
//   repeat remaining times (fewer when training stops):
//     rows = next_rows()   // voted on with the other processes first (unless
//                          // next_global_rows() says the step's rows alone)
//     batch = next()       // only once the vote says the step runs
//   state()                // inside save_fit_state(): into the checkpoint
// Contracts:
// - start_epoch() returns the same count on every process; step k of every
//   process together is one global batch of at most
//   context.global_batch_size rows, and over the epoch every row is read exactly once by exactly one
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

#include "cohort/torch/core/input_context.h"
#include "cohort/torch/core/strategy.h"

namespace cohort {

class BatchStream {
 public:
  virtual ~BatchStream() = default;

  // Rows in one epoch, over all processes.
  virtual int64_t size() const = 0;
  // Begins (or resumes) `epoch`; returns the steps left in it (see above).
  virtual int64_t start_epoch(const InputContext& context, int64_t epoch, int64_t batches_done,
                              const std::string& resume) = 0;
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
