// Model::evaluate() and Model::predict(), and fit()'s validation: no
// collective runs until the processes' results are merged, so each may run
// a different number of batches.
#include <ATen/ATen.h>
#include <torch/csrc/autograd/grad_mode.h>

#include <algorithm>

#include "cohort/common/check.h"
#include "cohort/torch/data/dataset_stream.h"
#include "cohort/torch/fit/model.h"

namespace cohort {
namespace {

// Restores the module's train/eval mode when evaluation ends (or throws).
class EvalMode {
 public:
  explicit EvalMode(torch::nn::Module& module) : module_(module), was_training_(module.is_training()) {
    module_.eval();
  }
  ~EvalMode() {
    if (was_training_) module_.train();
  }

 private:
  torch::nn::Module& module_;
  bool was_training_;
};

}  // namespace

Logs Model::run_evaluation(BatchStream& data, int64_t batch_size, CallbackList& callbacks, const std::string& prefix) {
  COHORT_CHECK_AS(ConfigError, batch_size >= 1) << "evaluate: batch_size must be >= 1, got " << batch_size;
  callbacks.on_test_begin(*this, {});
  at::Tensor state = metrics_.zeros();
  {
    EvalMode eval(module());
    // Epoch 0 of the stream, in its own order: every process reads its share
    // of each global batch, and an empty share is skipped.
    const int64_t steps = data.start_epoch(strategy_.input_context(batch_size), 0, 0, "");
    for (int64_t b = 0; b < steps; ++b) {
      const Batch batch = data.next();
      if (batch.rows() == 0) continue;
      torch::NoGradGuard no_grad;
      StepResult step{.rows = batch.rows(), .output = strategy_.predict(batch.input)};
      step.loss_sum = loss_(step.output, batch.target).item<double>() * double(step.rows);
      metrics_.update(state, step, batch.target);
      if (!callbacks.empty()) callbacks.on_test_batch_end(*this, b, metrics_.logs(state, prefix));
    }
  }
  const Logs logs = metrics_.logs(strategy_.all_sum(state), prefix);
  callbacks.on_test_end(*this, logs);
  return logs;
}

Logs Model::evaluate(const Dataset& data, EvaluateOptions options) {
  DatasetStream stream(data, /*shuffle=*/false, 0, nullptr, position_.step);
  return evaluate(static_cast<BatchStream&>(stream), std::move(options));
}

Logs Model::evaluate(BatchStream& data, EvaluateOptions options) {
  CallbackList callbacks(std::move(options.callbacks), "evaluate");
  return run_evaluation(data, options.batch_size, callbacks, "");
}

at::Tensor Model::predict(const Dataset& data, PredictOptions options) {
  COHORT_CHECK_AS(ConfigError, options.batch_size >= 1)
      << "predict: batch_size must be >= 1, got " << options.batch_size;
  CallbackList callbacks(std::move(options.callbacks), "predict");
  callbacks.on_predict_begin(*this, {});
  // A contiguous share per process, so that gathering the shares in process
  // order gives the rows in order.
  const InputContext context = strategy_.input_context(options.batch_size);
  const RowBlock share = context.rows_of(data.size());
  const int64_t local_batch = std::max<int64_t>(1, context.rows_of_batch().rows);
  std::vector<at::Tensor> outputs;
  {
    EvalMode eval(module());
    int64_t batch = 0;
    for (int64_t start = 0; start < share.rows; start += local_batch, ++batch) {
      const int64_t rows = std::min(local_batch, share.rows - start);
      outputs.push_back(
          strategy_.predict(data.get(at::arange(share.offset + start, share.offset + start + rows, at::kLong)).input));
      callbacks.on_predict_batch_end(*this, batch, {{"rows", double(rows)}});
    }
    if (outputs.empty()) {
      // No rows here: an empty tensor shaped like the others' rows (the first
      // row's output tells the shape; every process can compute it).
      const at::Tensor probe =
          data.size() > 0 ? strategy_.predict(data.get(at::zeros({1}, at::kLong)).input) : at::Tensor();
      outputs.push_back(probe.defined() ? probe.narrow(0, 0, 0) : at::empty({0}));
    }
  }
  const at::Tensor all = strategy_.all_gather(at::cat(outputs));
  callbacks.on_predict_end(*this, {{"rows", double(all.size(0))}});
  return all;
}

}  // namespace cohort
