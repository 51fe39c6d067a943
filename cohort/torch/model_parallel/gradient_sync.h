// Gradient synchronisation for code that runs its own backward passes
// (pipeline stages, tensor-parallel replicas): average the .grad() of a list
// of parameters over an engine's ranks in one fused allreduce.
//
// Contract: collective over `engine`'s ranks, each passing the same number
// of parameters with the same shapes and dtypes in the same order (the
// engine raises MismatchError otherwise). A parameter without a gradient on
// a rank takes part with zeros and gets the average (as Horovod), so every
// rank ends with a defined .grad(). Parameters must share one floating
// dtype. With one rank nothing is communicated (gradients stay as they are,
// missing ones become zeros).
#pragma once

#include <ATen/Tensor.h>

#include <vector>

#include "cohort/engine/engine.h"

namespace cohort {

void synchronize_gradients(const std::vector<at::Tensor>& params, engine::Engine& engine);

}  // namespace cohort
