#include "cohort/torch/fit/lr_schedules.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "cohort/common/check.h"

namespace cohort {

LrSchedule constant_lr(double lr) {
  return [lr](const SchedulePoint&) { return lr; };
}

LrSchedule step_decay(double lr, double factor, int64_t every_epochs) {
  COHORT_CHECK_AS(ConfigError, every_epochs >= 1) << "step_decay: every_epochs must be >= 1";
  return [=](const SchedulePoint& p) { return lr * std::pow(factor, double(p.epoch / every_epochs)); };
}

LrSchedule exponential_decay(double lr, double rate, int64_t decay_steps, bool staircase) {
  COHORT_CHECK_AS(ConfigError, decay_steps >= 1) << "exponential_decay: decay_steps must be >= 1";
  return [=](const SchedulePoint& p) {
    const double t = double(p.step) / double(decay_steps);
    return lr * std::pow(rate, staircase ? std::floor(t) : t);
  };
}

LrSchedule cosine_decay(double lr, int64_t decay_steps, double final_lr) {
  COHORT_CHECK_AS(ConfigError, decay_steps >= 1) << "cosine_decay: decay_steps must be >= 1";
  return [=](const SchedulePoint& p) {
    const double t = std::min(1.0, double(p.step) / double(decay_steps));
    return final_lr + (lr - final_lr) * 0.5 * (1 + std::cos(std::numbers::pi * t));
  };
}

LrSchedule polynomial_decay(double lr, int64_t decay_steps, double final_lr, double power) {
  COHORT_CHECK_AS(ConfigError, decay_steps >= 1) << "polynomial_decay: decay_steps must be >= 1";
  return [=](const SchedulePoint& p) {
    const double t = std::min(1.0, double(p.step) / double(decay_steps));
    return final_lr + (lr - final_lr) * std::pow(1 - t, power);
  };
}

LrSchedule piecewise_constant(std::vector<int64_t> boundaries, std::vector<double> values) {
  COHORT_CHECK_AS(ConfigError, values.size() == boundaries.size() + 1)
      << "piecewise_constant: " << boundaries.size() << " boundaries need " << boundaries.size() + 1
      << " values, got " << values.size();
  COHORT_CHECK_AS(ConfigError, std::is_sorted(boundaries.begin(), boundaries.end()))
      << "piecewise_constant: boundaries must be increasing";
  return [boundaries = std::move(boundaries), values = std::move(values)](const SchedulePoint& p) {
    const auto it = std::upper_bound(boundaries.begin(), boundaries.end(), p.step);
    return values[size_t(it - boundaries.begin())];
  };
}

LrSchedule linear_warmup(LrSchedule schedule, int64_t warmup_steps, double initial_lr) {
  COHORT_CHECK_AS(ConfigError, warmup_steps >= 0) << "linear_warmup: warmup_steps must be >= 0";
  COHORT_CHECK_AS(ConfigError, static_cast<bool>(schedule)) << "linear_warmup: no schedule to warm up to";
  return [=](const SchedulePoint& p) {
    if (p.step >= warmup_steps) return schedule(p);
    SchedulePoint end = p;
    end.step = warmup_steps;
    end.epoch = warmup_steps / std::max<int64_t>(1, p.steps_per_epoch);
    const double target = schedule(end);
    return initial_lr + (target - initial_lr) * double(p.step + 1) / double(warmup_steps);
  };
}

}  // namespace cohort
