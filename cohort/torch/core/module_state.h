// A module's parameters and buffers loaded from an archive in place.
//
// LibTorch's Module::load() replaces each parameter's storage with set_(),
// which gives the parameter a new autograd gradient accumulator: hooks on the
// old one (DistributedDataParallel's Reducer, DistributedOptimizer) no longer
// fire, and data parallelism silently stops reducing gradients (DDP's ranks
// then train apart). load_module_state() copies the saved values into the
// existing tensors instead (copy_ under no_grad), so every tensor keeps its
// identity, its autograd node and its hooks.
#pragma once

#include <torch/nn/module.h>
#include <torch/serialize/archive.h>

#include <string>
#include <vector>

namespace cohort {

// The tensors of `parameters` that require grad, in order: what optimizers
// and gradient reductions work on when some parameters are frozen.
std::vector<at::Tensor> trainable(const std::vector<at::Tensor>& parameters);

// Reads `archive` (as Module::save() wrote it) into `module`. First checks
// that the archive has a tensor of the right shape and dtype for every
// parameter and buffer, so that nothing is written unless everything fits;
// a mismatch is a ConfigError that begins with `what` (e.g. "checkpoint
// run.ckpt") and names the tensor.
void load_module_state(torch::nn::Module& module, torch::serialize::InputArchive& archive,
                       const std::string& what = "saved state");

// The check alone (nothing written): for loaders that must verify several
// parts before changing any of them.
void check_module_state(torch::nn::Module& module, torch::serialize::InputArchive& archive,
                        const std::string& what = "saved state");

}  // namespace cohort
