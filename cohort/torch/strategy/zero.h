// zero: data parallelism with ZeRO's sharding (data_parallel/zero_optimizer.h),
// one replica per rank as multi_worker. stage=1 splits the optimizer state
// over the ranks, stage=2 also the gradients; every rank starts from rank
// 0's parameters. The program's optimizer factory is called once, over this
// rank's blocks of the flat parameters, and must be per element (SGD, Adam,
// AdamW, Adagrad, RMSprop). Uneven and empty shares of a step's rows are
// weighted as in multi_worker.
//
// Checkpoints: save() (collective) writes the full model and the optimizer
// state joined back per parameter, the form multi_worker and one_device
// save: the checkpoint loads into them, and into zero at any world size;
// load() takes this rank's blocks of it (from any of them).
#pragma once

#include <memory>
#include <string>

#include "cohort/torch/core/runtime.h"
#include "cohort/torch/core/strategy.h"
#include "cohort/torch/data_parallel/zero_optimizer.h"
#include "cohort/torch/strategy/rank_strategy.h"

namespace cohort {

struct ZeroStrategyOptions {
  int stage = 1;                             // 1 or 2
  int64_t bucket_bytes = int64_t(25) << 20;  // flat buckets of about this many bytes
  engine::Engine* engine = nullptr;          // null: cohort::init()'s (started if needed)
};

class ZeroStrategy : public RankStrategy {
 public:
  explicit ZeroStrategy(ZeroStrategyOptions options = {});
  ~ZeroStrategy() override;

  std::string spec() const override;
  void prepare(TrainingModel model) override;  // collective
  // The optimizer over this rank's blocks (its param groups carry the lr).
  torch::optim::Optimizer& optimizer() override;
  StepResult train_step(const Batch& mine, int64_t global_rows) override;
  void save(torch::serialize::OutputArchive& archive) override;
  void load(torch::serialize::InputArchive& archive) override;

  const ZeroOptimizer& sharded() const;
  const ZeroStrategyOptions& options() const { return options_; }
  ZeroMemory memory() const { return sharded().memory(); }

 private:
  ZeroStrategyOptions options_;
  std::unique_ptr<ZeroOptimizer> zero_;
};

}  // namespace cohort
