// MetricStates: the layout of one float64 vector that sums an epoch's loss
// and metrics, [loss sum, rows, each metric's state...], so that one all_sum
// merges them over the processes and the logs are computed once from the
// merged sums (never an average of per-process averages).
#pragma once

#include <ATen/Tensor.h>

#include <memory>
#include <string>
#include <vector>

#include "cohort/torch/core/strategy.h"
#include "cohort/torch/fit/callback.h"
#include "cohort/torch/fit/metric.h"

namespace cohort {

class MetricStates {
 public:
  // ConfigError when a metric is null.
  explicit MetricStates(std::vector<std::shared_ptr<Metric>> metrics);

  // A state of zeros (float64, CPU, contiguous: updated in place).
  at::Tensor zeros() const;
  int64_t size() const { return size_; }
  // Adds a step's rows (its loss sum and its outputs against `target`).
  void update(at::Tensor& state, const StepResult& step, const at::Tensor& target) const;
  // "loss" (the mean over the rows; NaN without rows) and every metric's
  // value, each key after `prefix` ("val_").
  Logs logs(const at::Tensor& merged, const std::string& prefix = "") const;

 private:
  std::vector<std::shared_ptr<Metric>> metrics_;
  int64_t size_ = 0;
};

}  // namespace cohort
