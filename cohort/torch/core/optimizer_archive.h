// An optimizer's complete state in a LibTorch archive: the per-parameter
// state that Optimizer::save()/load() carry, plus every param group's options
// (learning rate, momentum, betas, weight decay, ...), which LibTorch's C++
// load() does not restore (unlike PyTorch's load_state_dict).
//
// Used by broadcast_optimizer_state() and by checkpoints. Parameters are
// matched by position in the param groups.
#pragma once

#include <torch/optim/optimizer.h>
#include <torch/serialize/archive.h>

namespace cohort {

void save_optimizer(const torch::optim::Optimizer& optimizer, torch::serialize::OutputArchive& archive);

// Replaces the optimizer's state and group options with the archive's.
// Throws c10::Error (from LibTorch) or MismatchError when the archive was
// saved from an optimizer of another kind or parameter layout; the state may
// then be partly replaced.
void load_optimizer(torch::optim::Optimizer& optimizer, torch::serialize::InputArchive& archive);

}  // namespace cohort
