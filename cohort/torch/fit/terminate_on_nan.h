// TerminateOnNaN: stops training when a batch's loss is NaN or infinite
// (every rank stops at the step boundary that fit()'s next vote agrees;
// see model.h).
#pragma once

#include <memory>

#include "cohort/torch/fit/callback.h"

namespace cohort {

std::shared_ptr<Callback> terminate_on_nan();

}  // namespace cohort
