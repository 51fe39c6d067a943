// Test support: a small deterministic training problem for the parameter
// servers, and its single-process float64 reference.
//
// Variables: "w", a dense D x 2 matrix (a least-squares fit), and "emb", an
// R x C embedding table touched by rows. Worker k at step s sees a batch
// that depends only on (k, s): rows A (B x D), targets Y (B x 2), and ids.
// Loss: 0.5 * mean ||A w - Y||^2 + 0.5 * sum over ids ||emb[id] - t(id)||^2,
// so the gradient depends on the parameters and a stale read changes it.
// The reference applies the mean gradient of the contributing workers with
// its own SGD/Adam/Adagrad loops (not the library's kernels).
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <vector>

namespace cohort::ps::testing {

struct Problem {
  int64_t dims = 6, outputs = 2, rows = 40, cols = 3, batch = 5, ids = 4;
};

inline uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
// A value in [-1, 1) from (a, b, c).
inline double uniform(uint64_t a, uint64_t b, uint64_t c) {
  return static_cast<double>(mix(mix(mix(a) ^ b) ^ c) >> 11) / 9007199254740992.0 * 2 - 1;
}

inline std::vector<double> initial_w(const Problem& p) {
  std::vector<double> w(p.dims * p.outputs);
  for (size_t i = 0; i < w.size(); ++i) w[i] = 0.1 * uniform(7, i, 0);
  return w;
}
inline std::vector<double> initial_emb(const Problem& p) {
  std::vector<double> e(p.rows * p.cols);
  for (size_t i = 0; i < e.size(); ++i) e[i] = 0.1 * uniform(8, i, 0);
  return e;
}

// The distinct rows worker k touches at step s, ascending.
inline std::vector<int64_t> batch_rows(const Problem& p, int k, int64_t s) {
  std::set<int64_t> r;
  for (int64_t j = 0; j < p.ids; ++j) r.insert(static_cast<int64_t>(mix(mix(k * 1000003ull + s) + j) % p.rows));
  return {r.begin(), r.end()};
}

// Gradients of worker k's loss at step s: dense dw (D x 2), and the rows'
// gradient (rows x C) for batch_rows(k, s). Returns the loss itself at
// (w, emb_rows), each distinct row counted once.
inline double gradients(const Problem& p, int k, int64_t s, const std::vector<double>& w,
                      const std::vector<double>& emb_rows, const std::vector<int64_t>& rows, std::vector<double>& dw,
                      std::vector<double>& demb) {
  dw.assign(w.size(), 0.0);
  double loss = 0;
  for (int64_t b = 0; b < p.batch; ++b) {
    std::vector<double> a(p.dims);
    for (int64_t d = 0; d < p.dims; ++d) a[d] = uniform(k, s, b * 64 + d);
    for (int64_t o = 0; o < p.outputs; ++o) {
      double pred = 0;
      for (int64_t d = 0; d < p.dims; ++d) pred += a[d] * w[d * p.outputs + o];
      const double y = uniform(k + 100, s, b * 64 + o);
      const double r = (pred - y) / static_cast<double>(p.batch);
      loss += 0.5 * (pred - y) * r;
      for (int64_t d = 0; d < p.dims; ++d) dw[d * p.outputs + o] += r * a[d];
    }
  }
  demb.assign(rows.size() * p.cols, 0.0);
  for (size_t i = 0; i < rows.size(); ++i)
    for (int64_t c = 0; c < p.cols; ++c) {
      const double d = emb_rows[i * p.cols + c] - uniform(rows[i], 99, c);
      demb[i * p.cols + c] = d;
      loss += 0.5 * d * d;
    }
  return loss;
}

struct ReferenceOptimizer {
  std::string rule = "sgd";
  double lr = 0.1, momentum = 0, beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  // Per-element state: [0] momentum / m / sum, [1] v.
  std::map<std::string, std::vector<std::vector<double>>> state;
  std::map<std::string, int64_t> steps;

  // Updates `x` (n elements at `at` in row units of `cols`) with gradient g
  // for rows `rows` (or all rows when rows is empty and dense).
  void step(const std::string& name, std::vector<double>& x, const std::vector<double>& g,
            const std::vector<int64_t>& rows, int64_t cols) {
    auto& st = state[name];
    if (st.empty()) st.assign(2, std::vector<double>(x.size(), 0.0));
    const int64_t t = ++steps[name];
    auto update = [&](size_t xi, double gi) {
      if (rule == "sgd") {
        if (momentum != 0) {
          st[0][xi] = momentum * st[0][xi] + gi;
          x[xi] -= lr * st[0][xi];
        } else {
          x[xi] -= lr * gi;
        }
      } else if (rule == "adam") {
        st[0][xi] = beta1 * st[0][xi] + (1 - beta1) * gi;
        st[1][xi] = beta2 * st[1][xi] + (1 - beta2) * gi * gi;
        const double mhat_scale = 1 - std::pow(beta1, t), v_scale = std::sqrt(1 - std::pow(beta2, t));
        x[xi] -= lr / mhat_scale * st[0][xi] / (std::sqrt(st[1][xi]) / v_scale + eps);
      } else {  // adagrad
        st[0][xi] += gi * gi;
        x[xi] -= lr * gi / (std::sqrt(st[0][xi]) + 1e-10);
      }
    };
    if (rows.empty()) {
      for (size_t i = 0; i < x.size(); ++i) update(i, g[i]);
    } else {
      for (size_t r = 0; r < rows.size(); ++r)
        for (int64_t c = 0; c < cols; ++c) update(rows[r] * cols + c, g[r * cols + c]);
    }
  }
};

// Synchronous training in one process: at each step, the workers listed
// for that step contribute; returns w and emb after `steps` steps.
// `before_update(s, r)`, when given, runs at each step between the
// gradients and the update (e.g. to take a partition back to a checkpoint:
// the gradients were computed from the values before it).
struct ReferenceResult {
  std::vector<double> w, emb;
};
template <typename ContributorsFn>
ReferenceResult reference_run(const Problem& p, ReferenceOptimizer opt, int64_t steps, ContributorsFn contributors,
                              const std::function<void(int64_t, ReferenceResult&)>& before_update = {}) {
  ReferenceResult r{initial_w(p), initial_emb(p)};
  for (int64_t s = 0; s < steps; ++s) {
    const std::vector<int> workers = contributors(s);
    if (workers.empty()) continue;
    std::vector<double> gw(r.w.size(), 0.0);
    std::map<int64_t, std::vector<double>> gemb;
    for (int k : workers) {
      const auto rows = batch_rows(p, k, s);
      std::vector<double> emb_rows;
      for (int64_t row : rows) emb_rows.insert(emb_rows.end(), r.emb.begin() + row * p.cols, r.emb.begin() + (row + 1) * p.cols);
      std::vector<double> dw, demb;
      gradients(p, k, s, r.w, emb_rows, rows, dw, demb);
      for (size_t i = 0; i < gw.size(); ++i) gw[i] += dw[i];
      for (size_t i = 0; i < rows.size(); ++i) {
        auto& acc = gemb[rows[i]];
        if (acc.empty()) acc.assign(p.cols, 0.0);
        for (int64_t c = 0; c < p.cols; ++c) acc[c] += demb[i * p.cols + c];
      }
    }
    const double n = static_cast<double>(workers.size());
    for (double& g : gw) g /= n;
    std::vector<int64_t> rows;
    std::vector<double> ge;
    for (auto& [row, g] : gemb) {
      rows.push_back(row);
      for (double v : g) ge.push_back(v / n);
    }
    if (before_update) before_update(s, r);
    opt.step("w", r.w, gw, {}, p.outputs);
    opt.step("emb", r.emb, ge, rows, p.cols);
  }
  return r;
}

}  // namespace cohort::ps::testing
