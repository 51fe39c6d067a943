// The base of the strategies that run one replica on every rank of an
// engine (multi_worker, zero): the process numbering is the engine's, values
// cross processes by the engine's collectives, and predict() runs the module
// alone (evaluation needs no collective, and ranks may evaluate different
// numbers of batches). Its checkpoints can be sharded
// (ShardedCheckpoints): a replicated model saves and reads sharded
// checkpoints whole (checkpoint/sharded_checkpoint.h: a job resumes under
// DDP from zero's sharded backup); zero overrides them with its own shards.
#pragma once

#include <string>

#include "cohort/torch/core/runtime.h"
#include "cohort/torch/core/strategy.h"

namespace cohort {

class RankStrategy : public Strategy, public ShardedCheckpoints {
 public:
  // Until shutdown() for init()'s engine (ConfigError after).
  engine::Engine& engine() { return *engine_.lock(); }

  // ShardedCheckpoints: the whole module and optimizer of every rank
  // (saves_sharded() false: fit() saves a replicated model whole).
  bool saves_sharded() const override { return false; }
  std::string save_sharded(const std::string& dir, const TrainingState& state = {}) override;
  TrainingState load_sharded(const std::string& dir, const std::string& id = "") override;

 protected:
  // `engine` null: cohort::init()'s, initialised now if nothing is.
  // `holder` names the strategy in errors.
  RankStrategy(engine::Engine* engine, const std::string& holder);
  // The world's engine again, after cohort::reform() (for rejoin());
  // ConfigError when the strategy was given an engine of its own.
  void hold_new_world();

  ReplicaPlacement do_placement() const override;
  at::Tensor do_all_sum(const at::Tensor& values) override;
  TensorHandle do_all_sum_async(const at::Tensor& values) override;
  at::Tensor do_all_gather(const at::Tensor& rows) override;
  ShardedCheckpoints* do_sharded_checkpoints() override { return this; }
  void do_abort(const std::string& reason) override;

  const std::string holder_;
  const bool own_engine_;  // an engine passed in, not the world's
  EngineRef engine_;
};

}  // namespace cohort
