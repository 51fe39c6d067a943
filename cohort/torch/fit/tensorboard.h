// TensorBoard: the run's scalars as TensorBoard event files (Keras's
// TensorBoard callback), written by the chief:
//
//   logdir/train/events.out.tfevents.<seconds>.<host>.<pid>.<n>.v2
//     epoch_<key> for every training log of the epoch (epoch_loss,
//     epoch_accuracy, every metric), epoch_learning_rate,
//     epoch_steps_per_second, at step = the epoch (0-based, as Keras);
//     every rank's step accounting over the epoch (Model::epoch_ranks()):
//     rank_<r>/step_time_ms, compute_ms, peer_wait_ms, transfer_ms,
//     input_ms and samples_per_second, so the straggler shows;
//     with update_freq = N also batch_<key> (this process's running values,
//     as the batch-end logs are) and batch_steps_per_second at step = the
//     steps done, every N steps
//   logdir/validation/events.out.tfevents...
//     epoch_<key> for every val_<key> (the prefix dropped, as Keras)
//
// Files are flushed at every epoch's end, after every batch summary, on
// preemption and at the end of training; a process killed at any point
// leaves files that read whole up to the last flush (cohort/tensorboard).
// Steps never repeat or go back in the plot: each run writes a tag's step
// only above the largest already in the run directory (read when the
// chief first writes: tensorboard/run_writer.h), so a job resumed from a
// backup, or the survivors of an elastic change redoing the steps since the
// last commit (their chief possibly another process), add only new steps.
// A second fit() with the same logdir whose epochs restart at 0 therefore
// adds no epoch scalars below the first one's: give each run its own logdir.
//
// Cost per step without a batch summary due: a virtual call, a comparison
// and a modulo; no allocation, no I/O.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "cohort/torch/fit/callback.h"

namespace cohort {

struct TensorBoardOptions {
  // Batch scalars every this many steps (Keras's integer update_freq); 0:
  // epoch scalars only (Keras's "epoch").
  int64_t update_freq = 0;
  // epoch_steps_per_second (the epoch's steps over its seconds, validation
  // included) and batch_steps_per_second (over the steps since the previous
  // batch summary).
  bool write_steps_per_second = true;
};

std::shared_ptr<Callback> tensorboard(std::string logdir, TensorBoardOptions options = {});

}  // namespace cohort
