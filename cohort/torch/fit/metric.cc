#include "cohort/torch/fit/metric.h"

#include <torch/torch.h>

#include <cmath>

#include "cohort/common/check.h"

namespace cohort {
namespace {

class FunctionMetric : public Metric {
 public:
  using Update = std::function<void(at::Tensor&, const at::Tensor&, const at::Tensor&)>;
  using Result = std::function<double(const at::Tensor&)>;
  FunctionMetric(std::string name, int64_t size, Update update, Result result)
      : name_(std::move(name)), size_(size), update_(std::move(update)), result_(std::move(result)) {
    COHORT_CHECK_AS(ConfigError, !name_.empty()) << "make_metric: a metric needs a name";
    COHORT_CHECK_AS(ConfigError, size_ >= 1) << "make_metric " << name_ << ": state_size must be at least 1";
    COHORT_CHECK_AS(ConfigError, update_ && result_) << "make_metric " << name_ << ": update and result are required";
  }
  std::string name() const override { return name_; }
  int64_t state_size() const override { return size_; }
  void update(at::Tensor& state, const at::Tensor& output, const at::Tensor& target) const override {
    update_(state, output, target);
  }
  double result(const at::Tensor& state) const override { return result_(state); }

 private:
  std::string name_;
  int64_t size_;
  Update update_;
  Result result_;
};

// state = {sum, count}: the value is sum / count.
double ratio(const at::Tensor& state) {
  const double count = state[1].item<double>();
  return count > 0 ? state[0].item<double>() / count : std::nan("");
}

void add(at::Tensor& state, double sum, double count) {
  // Model's metric states are float64 on the CPU: written in place, as two
  // tensor ops each would cost a step of a small model about 1% (dispatch).
  if (state.device().is_cpu() && state.scalar_type() == at::kDouble) {
    double* s = state.data_ptr<double>();
    s[0] += sum;
    s[1] += count;
  } else {
    state[0] += sum;
    state[1] += count;
  }
}

}  // namespace

std::shared_ptr<Metric> make_metric(
    std::string name, int64_t state_size,
    std::function<void(at::Tensor& state, const at::Tensor& output, const at::Tensor& target)> update,
    std::function<double(const at::Tensor& state)> result) {
  return std::make_shared<FunctionMetric>(std::move(name), state_size, std::move(update), std::move(result));
}

std::shared_ptr<Metric> accuracy() {
  return make_metric(
      "accuracy", 2,
      [](at::Tensor& state, const at::Tensor& output, const at::Tensor& target) {
        add(state, output.argmax(1).eq(target).sum().item<double>(), double(output.size(0)));
      },
      ratio);
}

std::shared_ptr<Metric> top_k_accuracy(int k, std::string name) {
  COHORT_CHECK_AS(ConfigError, k >= 1) << "top_k_accuracy: k must be at least 1, got " << k;
  if (name.empty()) name = "top" + std::to_string(k) + "_accuracy";
  return make_metric(
      std::move(name), 2,
      [k](at::Tensor& state, const at::Tensor& output, const at::Tensor& target) {
        const int64_t kk = std::min<int64_t>(k, output.size(1));
        const at::Tensor top = std::get<1>(output.topk(kk, 1));
        add(state, top.eq(target.unsqueeze(1)).any(1).sum().item<double>(), double(output.size(0)));
      },
      ratio);
}

std::shared_ptr<Metric> mean_squared_error() {
  return make_metric(
      "mse", 2,
      [](at::Tensor& state, const at::Tensor& output, const at::Tensor& target) {
        add(state, (output.to(at::kDouble) - target.to(at::kDouble)).pow(2).sum().item<double>(),
            double(output.numel()));
      },
      ratio);
}

std::shared_ptr<Metric> mean_absolute_error() {
  return make_metric(
      "mae", 2,
      [](at::Tensor& state, const at::Tensor& output, const at::Tensor& target) {
        add(state, (output.to(at::kDouble) - target.to(at::kDouble)).abs().sum().item<double>(),
            double(output.numel()));
      },
      ratio);
}

}  // namespace cohort
