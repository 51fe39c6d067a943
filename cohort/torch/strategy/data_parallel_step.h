// What the data-parallel strategies' steps share (multi_worker, zero,
// parameter_server): the loss that makes averaged gradients the global
// batch's, and whether prepare() hands rank 0's state around.
#pragma once

#include <ATen/Tensor.h>
#include <torch/nn/module.h>

#include <cstdint>

#include "cohort/torch/core/strategy.h"

namespace cohort::detail {

// The data-parallel strategies' step loss: the gradient of it, averaged over
// `processes` processes, is the global batch's mean-loss gradient. This
// process's mean loss weighted by its share of the `global_rows` (rows x
// processes / global_rows; no extra node for an even split), or, without
// rows, zero_loss(), which still reaches every parameter so that every
// gradient hook and collective fires. Fills result.loss_sum and
// result.output (rows must be set).
at::Tensor data_parallel_loss(const TrainingModel& model, const Batch& mine, int64_t global_rows, int processes,
                              StepResult& result);

// The loss of a step without rows: zero, yet reaching every trainable
// parameter, so that a backward through it gives zero gradients everywhere
// and every gradient hook fires (the collectives of the other processes'
// step find this one).
at::Tensor zero_loss(torch::nn::Module& module);

// Whether prepare() hands rank 0's state to every rank: not in a process
// joining an elastic job, which gets the members' state from its first
// ElasticState::sync() (the members meet it in their rejoin(), which hands
// nothing around either, so the collectives match).
bool prepare_syncs_state();

}  // namespace cohort::detail
