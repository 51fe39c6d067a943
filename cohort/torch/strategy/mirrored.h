// mirrored: one process, several replicas of the model on threads (today's
// DataParallel, data_parallel/data_parallel.h). Each step scatters this
// process's batch over the replicas, runs forward and backward on all of
// them at once, sums their gradients into the program's module (replica 0)
// and steps one optimizer over it.
//
// central_storage is the same class under its TensorFlow name: its point is
// that variables live in one place (the CPU) while compute is replicated,
// which is exactly how the replicas work here, since on a CPU-only host the
// "devices" are threads of one address space. There is no second copy of
// the variables to keep in sync, so the two strategies coincide on this
// hardware; they would differ on a host with accelerators (mirrored copies
// per device, central storage on the CPU), which this build has none of.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "cohort/torch/data_parallel/data_parallel.h"
#include "cohort/torch/strategy/single_process_strategy.h"

namespace cohort {

struct MirroredOptions {
  int replicas = 2;             // replicas (worker threads) in this process
  int threads_per_replica = 1;  // intra-op threads of each replica
  std::string name = "mirrored";  // or "central_storage" (see the file comment)
};

class MirroredStrategy : public SingleProcessStrategy {
 public:
  // ConfigError when started as one rank of several, or for bad options.
  explicit MirroredStrategy(MirroredOptions options = {});
  ~MirroredStrategy() override;

 protected:
  std::string do_spec() const override;
  // The module must be a torch::nn::Cloneable (clone() implemented), as for
  // DataParallel: the replicas are its clones; a ConfigError otherwise says
  // what to change. cohort's wrappers (ShardedUnit, PerSample) are Cloneable.
  void do_prepare() override;
  torch::optim::Optimizer& do_optimizer() override { return *optimizer_; }
  StepResult do_train_step(const Batch& mine, int64_t global_rows) override;
  at::Tensor do_predict(const at::Tensor& input) override;

 private:
  detail::DataParallelCore::ForwardFn replica_forward();

  MirroredOptions options_;
  std::vector<std::shared_ptr<torch::nn::Module>> replicas_;
  std::unique_ptr<detail::DataParallelCore> core_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
};

}  // namespace cohort
