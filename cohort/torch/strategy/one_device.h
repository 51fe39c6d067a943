// one_device: the model, its optimizer and every step in this process, on
// one device (the CPU); no communication. TensorFlow's OneDeviceStrategy:
// the reference that every other strategy's training equals.
#pragma once

#include <memory>

#include "cohort/torch/strategy/single_process_strategy.h"

namespace cohort {

struct OneDeviceOptions {
  // Let every rank of a launched job train its own model alone, without
  // communication (a benchmark's floor); otherwise such a launch is a
  // ConfigError, since it is almost always a mistake.
  bool independent_ranks = false;
};

class OneDeviceStrategy : public SingleProcessStrategy {
 public:
  // ConfigError when started as one rank of several (see
  // single_process_strategy.h) unless options.independent_ranks.
  explicit OneDeviceStrategy(OneDeviceOptions options = {});

 protected:
  std::string do_spec() const override { return "one_device"; }
  void do_prepare() override;
  torch::optim::Optimizer& do_optimizer() override { return *optimizer_; }
  StepResult do_train_step(const Batch& mine, int64_t global_rows) override;

 private:
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
};

}  // namespace cohort
