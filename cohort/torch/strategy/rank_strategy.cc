#include "cohort/torch/strategy/rank_strategy.h"

#include "cohort/common/check.h"
#include "cohort/engine/engine.h"
#include "cohort/torch/checkpoint/sharded_checkpoint.h"
#include "cohort/torch/core/collectives.h"

namespace cohort {
namespace {

EngineRef engine_of(engine::Engine* engine, const std::string& holder) {
  if (!engine && !initialized()) init();
  return EngineRef(engine, holder);
}

}  // namespace

RankStrategy::RankStrategy(engine::Engine* engine, const std::string& holder)
    : holder_(holder), own_engine_(engine != nullptr), engine_(engine_of(engine, holder)) {}

void RankStrategy::hold_new_world() {
  COHORT_CHECK_AS(ConfigError, !own_engine_)
      << holder_ << " runs on an engine the program passed in: only cohort::init()'s world follows an elastic "
      << "job's membership";
  engine_ = engine_of(nullptr, holder_);
}

ReplicaPlacement RankStrategy::do_placement() const {
  return {.replicas_in_sync = engine_.size(),
          .local_replicas = 1,
          .process_count = engine_.size(),
          .process_index = engine_.rank()};
}

at::Tensor RankStrategy::do_all_sum(const at::Tensor& values) {
  return allreduce(values, {.op = ReduceOp::sum, .engine = engine_.get()});
}

TensorHandle RankStrategy::do_all_sum_async(const at::Tensor& values) {
  return allreduce_async(values, {.op = ReduceOp::sum, .engine = engine_.get()});
}

at::Tensor RankStrategy::do_all_gather(const at::Tensor& rows) { return allgather(rows, {.engine = engine_.get()}); }

void RankStrategy::do_abort(const std::string& reason) { engine_.get()->abort(reason); }

std::string RankStrategy::save_sharded(const std::string& dir, const TrainingState& state) {
  require_prepared("save_sharded()");
  return save_sharded_checkpoint(dir, module(), optimizer(), state, {.engine = engine_.get()});
}

TrainingState RankStrategy::load_sharded(const std::string& dir, const std::string& id) {
  require_prepared("load_sharded()");
  return load_sharded_checkpoint(dir, module(), optimizer(), id);
}

}  // namespace cohort
