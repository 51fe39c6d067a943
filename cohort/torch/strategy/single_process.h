// What the strategies that run in one process (one_device, mirrored,
// central_storage) share: they refuse to start as one rank of several (each
// rank would train alone, silently), and they combine values across
// processes trivially.
#pragma once

#include <ATen/Tensor.h>

#include <string>

#include "cohort/torch/core/strategy.h"

namespace cohort::detail {

// ConfigError when the launcher's variables say this process is one rank of
// several: `name` trains in one process.
void check_single_process(const std::string& name);

// The module's and optimizer's state in `archive` under "model" and
// "optimizer" (the form every replicated strategy saves).
void save_replicated(torch::nn::Module& module, torch::optim::Optimizer& optimizer,
                     torch::serialize::OutputArchive& archive);
void load_replicated(torch::nn::Module& module, torch::optim::Optimizer& optimizer,
                     torch::serialize::InputArchive& archive);

// The loss of a step without rows: zero, yet reaching every trainable
// parameter, so that a backward through it gives zero gradients everywhere
// and every gradient hook fires (the collectives of the other processes'
// step find this one).
at::Tensor zero_loss(torch::nn::Module& module);

}  // namespace cohort::detail
