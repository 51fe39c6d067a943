// The base of the strategies that run one replica on every rank of an
// engine (multi_worker, zero): the process numbering is the engine's, values
// cross processes by the engine's collectives, and predict() runs the module
// alone (evaluation needs no collective, and ranks may evaluate different
// numbers of batches).
#pragma once

#include <string>

#include "cohort/torch/core/runtime.h"
#include "cohort/torch/core/strategy.h"

namespace cohort {

class RankStrategy : public Strategy {
 public:
  int replicas_in_sync() const override { return engine_.size(); }
  int local_replicas() const override { return 1; }
  int process_count() const override { return engine_.size(); }
  int process_index() const override { return engine_.rank(); }

  torch::nn::Module& module() override;
  at::Tensor predict(const at::Tensor& input) override;
  at::Tensor all_sum(const at::Tensor& values) override;
  TensorHandle all_sum_async(const at::Tensor& values) override;
  at::Tensor all_gather(const at::Tensor& rows) override;
  // Any sharded checkpoint (zero's at any world size and stage, a
  // replicated model's) into the whole module and optimizer of this rank:
  // a job can resume under DDP from zero's sharded backup.
  TrainingState load_sharded(const std::string& dir, const std::string& id = "") override;

  // Until shutdown() for init()'s engine (ConfigError after).
  engine::Engine& engine() { return *engine_.lock(); }

 protected:
  // `engine` null: cohort::init()'s, initialised now if nothing is.
  // `holder` names the strategy in errors.
  RankStrategy(engine::Engine* engine, const std::string& holder);
  // The world's engine again, after cohort::reform() (for rejoin());
  // ConfigError when the strategy was given an engine of its own.
  void hold_new_world();

  const std::string holder_;
  const bool own_engine_;  // an engine passed in, not the world's
  EngineRef engine_;
  TrainingModel model_;  // set by the subclass's prepare()
};

}  // namespace cohort
