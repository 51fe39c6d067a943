// The learning rate of step s when training on n ranks (Goyal et al.,
// "Accurate, Large Minibatch SGD", as Horovod recommends): the one-rank rate
// scaled by n, because the global batch is n times larger, reached by a
// linear warm-up from the one-rank rate so that the first steps, taken from
// random weights, do not diverge.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace cohort::examples {

class LrSchedule {
 public:
  // `warmup_steps` 0: the scaled rate from the first step.
  LrSchedule(double base_lr, int world_size, bool scale_by_size, int64_t warmup_steps)
      : base_(base_lr), target_(scale_by_size ? base_lr * world_size : base_lr),
        warmup_(std::max<int64_t>(0, warmup_steps)) {}

  double at(int64_t step) const {
    if (step >= warmup_) return target_;
    return base_ + (target_ - base_) * double(step + 1) / double(warmup_);
  }
  double target() const { return target_; }
  int64_t warmup_steps() const { return warmup_; }

 private:
  double base_, target_;
  int64_t warmup_;
};

}  // namespace cohort::examples
