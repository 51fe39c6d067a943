// TerminateOnNaN: stops training when a batch's loss is NaN or infinite
// (every rank stops at the next step boundary, agreed).
#pragma once

#include <memory>

#include "cohort/torch/fit/callback.h"

namespace cohort {

std::shared_ptr<Callback> terminate_on_nan();

}  // namespace cohort
