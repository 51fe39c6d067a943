// multi_worker: one replica per rank, across processes and hosts, the ranks
// being those of cohort::init() (cohortrun, torchrun, mpirun, srun).
// TensorFlow's MultiWorkerMirroredStrategy; the gradient exchange is one of
// cohort's two data-parallel styles:
//   style=ddp      DistributedDataParallel: gradients bucketed and reduced
//                  during backward (data_parallel/distributed_data_parallel.h)
//   style=horovod  DistributedOptimizer: one named allreduce per parameter,
//                  fused by the engine (data_parallel/distributed_optimizer.h)
// Both start every rank from rank 0's parameters and optimizer state
// (broadcast by prepare(); in an elastic job ElasticState hands them to new
// members and to a new world instead, see rejoin()).
//
// A rank's share of a step's global batch may be smaller than the others',
// or empty: its loss is weighted by its rows so that the averaged gradient
// is the global batch's mean-loss gradient, and an empty rank still joins
// the step's reductions with zero gradients.
#pragma once

#include <memory>
#include <string>

#include "cohort/engine/engine.h"
#include "cohort/torch/core/runtime.h"
#include "cohort/torch/core/strategy.h"
#include "cohort/torch/data_parallel/compression.h"
#include "cohort/torch/strategy/rank_strategy.h"

namespace cohort {

class DistributedDataParallelBase;
class DistributedOptimizer;

struct MultiWorkerOptions {
  enum class Style { ddp, horovod };
  Style style = Style::ddp;
  Compression compression = Compression::none;  // gradients on the wire
  int64_t bucket_bytes = int64_t(25) << 20;     // ddp's bucket cap
  bool bucket_view = true;                      // ddp: .grad() aliases the buckets (no copies)
  engine::Engine* engine = nullptr;             // null: cohort::init()'s (started if needed)
};

class MultiWorkerStrategy : public RankStrategy {
 public:
  // Calls cohort::init() when nothing is initialized yet.
  explicit MultiWorkerStrategy(MultiWorkerOptions options = {});
  ~MultiWorkerStrategy() override;

  std::string spec() const override;
  void prepare(TrainingModel model) override;  // collective
  torch::optim::Optimizer& optimizer() override;
  StepResult train_step(const Batch& mine, int64_t global_rows) override;
  void save(torch::serialize::OutputArchive& archive) override;
  void load(torch::serialize::InputArchive& archive) override;
  // Elastic jobs: DDP (or the DistributedOptimizer) is built again over the
  // new world, as prepare() builds it; the optimizer and its state stay.
  // Neither rejoin() nor a joining process's prepare() broadcasts state:
  // run_elastic()'s ElasticState::sync() that follows hands every member
  // the newest commit.
  bool follows_membership() const override { return !own_engine_; }  // the world's engine only
  void rejoin() override;

 private:
  // The gradient exchange over engine_ (collective); `sync_state`: every
  // rank starts from rank 0's parameters and optimizer state, broadcast.
  void connect(bool sync_state);

  MultiWorkerOptions options_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::unique_ptr<DistributedDataParallelBase> ddp_;
  std::unique_ptr<DistributedOptimizer> horovod_;
};

}  // namespace cohort
