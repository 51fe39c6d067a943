#include "cohort/torch/strategy/mirrored.h"

#include <torch/torch.h>

#include "cohort/common/check.h"
#include "cohort/torch/core/zero_grad.h"
#include "cohort/torch/strategy/prepared_model.h"
#include "cohort/torch/strategy/single_process.h"

namespace cohort {

MirroredStrategy::MirroredStrategy(MirroredOptions options) : options_(std::move(options)) {
  COHORT_CHECK_AS(ConfigError, options_.name == "mirrored" || options_.name == "central_storage")
      << "MirroredStrategy: name must be mirrored or central_storage, got '" << options_.name << "'";
  detail::check_single_process(options_.name);
  (void)detail::data_parallel_replicas({.replicas = options_.replicas,
                                        .threads_per_replica = options_.threads_per_replica});
}

MirroredStrategy::~MirroredStrategy() = default;

std::string MirroredStrategy::spec() const {
  return options_.name + ":replicas=" + std::to_string(options_.replicas) +
         ",threads_per_replica=" + std::to_string(options_.threads_per_replica);
}

void MirroredStrategy::prepare(TrainingModel model) {
  detail::check_training_model(model, prepared_);
  model_ = std::move(model);
  replicas_ = {model_.module};
  for (int i = 1; i < options_.replicas; ++i)
    replicas_.push_back(detail::clone_replica(*model_.module, options_.name));
  core_ = std::make_unique<detail::DataParallelCore>(
      replicas_, DataParallelOptions{.replicas = options_.replicas,
                                     .threads_per_replica = options_.threads_per_replica});
  optimizer_ = detail::make_optimizer(model_, model_.module->parameters());
  prepared_ = true;
}

torch::nn::Module& MirroredStrategy::module() { return *detail::prepared(model_, prepared_).module; }

torch::optim::Optimizer& MirroredStrategy::optimizer() {
  detail::prepared(model_, prepared_);
  return *optimizer_;
}

detail::DataParallelCore::ForwardFn MirroredStrategy::replica_forward() {
  return [this](int i, const at::Tensor& x) { return model_.forward(*replicas_[size_t(i)], x); };
}

StepResult MirroredStrategy::train_step(const Batch& mine, int64_t global_rows) {
  detail::prepared(model_, prepared_);
  COHORT_CHECK_EQ(mine.rows(), global_rows) << options_.name << ": the process holds the whole global batch";
  StepResult result{.rows = mine.rows()};
  if (result.rows == 0) return result;
  zero_grad_to_none(*optimizer_);
  // DataParallel seeds each replica's backward with its share of the rows,
  // so the summed gradient is the whole batch's mean loss's.
  const at::Tensor loss = core_->train_step(mine.input, mine.target, replica_forward(), model_.loss, &result.output);
  optimizer_->step();
  result.loss_sum = loss.item<double>() * double(result.rows);
  return result;
}

at::Tensor MirroredStrategy::predict(const at::Tensor& input) {
  detail::prepared(model_, prepared_);
  if (input.size(0) == 0) {
    torch::NoGradGuard no_grad;
    return model_.forward(*model_.module, input);
  }
  return core_->forward(input, replica_forward());
}

void MirroredStrategy::save(torch::serialize::OutputArchive& archive) {
  detail::save_replicated(module(), optimizer(), archive);
}

void MirroredStrategy::load(torch::serialize::InputArchive& archive) {
  detail::load_replicated(module(), optimizer(), archive);
}

}  // namespace cohort
