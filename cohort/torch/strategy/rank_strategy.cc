#include "cohort/torch/strategy/rank_strategy.h"

#include <torch/torch.h>

#include "cohort/common/check.h"
#include "cohort/torch/checkpoint/sharded_checkpoint.h"
#include "cohort/torch/core/collectives.h"
#include "cohort/torch/strategy/prepared_model.h"

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

torch::nn::Module& RankStrategy::module() { return *detail::prepared(model_, prepared_).module; }

at::Tensor RankStrategy::predict(const at::Tensor& input) {
  detail::prepared(model_, prepared_);
  torch::NoGradGuard no_grad;
  return model_.forward(*model_.module, input);
}

at::Tensor RankStrategy::all_sum(const at::Tensor& values) {
  return allreduce(values, {.op = ReduceOp::sum, .engine = engine_.get()});
}

TensorHandle RankStrategy::all_sum_async(const at::Tensor& values) {
  return allreduce_async(values, {.op = ReduceOp::sum, .engine = engine_.get()});
}

at::Tensor RankStrategy::all_gather(const at::Tensor& rows) { return allgather(rows, {.engine = engine_.get()}); }

TrainingState RankStrategy::load_sharded(const std::string& dir, const std::string& id) {
  COHORT_CHECK_AS(ConfigError, prepared_) << spec() << ": call prepare() before load_sharded()";
  return load_sharded_checkpoint(dir, module(), optimizer(), id);
}

}  // namespace cohort
