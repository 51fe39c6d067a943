#include "cohort/torch/strategy/one_device.h"

#include "cohort/common/check.h"
#include "cohort/torch/core/strategy_registry.h"
#include "cohort/torch/core/zero_grad.h"

namespace cohort {

COHORT_REGISTER_STRATEGY(one_device, {.name = "one_device",
                                      .description = "one process, one replica, no communication (the reference)",
                                      .make = [](const Spec&) -> std::unique_ptr<Strategy> {
                                        return std::make_unique<OneDeviceStrategy>();
                                      }});

OneDeviceStrategy::OneDeviceStrategy(OneDeviceOptions options)
    : SingleProcessStrategy("one_device", 1, options.independent_ranks) {}

void OneDeviceStrategy::do_prepare() { optimizer_ = make_optimizer(model().module->parameters()); }

StepResult OneDeviceStrategy::do_train_step(const Batch& mine, int64_t global_rows) {
  COHORT_CHECK_EQ(mine.rows(), global_rows) << "one_device: the process holds the whole global batch";
  StepResult result{.rows = mine.rows()};
  if (result.rows == 0) return result;
  zero_grad_to_none(*optimizer_);
  const at::Tensor output = model().forward(module(), mine.input);
  const at::Tensor loss = model().loss(output, mine.target);
  loss.backward();
  optimizer_->step();
  result.loss_sum = loss.item<double>() * double(result.rows);
  result.output = output.detach();
  return result;
}

}  // namespace cohort
