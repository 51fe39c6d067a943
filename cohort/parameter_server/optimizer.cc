#include "cohort/parameter_server/optimizer.h"

#include <cmath>

#include "cohort/common/check.h"

namespace cohort::ps {

int slot_count(const OptimizerOptions& o) {
  switch (o.rule) {
    case UpdateRule::sgd: return o.momentum != 0 ? 1 : 0;
    case UpdateRule::adam: return 2;
    case UpdateRule::adagrad: return 1;
    case UpdateRule::sum: return 0;
  }
  return 0;
}

namespace {

// One rule over n contiguous elements; value, state and gradient pointers
// already offset to the row (or the whole shard).
template <typename T>
void apply_span(const OptimizerOptions& o, T* p, T* const* slots, const T* g, int64_t n, int64_t step) {
  const T lr = static_cast<T>(o.lr), wd = static_cast<T>(o.weight_decay);
  switch (o.rule) {
    case UpdateRule::sgd: {
      const T momentum = static_cast<T>(o.momentum);
      if (momentum != 0) {
        // A zero buffer makes the first step buf = d_p, torch's clone.
        T* buf = slots[0];
        for (int64_t i = 0; i < n; ++i) {
          const T d = g[i] + wd * p[i];
          buf[i] = momentum * buf[i] + d;
          p[i] -= lr * buf[i];
        }
      } else {
        for (int64_t i = 0; i < n; ++i) p[i] -= lr * (g[i] + wd * p[i]);
      }
      return;
    }
    case UpdateRule::adam: {
      const T b1 = static_cast<T>(o.beta1), b2 = static_cast<T>(o.beta2), eps = static_cast<T>(o.eps);
      const T bias1 = 1 - static_cast<T>(std::pow(o.beta1, static_cast<double>(step)));
      const T bias2_sqrt = std::sqrt(1 - static_cast<T>(std::pow(o.beta2, static_cast<double>(step))));
      const T step_size = lr / bias1;
      T* m = slots[0];
      T* v = slots[1];
      for (int64_t i = 0; i < n; ++i) {
        const T d = g[i] + wd * p[i];
        m[i] = b1 * m[i] + (1 - b1) * d;
        v[i] = b2 * v[i] + (1 - b2) * d * d;
        const T denom = std::sqrt(v[i]) / bias2_sqrt + eps;
        p[i] -= step_size * (m[i] / denom);
      }
      return;
    }
    case UpdateRule::adagrad: {
      const T eps = static_cast<T>(o.adagrad_eps);
      T* sum = slots[0];
      for (int64_t i = 0; i < n; ++i) {
        const T d = g[i] + wd * p[i];
        sum[i] += d * d;
        p[i] -= lr * (d / (std::sqrt(sum[i]) + eps));
      }
      return;
    }
    case UpdateRule::sum:
      // The summation service keeps the step's gradient itself.
      for (int64_t i = 0; i < n; ++i) p[i] = g[i];
      return;
  }
}

}  // namespace

template <typename T>
void apply_dense(const OptimizerOptions& o, ShardTensors<T> shard, std::span<const T> grad, int64_t step) {
  COHORT_CHECK_EQ(grad.size(), shard.values.size()) << "gradient and shard sizes differ";
  COHORT_CHECK_EQ(shard.slots.size(), static_cast<size_t>(slot_count(o)));
  T* slots[2] = {};
  for (size_t s = 0; s < shard.slots.size(); ++s) slots[s] = shard.slots[s].data();
  apply_span(o, shard.values.data(), slots, grad.data(), static_cast<int64_t>(grad.size()), step);
}

template <typename T>
void apply_rows(const OptimizerOptions& o, ShardTensors<T> shard, int64_t cols, std::span<const int64_t> rows,
                std::span<const T> grad, int64_t step) {
  COHORT_CHECK_EQ(grad.size(), rows.size() * static_cast<size_t>(cols)) << "row gradient size";
  COHORT_CHECK_EQ(shard.slots.size(), static_cast<size_t>(slot_count(o)));
  const int64_t shard_rows = static_cast<int64_t>(shard.values.size()) / cols;
  for (size_t r = 0; r < rows.size(); ++r) {
    const int64_t row = rows[r];
    COHORT_CHECK(row >= 0 && row < shard_rows) << "row " << row << " outside the shard's " << shard_rows << " rows";
    T* slots[2] = {};
    for (size_t s = 0; s < shard.slots.size(); ++s) slots[s] = shard.slots[s].data() + row * cols;
    apply_span(o, shard.values.data() + row * cols, slots, grad.data() + r * cols, cols, step);
  }
}

template void apply_dense<float>(const OptimizerOptions&, ShardTensors<float>, std::span<const float>, int64_t);
template void apply_dense<double>(const OptimizerOptions&, ShardTensors<double>, std::span<const double>, int64_t);
template void apply_rows<float>(const OptimizerOptions&, ShardTensors<float>, int64_t, std::span<const int64_t>,
                                std::span<const float>, int64_t);
template void apply_rows<double>(const OptimizerOptions&, ShardTensors<double>, int64_t, std::span<const int64_t>,
                                 std::span<const double>, int64_t);

}  // namespace cohort::ps
