// Learning-rate schedules: the rate as a function of the position in
// training, for LearningRateScheduler (learning_rate_scheduler.h). Each is a
// pure function of (step, epoch), so a resumed run gets the same rates.
//
//   auto s = cohort::linear_warmup(cohort::cosine_decay(0.4, /*decay_steps=*/10000), /*warmup_steps=*/500,
//                                  /*initial_lr=*/0.1);
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

namespace cohort {

struct SchedulePoint {
  int64_t step = 0;             // optimizer steps done before this one
  int64_t epoch = 0;            // the epoch in progress (0-based)
  int64_t steps_per_epoch = 1;
};

using LrSchedule = std::function<double(const SchedulePoint&)>;

LrSchedule constant_lr(double lr);
// lr * factor^floor(epoch / every_epochs)
LrSchedule step_decay(double lr, double factor, int64_t every_epochs);
// lr * rate^(step / decay_steps), continuous or, with staircase, floored
LrSchedule exponential_decay(double lr, double rate, int64_t decay_steps, bool staircase = false);
// From lr to final_lr along half a cosine over decay_steps, then final_lr.
LrSchedule cosine_decay(double lr, int64_t decay_steps, double final_lr = 0);
// From lr to final_lr as (1 - step/decay_steps)^power, then final_lr.
LrSchedule polynomial_decay(double lr, int64_t decay_steps, double final_lr = 0, double power = 1);
// values[i] while step < boundaries[i], values.back() after the last
// (values has one more entry than boundaries; ConfigError otherwise).
LrSchedule piecewise_constant(std::vector<int64_t> boundaries, std::vector<double> values);
// Linear from initial_lr to schedule(warmup_steps) over the first
// warmup_steps steps, then `schedule` (Goyal et al.'s warm-up; Horovod's
// recipe starts from lr / size and warms up to lr).
LrSchedule linear_warmup(LrSchedule schedule, int64_t warmup_steps, double initial_lr);

}  // namespace cohort
