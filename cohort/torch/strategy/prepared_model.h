// The checks and steps every strategy's prepare() shares.
#pragma once

#include <memory>
#include <vector>

#include "cohort/torch/core/strategy.h"

namespace cohort::detail {

// ConfigError naming what is missing from `model` (module, forward, loss,
// optimizer), or when the strategy was prepared already.
void check_training_model(const TrainingModel& model, bool already_prepared);

// `model`, or a ConfigError saying that prepare() has not been called.
const TrainingModel& prepared(const TrainingModel& model, bool is_prepared);

// The data-parallel strategies' step loss: the gradient of it, averaged over
// `processes` processes, is the global batch's mean-loss gradient. This
// process's mean loss weighted by its share of the `global_rows` (rows x
// processes / global_rows; no extra node for an even split), or, without
// rows, zero_loss(), which still reaches every parameter so that every
// gradient hook and collective fires. Fills result.loss_sum and
// result.output (rows must be set).
at::Tensor data_parallel_loss(const TrainingModel& model, const Batch& mine, int64_t global_rows, int processes,
                              StepResult& result);

// Whether prepare() hands rank 0's state to every rank: not in a process
// joining an elastic job, which gets the members' state from its first
// ElasticState::sync() (the members meet it in their rejoin(), which hands
// nothing around either, so the collectives match).
bool prepare_syncs_state();

// model.optimizer(parameters), checked to return an optimizer.
std::unique_ptr<torch::optim::Optimizer> make_optimizer(const TrainingModel& model,
                                                        const std::vector<at::Tensor>& parameters);

}  // namespace cohort::detail
