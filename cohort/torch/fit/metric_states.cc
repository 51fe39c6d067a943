#include "cohort/torch/fit/metric_states.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/grad_mode.h>

#include <cmath>

#include "cohort/common/check.h"

namespace cohort {
namespace {

// The first slots: the loss sum and the rows.
constexpr int64_t kLossSum = 0, kRows = 1, kLossSlots = 2;

}  // namespace

MetricStates::MetricStates(std::vector<std::shared_ptr<Metric>> metrics) : metrics_(std::move(metrics)) {
  size_ = kLossSlots;
  for (const auto& m : metrics_) {
    COHORT_CHECK_AS(ConfigError, m != nullptr) << "Model: a metric is null";
    size_ += m->state_size();
  }
}

at::Tensor MetricStates::zeros() const { return at::zeros({size_}, at::kDouble); }

void MetricStates::update(at::Tensor& state, const StepResult& step, const at::Tensor& target) const {
  if (step.rows == 0) return;
  double* sums = state.data_ptr<double>();
  sums[kLossSum] += step.loss_sum;
  sums[kRows] += double(step.rows);
  torch::NoGradGuard no_grad;
  int64_t offset = kLossSlots;
  for (const auto& m : metrics_) {
    at::Tensor slice = state.narrow(0, offset, m->state_size());
    m->update(slice, step.output, target);
    offset += m->state_size();
  }
}

Logs MetricStates::logs(const at::Tensor& merged, const std::string& prefix) const {
  Logs logs;
  const double rows = merged[kRows].item<double>();
  logs[prefix + "loss"] = rows > 0 ? merged[kLossSum].item<double>() / rows : std::nan("");
  int64_t offset = kLossSlots;
  for (const auto& m : metrics_) {
    logs[prefix + m->name()] = m->result(merged.narrow(0, offset, m->state_size()));
    offset += m->state_size();
  }
  return logs;
}

}  // namespace cohort
