// Test support: the worker side of the test problem (problem.h) through a
// real ps::Worker: declare, start, then per step pull w and the batch's
// embedding rows, push gradients, commit; finally pull everything.
#pragma once

#include <chrono>
#include <functional>
#include <thread>

#include "cohort/parameter_server/worker.h"
#include "tests/parameter_server/problem.h"

namespace cohort::ps::testing {

struct TrainHooks {
  std::function<void(int64_t step)> before_commit;                 // e.g. die here
  std::function<void(int64_t step)> after_pull;                    // the step's parameters arrived
  std::function<void(int64_t step, double loss)> after_gradients;  // the batch's loss at the pulled values
  std::function<std::chrono::microseconds(int64_t step)> delay;    // added to the step (a straggler)
  bool fixed_data = false;                                          // every step sees step 0's batch of worker 0
};

inline std::vector<VariableSpec> problem_variables(const Problem& p) {
  return {{.name = "w", .rows = p.dims, .cols = p.outputs, .dtype = DType::f64},
          {.name = "emb", .rows = p.rows, .cols = p.cols, .dtype = DType::f64, .sparse = true}};
}

inline ReferenceResult train(Worker& worker, const Problem& p, int64_t steps, const TrainHooks& hooks = {},
                             const std::string& load_dir = "") {
  const auto w0 = initial_w(p), e0 = initial_emb(p);
  const void* initial[] = {w0.data(), e0.data()};
  worker.declare(problem_variables(p), initial);
  if (!load_dir.empty() && worker.options().worker == 0) worker.load(load_dir);
  const int k = worker.options().worker;
  std::vector<double> w(w0.size()), rows_values, dw, demb;
  for (int64_t s = worker.start(); s < steps; ++s) {
    const int64_t data_step = hooks.fixed_data ? 0 : s;
    const int data_worker = hooks.fixed_data ? 0 : k;
    const auto rows = batch_rows(p, data_worker, data_step);
    rows_values.resize(rows.size() * p.cols);
    Handle a = worker.pull(0, w.data());
    Handle b = worker.pull_rows(1, rows, rows_values.data());
    a.wait();
    b.wait();
    if (hooks.after_pull) hooks.after_pull(s);
    const double loss = gradients(p, data_worker, data_step, w, rows_values, rows, dw, demb);
    if (hooks.after_gradients) hooks.after_gradients(s, loss);
    if (hooks.delay) std::this_thread::sleep_for(hooks.delay(s));
    Handle c = worker.push(0, dw.data());
    Handle d = worker.push_rows(1, rows, demb.data());
    c.wait();
    d.wait();
    if (hooks.before_commit) hooks.before_commit(s);
    worker.end_step();
  }
  ReferenceResult out{std::vector<double>(w0.size()), std::vector<double>(e0.size())};
  Handle a = worker.pull(0, out.w.data());
  Handle b = worker.pull(1, out.emb.data());
  a.wait();
  b.wait();
  return out;
}

}  // namespace cohort::ps::testing
