#include "cohort/torch/strategy/prepared_model.h"

#include "cohort/common/check.h"

namespace cohort::detail {

void check_training_model(const TrainingModel& model, bool already_prepared) {
  COHORT_CHECK_AS(ConfigError, !already_prepared) << "a strategy trains one model: prepare() was called already";
  COHORT_CHECK_AS(ConfigError, model.module != nullptr) << "TrainingModel: no module";
  COHORT_CHECK_AS(ConfigError, static_cast<bool>(model.forward)) << "TrainingModel: no forward function";
  COHORT_CHECK_AS(ConfigError, static_cast<bool>(model.loss)) << "TrainingModel: no loss function";
  COHORT_CHECK_AS(ConfigError, static_cast<bool>(model.optimizer)) << "TrainingModel: no optimizer factory";
}

const TrainingModel& prepared(const TrainingModel& model, bool is_prepared) {
  COHORT_CHECK_AS(ConfigError, is_prepared) << "the strategy has no model yet: call prepare() first";
  return model;
}

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const TrainingModel& model,
                                                        const std::vector<at::Tensor>& parameters) {
  std::unique_ptr<torch::optim::Optimizer> optimizer = model.optimizer(parameters);
  COHORT_CHECK_AS(ConfigError, optimizer != nullptr) << "TrainingModel: the optimizer factory returned null";
  return optimizer;
}

}  // namespace cohort::detail
