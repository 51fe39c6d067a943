#include "cohort/torch/strategy/prepared_model.h"

#include "cohort/common/check.h"
#include "cohort/torch/core/runtime.h"
#include "cohort/torch/strategy/single_process.h"

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

at::Tensor data_parallel_loss(const TrainingModel& model, const Batch& mine, int64_t global_rows, int processes,
                              StepResult& result) {
  torch::nn::Module& module = *model.module;
  if (result.rows == 0) return zero_loss(module);
  const at::Tensor output = model.forward(module, mine.input);
  const at::Tensor mean = model.loss(output, mine.target);
  result.loss_sum = mean.item<double>() * double(result.rows);
  result.output = output.detach();
  const int64_t weighted_rows = result.rows * processes;
  return weighted_rows == global_rows ? mean : mean * (double(weighted_rows) / double(global_rows));
}

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const TrainingModel& model,
                                                        const std::vector<at::Tensor>& parameters) {
  std::unique_ptr<torch::optim::Optimizer> optimizer = model.optimizer(parameters);
  COHORT_CHECK_AS(ConfigError, optimizer != nullptr) << "TrainingModel: the optimizer factory returned null";
  return optimizer;
}

bool prepare_syncs_state() { return !(initialized() && elastic_joining()); }

}  // namespace cohort::detail
