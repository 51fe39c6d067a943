// A replicated model's checkpoint: the module's state under "model" and the
// optimizer's (optimizer_archive.h) under "optimizer". Every replicated
// strategy saves this form (Strategy's default save/load), and zero's
// save() writes it too (its consolidated optimizer), so one checkpoint loads
// under any of them.
#pragma once

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>
#include <torch/serialize/archive.h>

namespace cohort {

void save_replicated_state(torch::nn::Module& module, const torch::optim::Optimizer& optimizer,
                           torch::serialize::OutputArchive& archive);
// In place (hooks that data-parallel wrappers attached to the parameters
// stay), after checking that the archive's parameters are the module's:
// ConfigError naming the first that differs, before anything changes.
void load_replicated_state(torch::nn::Module& module, torch::optim::Optimizer& optimizer,
                           torch::serialize::InputArchive& archive);

}  // namespace cohort
