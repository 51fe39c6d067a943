#include "cohort/torch/core/strategy.h"

#include <torch/csrc/autograd/grad_mode.h>

#include "cohort/common/check.h"
#include "cohort/common/logging.h"
#include "cohort/torch/core/replicated_state.h"

namespace cohort {

int64_t InputContext::per_replica_batch_size() const {
  COHORT_CHECK_AS(ConfigError, global_batch_size % num_replicas_in_sync == 0)
      << "the global batch of " << global_batch_size << " rows does not divide over " << num_replicas_in_sync
      << " replicas: choose a global batch that is a multiple of the replica count";
  return global_batch_size / num_replicas_in_sync;
}

RowBlock InputContext::rows_of(int64_t global_rows) const {
  const int local = local_replicas();
  const int first = input_pipeline_id * local;
  const RowBlock a = reduce_scatter_block(global_rows, num_replicas_in_sync, first);
  const RowBlock b = reduce_scatter_block(global_rows, num_replicas_in_sync, first + local - 1);
  return {a.offset, b.offset + b.rows - a.offset};
}

void ElasticTraining::load_own_state(const std::string& bytes) {
  COHORT_CHECK_AS(ConfigError, bytes.empty())
      << "the strategy keeps no state of its own, and was given " << bytes.size() << " bytes of it";
}

InputContext Strategy::input_context(int64_t global_batch_size) const {
  const ReplicaPlacement p = placement();
  return {.num_replicas_in_sync = p.replicas_in_sync,
          .num_input_pipelines = p.process_count,
          .input_pipeline_id = p.process_index,
          .global_batch_size = global_batch_size};
}

int Strategy::serve() {
  COHORT_CHECK_AS(ConfigError, is_server())
      << spec() << ": serve() on a process that trains (is_server() is false): train here instead";
  return do_serve();
}

int Strategy::do_serve() { COHORT_THROW(ConfigError) << spec() << ": no process of this strategy serves"; }

void Strategy::prepare(TrainingModel model) {
  COHORT_CHECK_AS(ConfigError, !is_server())
      << spec() << ": this process is a server, which trains nothing: serve instead, as in "
      << "`if (strategy->is_server()) return strategy->serve();` before building the model";
  COHORT_CHECK_AS(ConfigError, !prepared_) << "a strategy trains one model: prepare() was called already";
  COHORT_CHECK_AS(ConfigError, model.module != nullptr) << "TrainingModel: no module";
  COHORT_CHECK_AS(ConfigError, static_cast<bool>(model.forward)) << "TrainingModel: no forward function";
  COHORT_CHECK_AS(ConfigError, static_cast<bool>(model.loss)) << "TrainingModel: no loss function";
  COHORT_CHECK_AS(ConfigError, static_cast<bool>(model.optimizer)) << "TrainingModel: no optimizer factory";
  model_ = std::move(model);
  do_prepare();
  prepared_ = true;
}

void Strategy::require_prepared(const char* call) const {
  COHORT_CHECK_AS(ConfigError, prepared_) << spec() << ": " << call << " before prepare(): the strategy has no "
                                          << "model yet";
}

torch::nn::Module& Strategy::module() {
  require_prepared("module()");
  return do_module();
}

torch::optim::Optimizer& Strategy::optimizer() {
  require_prepared("optimizer()");
  return do_optimizer();
}

void Strategy::begin_training(const TrainingPlan& plan) {
  COHORT_CHECK_AS(ConfigError, plan.dataset_size >= 0 && plan.global_batch_size >= 0 && plan.epochs >= 0)
      << "TrainingPlan: negative sizes (dataset " << plan.dataset_size << ", batch " << plan.global_batch_size
      << ", epochs " << plan.epochs << ")";
  do_begin_training(plan);
}

StepResult Strategy::train_step(const Batch& mine, int64_t global_rows) {
  require_prepared("train_step()");
  COHORT_CHECK_AS(ConfigError, global_rows >= 0 && mine.rows() <= global_rows)
      << spec() << ": a step of " << global_rows << " global rows cannot hold this process's " << mine.rows();
  COHORT_CHECK_AS(ConfigError, !mine.input.defined() || mine.rows() == 0 || !mine.target.defined() ||
                                   mine.target.dim() == 0 || mine.target.size(0) == mine.rows())
      << spec() << ": the batch has " << mine.rows() << " input rows and " << mine.target.size(0) << " target rows";
  // A process's share is empty at an uneven tail only when the global
  // batch has fewer rows than the processes before it hold replicas; an
  // empty share beyond that is a loop that ran past this process's data
  // (its loss then averages nothing: NaN).
  if (mine.rows() == 0 && !batch_sampler() && input_context().rows_of(global_rows).rows > 0 &&
      !warned_empty_step_.exchange(true))
    COHORT_LOG(warn) << spec() << ": process " << process_index() << " of " << process_count()
                     << " trained a step with no rows, though the global batch has " << global_rows
                     << " (its share would be " << input_context().rows_of(global_rows).rows
                     << "): did its loop run past the end of its own shard of the data? (warned once)";
  return do_train_step(mine, global_rows);
}

at::Tensor Strategy::predict(const at::Tensor& input) {
  require_prepared("predict()");
  torch::NoGradGuard no_grad;
  return do_predict(input);
}

void Strategy::save(torch::serialize::OutputArchive& archive) {
  require_prepared("save()");
  do_save(archive);
}

void Strategy::load(torch::serialize::InputArchive& archive) {
  require_prepared("load()");
  do_load(archive);
}

void Strategy::abort(const std::string& reason) noexcept {
  try {
    do_abort(reason);
  } catch (const std::exception& e) {
    // The engine may be gone already (shut down, or failed first): the
    // others learn of this process's end from the failure itself.
    COHORT_LOG(debug) << spec() << ": abort: " << e.what();
  }
}

at::Tensor Strategy::do_predict(const at::Tensor& input) { return model_.forward(*model_.module, input); }

void Strategy::do_save(torch::serialize::OutputArchive& archive) {
  save_replicated_state(module(), optimizer(), archive);
}

void Strategy::do_load(torch::serialize::InputArchive& archive) {
  load_replicated_state(module(), optimizer(), archive);
}

TensorHandle Strategy::do_all_sum_async(const at::Tensor& values) {
  at::Tensor sum = do_all_sum(values);
  return TensorHandle({.name = "all_sum", .finish = [sum] { return sum; }});
}

std::unique_ptr<torch::optim::Optimizer> Strategy::make_optimizer(const std::vector<at::Tensor>& parameters) const {
  std::unique_ptr<torch::optim::Optimizer> optimizer = model_.optimizer(parameters);
  COHORT_CHECK_AS(ConfigError, optimizer != nullptr) << "TrainingModel: the optimizer factory returned null";
  return optimizer;
}

}  // namespace cohort
