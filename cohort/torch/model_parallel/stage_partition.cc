#include "cohort/torch/model_parallel/stage_partition.h"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <limits>

#include "cohort/common/check.h"

namespace cohort {

std::vector<int> balanced_partition(const std::vector<double>& costs, int stages) {
  const int n = int(costs.size());
  COHORT_CHECK_AS(ConfigError, stages >= 1 && stages <= n)
      << "cannot split " << n << " modules into " << stages << " non-empty pipeline stages";
  std::vector<double> prefix(size_t(n) + 1, 0.0);
  for (int i = 0; i < n; ++i) prefix[size_t(i) + 1] = prefix[size_t(i)] + std::max(0.0, costs[size_t(i)]);
  const double inf = std::numeric_limits<double>::infinity();
  // best[s][i]: the smallest largest-stage cost of the first i modules in s
  // stages; cut[s][i]: where the last of those stages starts.
  std::vector<std::vector<double>> best(size_t(stages) + 1, std::vector<double>(size_t(n) + 1, inf));
  std::vector<std::vector<int>> cut(size_t(stages) + 1, std::vector<int>(size_t(n) + 1, 0));
  best[0][0] = 0;
  for (int s = 1; s <= stages; ++s)
    for (int i = s; i <= n; ++i)
      for (int k = s - 1; k < i; ++k) {
        const double v = std::max(best[size_t(s) - 1][size_t(k)], prefix[size_t(i)] - prefix[size_t(k)]);
        if (v < best[size_t(s)][size_t(i)]) {  // strict: the earliest cut wins ties
          best[size_t(s)][size_t(i)] = v;
          cut[size_t(s)][size_t(i)] = k;
        }
      }
  std::vector<int> bounds(size_t(stages) + 1);
  bounds[size_t(stages)] = n;
  for (int s = stages, i = n; s >= 1; --s) {
    i = cut[size_t(s)][size_t(i)];
    bounds[size_t(s) - 1] = i;
  }
  return bounds;
}

std::vector<int> partition_sequential(const torch::nn::Sequential& model_in, int stages,
                                      const PartitionOptions& options) {
  torch::nn::Sequential model = model_in;  // a handle: AnyModule::forward is not const
  const size_t n = model->size();
  std::vector<double> costs(n, 0.0);
  if (options.by == PartitionBy::parameters) {
    for (size_t i = 0; i < n; ++i)
      for (const auto& p : model->ptr(i)->parameters()) costs[i] += double(p.numel());
  } else {
    COHORT_CHECK_AS(ConfigError, options.sample_input.defined())
        << "partition_sequential by time needs PartitionOptions::sample_input";
    COHORT_CHECK_AS(ConfigError, options.timing_runs >= 1) << "PartitionOptions::timing_runs must be >= 1";
    torch::NoGradGuard no_grad;
    std::vector<std::vector<double>> runs(n);
    for (int r = 0; r < options.timing_runs; ++r) {
      at::Tensor x = options.sample_input;
      size_t i = 0;
      for (auto& module : *model) {
        const auto t0 = std::chrono::steady_clock::now();
        x = module.forward(x);
        runs[i++].push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      }
    }
    for (size_t i = 0; i < n; ++i) {
      std::nth_element(runs[i].begin(), runs[i].begin() + runs[i].size() / 2, runs[i].end());
      costs[i] = runs[i][runs[i].size() / 2];
    }
  }
  std::vector<int> bounds = balanced_partition(costs, stages);
  if (options.agree_over && options.agree_over->size() > 1) {
    std::vector<int32_t> wire(bounds.begin(), bounds.end());
    options.agree_over->broadcast(BufferView{wire.data(), wire.size(), DType::i32}, 0);
    bounds.assign(wire.begin(), wire.end());
  }
  return bounds;
}

torch::nn::Sequential stage_of(const torch::nn::Sequential& model_in, const std::vector<int>& bounds, int stage) {
  torch::nn::Sequential model = model_in;
  COHORT_CHECK_AS(ConfigError, bounds.size() >= 2 && stage >= 0 && stage + 1 < int(bounds.size()))
      << "stage " << stage << " outside the " << (bounds.size() >= 1 ? bounds.size() - 1 : 0) << " stages of the split";
  COHORT_CHECK_AS(ConfigError, bounds.front() == 0 && bounds.back() == int(model->size()) &&
                                   std::is_sorted(bounds.begin(), bounds.end()))
      << "stage bounds must run from 0 to the model's " << model->size() << " modules in order";
  torch::nn::Sequential out;
  for (int i = bounds[size_t(stage)]; i < bounds[size_t(stage) + 1]; ++i) out->push_back(*(model->begin() + i));
  return out;
}

}  // namespace cohort
