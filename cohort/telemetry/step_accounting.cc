#include "cohort/telemetry/step_accounting.h"

namespace cohort::telemetry {

void StepTotals::add(const StepTimes& t) {
  ++steps;
  rows += t.rows;
  step_ns += t.step_ns;
  compute_ns += t.compute_ns;
  peer_wait_ns += t.peer_wait_ns;
  transfer_ns += t.transfer_ns;
  input_ns += t.input_ns;
  checkpoint_ns += t.checkpoint_ns;
}

double StepTotals::mean_ms(uint64_t StepTotals::*part) const {
  return steps > 0 ? static_cast<double>(this->*part) / 1e6 / static_cast<double>(steps) : 0.0;
}

double StepTotals::samples_per_s() const {
  return step_ns > 0 ? static_cast<double>(rows) * 1e9 / static_cast<double>(step_ns) : 0.0;
}

uint64_t StepTotals::other_ns() const {
  const uint64_t parts = compute_ns + peer_wait_ns + transfer_ns + input_ns + checkpoint_ns;
  return step_ns > parts ? step_ns - parts : 0;
}

void set_means(RankSample& s, const StepTotals& t) {
  s.window_steps = t.steps;
  s.step_ms = t.mean_ms(&StepTotals::step_ns);
  s.compute_ms = t.mean_ms(&StepTotals::compute_ns);
  s.peer_wait_ms = t.mean_ms(&StepTotals::peer_wait_ns);
  s.transfer_ms = t.mean_ms(&StepTotals::transfer_ns);
  s.input_ms = t.mean_ms(&StepTotals::input_ns);
  s.checkpoint_ms = t.mean_ms(&StepTotals::checkpoint_ns);
  s.other_ms = t.steps > 0 ? static_cast<double>(t.other_ns()) / 1e6 / static_cast<double>(t.steps) : 0.0;
  s.samples_per_s = t.samples_per_s();
}

void StepAccounting::add(const StepTimes& t, int64_t epoch, int64_t step) {
  std::lock_guard<std::mutex> lock(mutex_);
  window_.add(t);
  epoch_.add(t);
  last_epoch_ = epoch;
  last_step_ = step;
}

StepAccounting::Window StepAccounting::take_window() {
  std::lock_guard<std::mutex> lock(mutex_);
  Window w{.totals = window_, .epoch = last_epoch_, .step = last_step_};
  window_ = {};
  return w;
}

StepTotals StepAccounting::epoch() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return epoch_;
}

void StepAccounting::reset_epoch() {
  std::lock_guard<std::mutex> lock(mutex_);
  epoch_ = {};
}

}  // namespace cohort::telemetry
