// one_device: the model, its optimizer and every step in this process, on
// one device (the CPU); no communication. TensorFlow's OneDeviceStrategy:
// the reference that every other strategy's training equals.
#pragma once

#include <memory>

#include "cohort/torch/core/strategy.h"
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
  // ConfigError when started as one rank of several (see single_process.h)
  // unless options.independent_ranks.
  explicit OneDeviceStrategy(OneDeviceOptions options = {});

  std::string spec() const override { return "one_device"; }
  int replicas_in_sync() const override { return 1; }
  int local_replicas() const override { return 1; }

  void prepare(TrainingModel model) override;
  torch::nn::Module& module() override;
  torch::optim::Optimizer& optimizer() override;
  StepResult train_step(const Batch& mine, int64_t global_rows) override;
  at::Tensor predict(const at::Tensor& input) override;
  void save(torch::serialize::OutputArchive& archive) override;
  void load(torch::serialize::InputArchive& archive) override;

 private:
  TrainingModel model_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
};

}  // namespace cohort
