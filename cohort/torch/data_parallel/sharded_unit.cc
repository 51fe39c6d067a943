#include "cohort/torch/data_parallel/sharded_unit.h"

#include <torch/torch.h>

#include "cohort/common/check.h"
#include "cohort/torch/data_parallel/zero_optimizer.h"

namespace cohort {

void ShardedUnitImpl::reset() {
  ModuleWrapper::reset();
  // The original's zero strategy does not drive the copy.
  schedule_.reset();
  unit_ = -1;
}

void ShardedUnitImpl::bind(std::shared_ptr<Schedule> schedule, int unit) {
  schedule_ = std::move(schedule);
  unit_ = unit;
}

at::Tensor ShardedUnitImpl::forward(const at::Tensor& input) {
  if (!schedule_ || !schedule_->training) return run(input);
  COHORT_CHECK_AS(ConfigError, unit_ == schedule_->next)
      << "zero: ShardedUnit " << unit_ << " was called when unit " << schedule_->next
      << "'s turn had come: while a step trains, each unit runs once, in the order the units were registered";
  ++schedule_->next;
  return run_sharded_unit(*schedule_->zero, unit_, &input, [this](const at::Tensor& x) { return run(x); });
}

at::Tensor run_sharded_unit(ZeroOptimizer& zero, int unit, const at::Tensor* input,
                            const std::function<at::Tensor(const at::Tensor&)>& run) {
  const bool last = unit + 1 == zero.units();
  zero.gather(unit);
  if (!last) zero.prefetch(unit + 1);
  at::Tensor output = input ? run(*input) : at::Tensor();
  if (last) return output;  // backward starts with it
  zero.release(unit);
  // Backward gathers the unit again just before its own backward runs.
  if (output.defined() && output.requires_grad())
    output.register_hook([&zero, unit](const at::Tensor& grad) {
      zero.backward_reached(unit);
      zero.gather(unit);
      return grad;
    });
  return output;
}

}  // namespace cohort
