#include "cohort/torch/strategy/zero.h"

#include <torch/torch.h>

#include "cohort/common/check.h"
#include "cohort/torch/core/broadcast_state.h"
#include "cohort/torch/strategy/prepared_model.h"
#include "cohort/torch/strategy/single_process.h"

namespace cohort {
namespace {

std::vector<at::Tensor> trainable(torch::nn::Module& module) {
  std::vector<at::Tensor> out;
  for (const at::Tensor& p : module.parameters())
    if (p.requires_grad()) out.push_back(p);
  return out;
}


}  // namespace

ZeroStrategy::ZeroStrategy(ZeroStrategyOptions options)
    : RankStrategy(options.engine, "zero strategy"), options_(options) {
  COHORT_CHECK_AS(ConfigError, options_.stage == 1 || options_.stage == 2)
      << "zero: stage must be 1 or 2 (3 is not built yet), got " << options_.stage;
  COHORT_CHECK_AS(ConfigError, options_.bucket_bytes > 0)
      << "zero: bucket_bytes must be positive, got " << options_.bucket_bytes;
}

ZeroStrategy::~ZeroStrategy() = default;

std::string ZeroStrategy::spec() const {
  return "zero:bucket_mb=" + std::to_string(options_.bucket_bytes >> 20) + ",stage=" + std::to_string(options_.stage);
}

void ZeroStrategy::prepare(TrainingModel model) {
  detail::check_training_model(model, prepared_);
  model_ = std::move(model);
  torch::nn::Module& module = *model_.module;
  broadcast_parameters(module, 0, engine_.get());
  zero_ = std::make_unique<ZeroOptimizer>(
      trainable(module), model_.optimizer,
      ZeroOptions{.stage = options_.stage, .bucket_bytes = options_.bucket_bytes, .engine = engine_.get()});
  prepared_ = true;
}

torch::optim::Optimizer& ZeroStrategy::optimizer() {
  detail::prepared(model_, prepared_);
  return zero_->shard_optimizer();
}

const ZeroOptimizer& ZeroStrategy::sharded() const {
  COHORT_CHECK_AS(ConfigError, zero_ != nullptr) << "zero: call prepare() first";
  return *zero_;
}

StepResult ZeroStrategy::train_step(const Batch& mine, int64_t global_rows) {
  detail::prepared(model_, prepared_);
  COHORT_CHECK_AS(ConfigError, global_rows > 0 && mine.rows() <= global_rows)
      << "zero: a step of " << global_rows << " global rows cannot hold this rank's " << mine.rows();
  StepResult result{.rows = mine.rows()};
  zero_->zero_grad();
  const at::Tensor loss = detail::data_parallel_loss(model_, mine, global_rows, process_count(), result);
  loss.backward();  // launches the buckets' reduce-scatters as their gradients complete
  zero_->step();
  return result;
}

// Collective: the full model and the consolidated optimizer, in the form
// multi_worker and one_device save (detail::save_replicated), so the
// checkpoint loads into them too, and into zero at any world size.
void ZeroStrategy::save(torch::serialize::OutputArchive& archive) {
  detail::prepared(model_, prepared_);
  const std::unique_ptr<torch::optim::Optimizer> full = zero_->consolidated(model_.optimizer, module().parameters());
  detail::save_replicated(module(), *full, archive);
}

void ZeroStrategy::load(torch::serialize::InputArchive& archive) {
  detail::prepared(model_, prepared_);
  const std::unique_ptr<torch::optim::Optimizer> full = detail::make_optimizer(model_, module().parameters());
  // In place: the parameters stay views of the buckets.
  detail::load_replicated(module(), *full, archive);
  zero_->load_consolidated(*full);
}

}  // namespace cohort
