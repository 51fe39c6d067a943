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

class MultiWorkerStrategy : public RankStrategy, public ElasticTraining {
 public:
  // Calls cohort::init() when nothing is initialized yet.
  explicit MultiWorkerStrategy(MultiWorkerOptions options = {});
  ~MultiWorkerStrategy() override;

  // ElasticTraining: DDP (or the DistributedOptimizer) is built again over
  // the new world, as prepare() builds it; the optimizer and its state
  // stay. Neither rejoin() nor a joining process's prepare() broadcasts
  // state: run_elastic()'s ElasticState::sync() that follows hands every
  // member the newest commit.
  void rejoin() override;

 protected:
  std::string do_spec() const override;
  void do_prepare() override;  // collective
  torch::optim::Optimizer& do_optimizer() override { return *optimizer_; }
  StepResult do_train_step(const Batch& mine, int64_t global_rows) override;
  // On the world's engine only (not one the program passed in).
  ElasticTraining* do_elastic() override { return own_engine_ ? nullptr : this; }

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
