// Making every rank start identical: root's parameters, buffers and
// optimizer state on every rank.
//
//   cohort::broadcast_parameters(*model, 0);
//   cohort::broadcast_optimizer_state(optimizer, 0);
//
// Both are collective (every rank of the engine's group calls them with the
// same root) and blocking, and write into the existing tensors, so
// optimizers and hooks that hold them keep working.
#pragma once

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>
#include <torch/ordered_dict.h>

#include <string>

#include "cohort/engine/engine.h"

namespace cohort {

// Root's values of the module's parameters and buffers, recursively
// (BatchNorm running statistics included). Ranks whose modules differ in a
// tensor's shape or dtype fail with a MismatchError naming the tensor; a
// name that some rank lacks never runs (the engine's stall inspector names
// it and the missing ranks).
void broadcast_parameters(torch::nn::Module& module, int root = 0, engine::Engine* engine = nullptr);

// Root's values of the given tensors, matched by name across ranks.
void broadcast_parameters(const torch::OrderedDict<std::string, at::Tensor>& tensors, int root = 0,
                          engine::Engine* engine = nullptr, const std::string& name_prefix = "broadcast_parameters");

// Root's optimizer state on every rank: per-parameter state (SGD momentum
// buffers, Adam/AdamW step counts and moments, any optimizer's state that
// its save()/load() carry) and every param group's options (learning rate,
// betas, weight decay, ...). Parameters are matched by their position in the
// param groups, so every rank must build its optimizer over the same
// parameters in the same order. A rank that has not stepped yet (a late
// joiner) ends up identical to root. Ranks whose optimizers differ in kind
// or parameter layout fail with a MismatchError.
void broadcast_optimizer_state(torch::optim::Optimizer& optimizer, int root = 0,
                               engine::Engine* engine = nullptr);

}  // namespace cohort
