// InputContext: what an input needs to know of the strategy that reads it
// (TensorFlow's tf.distribute.InputContext): how many replicas train, how
// many processes read input (one pipeline per process), which one this is,
// and the global batch. A strategy makes it (Strategy::input_context());
// inputs (cohort/torch/data: BatchStream, PipelineInput, the Dataset
// adapter) take it instead of the strategy, so that an input depends on
// four numbers, not on the distribution machinery.
//
// Replicas are numbered process by process: process p holds replicas
// [p * local, (p + 1) * local), local = num_replicas_in_sync /
// num_input_pipelines (every process holds as many).
#pragma once

#include <cstdint>

#include "cohort/torch/core/collectives.h"

namespace cohort {

struct InputContext {
  int num_replicas_in_sync = 1;   // over all processes
  int num_input_pipelines = 1;    // the processes that read input
  int input_pipeline_id = 0;      // this process's, in [0, num_input_pipelines)
  int64_t global_batch_size = 0;  // rows of one step over all replicas (0: not known)

  // The replicas this process holds.
  int local_replicas() const { return num_replicas_in_sync / num_input_pipelines; }
  // global_batch_size / num_replicas_in_sync; a ConfigError when the global
  // batch does not divide evenly (TensorFlow's get_per_replica_batch_size).
  int64_t per_replica_batch_size() const;
  // This process's rows of a global batch of `global_rows`: the contiguous
  // union of its replicas' blocks, each replica's block as
  // reduce_scatter_block() splits rows (the first global_rows %
  // num_replicas_in_sync replicas get one row more; nothing is padded).
  RowBlock rows_of(int64_t global_rows) const;
  // rows_of(global_batch_size).
  RowBlock rows_of_batch() const { return rows_of(global_batch_size); }
};

}  // namespace cohort
