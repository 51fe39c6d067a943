// Server-side update rules against closed forms: with a constant gradient,
// SGD with momentum, Adam and Adagrad have exact trajectories.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "cohort/parameter_server/optimizer.h"

namespace cohort::ps::optimizer_test {
namespace {

template <typename T>
std::vector<T> run(const OptimizerOptions& o, std::vector<T> p, const std::vector<T>& g, int steps) {
  std::vector<std::vector<T>> slots(slot_count(o), std::vector<T>(p.size(), T(0)));
  if (o.rule == UpdateRule::adagrad)
    for (auto& s : slots) std::fill(s.begin(), s.end(), static_cast<T>(o.initial_accumulator));
  for (int t = 1; t <= steps; ++t) {
    ShardTensors<T> st{p, {}};
    for (auto& s : slots) st.slots.emplace_back(s);
    apply_dense<T>(o, st, g, t);
  }
  return p;
}

TEST(Optimizer, SgdMomentumMatchesClosedForm) {
  OptimizerOptions o{.rule = UpdateRule::sgd, .lr = 0.1, .momentum = 0.9};
  const std::vector<double> g = {1.0, -2.0, 0.5};
  const int steps = 7;
  const auto p = run<double>(o, {0, 0, 0}, g, steps);
  // buf_t = g (1 - m^t) / (1 - m); p_T = -lr * sum_t buf_t.
  double sum = 0;
  for (int t = 1; t <= steps; ++t) sum += (1 - std::pow(0.9, t)) / (1 - 0.9);
  for (size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(p[i], -0.1 * g[i] * sum, 1e-12);
}

TEST(Optimizer, SgdWeightDecayIsL2) {
  OptimizerOptions o{.rule = UpdateRule::sgd, .lr = 0.1, .weight_decay = 0.5};
  // p <- p - lr (0 + wd p) = p (1 - lr wd) each step.
  const auto p = run<double>(o, {2.0}, {0.0}, 5);
  EXPECT_NEAR(p[0], 2.0 * std::pow(1 - 0.05, 5), 1e-12);
}

TEST(Optimizer, AdamWithConstantGradientStepsLrTimesSign) {
  OptimizerOptions o{.rule = UpdateRule::adam, .lr = 0.01, .beta1 = 0.9, .beta2 = 0.99, .eps = 1e-8};
  const std::vector<double> g = {3.0, -0.25};
  // Bias-corrected moments are exactly g and g^2: each step moves
  // lr * g / (|g| + eps).
  const auto p = run<double>(o, {1.0, 1.0}, g, 10);
  for (size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(p[i], 1.0 - 10 * 0.01 * g[i] / (std::abs(g[i]) + 1e-8), 1e-12);
  const auto pf = run<float>(o, {1.0f, 1.0f}, {3.0f, -0.25f}, 10);
  EXPECT_NEAR(pf[0], 0.9f, 1e-5);
  EXPECT_NEAR(pf[1], 1.1f, 1e-5);
}

TEST(Optimizer, AdagradWithConstantGradient) {
  OptimizerOptions o{.rule = UpdateRule::adagrad, .lr = 0.5};
  const std::vector<double> g = {2.0, -1.0};
  const int steps = 6;
  const auto p = run<double>(o, {0, 0}, g, steps);
  for (size_t i = 0; i < g.size(); ++i) {
    double expect = 0;
    for (int t = 1; t <= steps; ++t) expect -= 0.5 * g[i] / (std::sqrt(t * g[i] * g[i]) + 1e-10);
    EXPECT_NEAR(p[i], expect, 1e-12);
  }
}

TEST(Optimizer, RowsUpdateOnlyTheirRowsAndEqualDenseThere) {
  for (UpdateRule rule : {UpdateRule::sgd, UpdateRule::adam, UpdateRule::adagrad}) {
    OptimizerOptions o{.rule = rule, .lr = 0.05, .momentum = 0.5};
    const int64_t rows = 5, cols = 3;
    std::vector<double> dense(rows * cols), sparse;
    for (size_t i = 0; i < dense.size(); ++i) dense[i] = 0.1 * static_cast<double>(i) - 0.3;
    sparse = dense;
    const std::vector<int64_t> touched = {1, 3};
    std::vector<double> row_grad = {0.5, -1, 2, -0.25, 0.75, 1.5};
    std::vector<double> full_grad(rows * cols, 0.0);
    for (size_t r = 0; r < touched.size(); ++r)
      for (int64_t c = 0; c < cols; ++c) full_grad[touched[r] * cols + c] = row_grad[r * cols + c];
    std::vector<std::vector<double>> ds(slot_count(o), std::vector<double>(dense.size())), ss = ds;
    for (int t = 1; t <= 3; ++t) {
      ShardTensors<double> d{dense, {}}, s{sparse, {}};
      for (auto& x : ds) d.slots.emplace_back(x);
      for (auto& x : ss) s.slots.emplace_back(x);
      apply_dense<double>(o, d, full_grad, t);
      apply_rows<double>(o, s, cols, touched, row_grad, t);
    }
    std::vector<double> start(rows * cols);
    for (size_t i = 0; i < start.size(); ++i) start[i] = 0.1 * static_cast<double>(i) - 0.3;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        const size_t i = r * cols + c;
        if (r == 1 || r == 3)
          EXPECT_DOUBLE_EQ(sparse[i], dense[i]) << update_rule_name(rule) << " row " << r;
        else
          EXPECT_DOUBLE_EQ(sparse[i], start[i]) << update_rule_name(rule) << " untouched row " << r;
      }
  }
}

}  // namespace
}  // namespace cohort::ps::optimizer_test
