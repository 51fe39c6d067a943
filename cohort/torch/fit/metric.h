// Metrics as mergeable states (Keras metrics, distributed exactly): a metric
// keeps a few float64 numbers (for accuracy: correct rows and rows) that
// batches add to and that processes add together, and computes its value
// from the merged state once. The value over many ranks is therefore the
// value over the whole data, never an average of per-rank averages.
//
//   model options: .metrics = {cohort::accuracy(), cohort::make_metric("top3", ...)}
#pragma once

#include <ATen/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace cohort {

class Metric {
 public:
  virtual ~Metric() = default;
  // The key under which the value is logged ("accuracy"; "val_accuracy" for
  // validation).
  virtual std::string name() const = 0;
  // Values in the state (float64). States merge by addition.
  virtual int64_t state_size() const = 0;
  // Adds the contribution of a batch's rows to `state`.
  virtual void update(at::Tensor& state, const at::Tensor& output, const at::Tensor& target) const = 0;
  // The metric's value for a merged state (NaN for an empty one).
  virtual double result(const at::Tensor& state) const = 0;
};

// Rows whose largest output is the target class, over rows.
std::shared_ptr<Metric> accuracy();
// Rows whose target is among the k largest outputs, over rows.
std::shared_ptr<Metric> top_k_accuracy(int k, std::string name = "");
// Mean over elements of (output - target)^2, and of |output - target|.
std::shared_ptr<Metric> mean_squared_error();
std::shared_ptr<Metric> mean_absolute_error();

// A metric from functions: `update` adds a batch to a state of `state_size`
// float64 values, `result` reads a merged state.
std::shared_ptr<Metric> make_metric(
    std::string name, int64_t state_size,
    std::function<void(at::Tensor& state, const at::Tensor& output, const at::Tensor& target)> update,
    std::function<double(const at::Tensor& state)> result);

}  // namespace cohort
