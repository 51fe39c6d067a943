#include "cohort/torch/strategy/one_device.h"

#include <torch/torch.h>

#include "cohort/common/check.h"
#include "cohort/torch/core/zero_grad.h"
#include "cohort/torch/strategy/prepared_model.h"
#include "cohort/torch/strategy/single_process.h"

namespace cohort {

OneDeviceStrategy::OneDeviceStrategy(OneDeviceOptions options) {
  if (!options.independent_ranks) detail::check_single_process("one_device");
}

void OneDeviceStrategy::prepare(TrainingModel model) {
  detail::check_training_model(model, prepared_);
  model_ = std::move(model);
  optimizer_ = detail::make_optimizer(model_, model_.module->parameters());
  prepared_ = true;
}

torch::nn::Module& OneDeviceStrategy::module() { return *detail::prepared(model_, prepared_).module; }

torch::optim::Optimizer& OneDeviceStrategy::optimizer() {
  detail::prepared(model_, prepared_);
  return *optimizer_;
}

StepResult OneDeviceStrategy::train_step(const Batch& mine, int64_t global_rows) {
  detail::prepared(model_, prepared_);
  COHORT_CHECK_EQ(mine.rows(), global_rows) << "one_device: the process holds the whole global batch";
  StepResult result{.rows = mine.rows()};
  if (result.rows == 0) return result;
  zero_grad_to_none(*optimizer_);
  const at::Tensor output = model_.forward(*model_.module, mine.input);
  const at::Tensor loss = model_.loss(output, mine.target);
  loss.backward();
  optimizer_->step();
  result.loss_sum = loss.item<double>() * double(result.rows);
  result.output = output.detach();
  return result;
}

at::Tensor OneDeviceStrategy::predict(const at::Tensor& input) {
  detail::prepared(model_, prepared_);
  torch::NoGradGuard no_grad;
  return model_.forward(*model_.module, input);
}

void OneDeviceStrategy::save(torch::serialize::OutputArchive& archive) {
  detail::save_replicated(module(), optimizer(), archive);
}

void OneDeviceStrategy::load(torch::serialize::InputArchive& archive) {
  detail::load_replicated(module(), optimizer(), archive);
}

}  // namespace cohort
