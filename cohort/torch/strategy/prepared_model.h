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

// model.optimizer(parameters), checked to return an optimizer.
std::unique_ptr<torch::optim::Optimizer> make_optimizer(const TrainingModel& model,
                                                        const std::vector<at::Tensor>& parameters);

}  // namespace cohort::detail
