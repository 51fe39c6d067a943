#include "cohort/torch/strategy/mirrored.h"

#include "cohort/common/check.h"
#include "cohort/torch/core/strategy_registry.h"
#include "cohort/torch/core/zero_grad.h"

namespace cohort {
namespace {

using Kind = SpecKey::Kind;

const char* const kCloneable =
    "a torch::nn::Cloneable, whose replicas are its clones: derive NetImpl from torch::nn::Cloneable<NetImpl> and "
    "build every member in reset()";

std::vector<SpecKey> replica_keys() {
  return {{.name = "replicas",
           .kind = Kind::integer,
           .default_value = "2",
           .description = "replicas (threads) in this process",
           .min = 1},
          {.name = "threads_per_replica",
           .kind = Kind::integer,
           .default_value = "1",
           .description = "intra-op threads of each replica",
           .min = 1}};
}

std::unique_ptr<Strategy> make_mirrored(const Spec& spec) {
  return std::make_unique<MirroredStrategy>(
      MirroredOptions{.replicas = int(spec.integer("replicas")),
                      .threads_per_replica = int(spec.integer("threads_per_replica")),
                      .name = spec.name});
}

}  // namespace

COHORT_REGISTER_STRATEGY(mirrored, {.name = "mirrored",
                                    .description = "one process, several replicas on threads (DataParallel)",
                                    .keys = replica_keys(),
                                    .model_requirements = kCloneable,
                                    .make = make_mirrored});
COHORT_REGISTER_STRATEGY(central_storage,
                         {.name = "central_storage",
                          .description = "as mirrored: variables on the CPU, compute replicated (identical on "
                                         "CPU-only hosts)",
                          .keys = replica_keys(),
                          .model_requirements = kCloneable,
                          .make = make_mirrored});

MirroredStrategy::MirroredStrategy(MirroredOptions options)
    : SingleProcessStrategy(options.name, options.replicas), options_(std::move(options)) {
  COHORT_CHECK_AS(ConfigError, options_.name == "mirrored" || options_.name == "central_storage")
      << "MirroredStrategy: name must be mirrored or central_storage, got '" << options_.name << "'";
  (void)detail::data_parallel_replicas({.replicas = options_.replicas,
                                        .threads_per_replica = options_.threads_per_replica});
}

MirroredStrategy::~MirroredStrategy() = default;

std::string MirroredStrategy::do_spec() const {
  return options_.name + ":replicas=" + std::to_string(options_.replicas) +
         ",threads_per_replica=" + std::to_string(options_.threads_per_replica);
}

void MirroredStrategy::do_prepare() {
  torch::nn::Module& module = *model().module;
  replicas_ = {model().module};
  for (int i = 1; i < options_.replicas; ++i) replicas_.push_back(detail::clone_replica(module, options_.name));
  core_ = std::make_unique<detail::DataParallelCore>(
      replicas_, DataParallelOptions{.replicas = options_.replicas,
                                     .threads_per_replica = options_.threads_per_replica});
  optimizer_ = make_optimizer(module.parameters());
}

detail::DataParallelCore::ForwardFn MirroredStrategy::replica_forward() {
  return [this](int i, const at::Tensor& x) { return model().forward(*replicas_[size_t(i)], x); };
}

StepResult MirroredStrategy::do_train_step(const Batch& mine, int64_t global_rows) {
  COHORT_CHECK_EQ(mine.rows(), global_rows) << options_.name << ": the process holds the whole global batch";
  StepResult result{.rows = mine.rows()};
  if (result.rows == 0) return result;
  zero_grad_to_none(*optimizer_);
  // DataParallel seeds each replica's backward with its share of the rows,
  // so the summed gradient is the whole batch's mean loss's.
  const at::Tensor loss = core_->train_step(mine.input, mine.target, replica_forward(), model().loss, &result.output);
  optimizer_->step();
  result.loss_sum = loss.item<double>() * double(result.rows);
  return result;
}

at::Tensor MirroredStrategy::do_predict(const at::Tensor& input) {
  if (input.size(0) == 0) return model().forward(*model().module, input);
  return core_->forward(input, replica_forward());
}

}  // namespace cohort
