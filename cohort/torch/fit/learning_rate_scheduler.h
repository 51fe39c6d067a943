// LearningRateScheduler: sets the learning rate before every step from a
// schedule (lr_schedules.h). Keras sets it per epoch; per step is what
// warm-ups need, and it costs nothing here.
#pragma once

#include <memory>

#include "cohort/torch/fit/callback.h"
#include "cohort/torch/fit/lr_schedules.h"

namespace cohort {

std::shared_ptr<Callback> learning_rate_scheduler(LrSchedule schedule);

}  // namespace cohort
