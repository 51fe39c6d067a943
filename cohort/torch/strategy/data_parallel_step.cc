#include "cohort/torch/strategy/data_parallel_step.h"

#include "cohort/common/check.h"
#include "cohort/torch/core/runtime.h"

namespace cohort::detail {

at::Tensor zero_loss(torch::nn::Module& module) {
  at::Tensor loss;
  for (const at::Tensor& p : module.parameters()) {
    if (!p.requires_grad()) continue;
    const at::Tensor term = (p * 0).sum().to(at::kDouble);
    loss = loss.defined() ? loss + term : term;
  }
  COHORT_CHECK_AS(ConfigError, loss.defined()) << "the model has no trainable parameters";
  return loss;
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

bool prepare_syncs_state() { return !(initialized() && elastic_joining()); }

}  // namespace cohort::detail
