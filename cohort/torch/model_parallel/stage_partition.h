// Splitting a torch::nn::Sequential into contiguous, balanced pipeline
// stages.
//
//   auto bounds = partition_sequential(model, 4);             // by parameter count
//   auto stage = stage_of(model, bounds, mesh.rank(MeshAxis::pp));
//
// partition_sequential returns stages + 1 offsets: stage s holds modules
// [bounds[s], bounds[s + 1]). Every stage gets at least one module; among
// such splits it picks one minimising the largest stage cost (ties: the
// earliest boundaries), where a module's cost is its parameter count or its
// measured forward time on a sample input (run through the modules in
// order, without autograd, median of `timing_runs`).
//
// Measured times differ between ranks; ranks must use the same split, so
// pass `agree_over` (any communicator of the ranks concerned, e.g. the pp
// group's, from the thread that owns it): its rank 0's result is broadcast.
// Parameter counts are the same everywhere and need no agreement.
//
// stage_of returns a new Sequential holding the same module objects (their
// parameters are shared with `model`, not copied).
#pragma once

#include <ATen/Tensor.h>
#include <torch/nn/modules/container/sequential.h>

#include <vector>

#include "cohort/comm/communicator.h"

namespace cohort {

enum class PartitionBy { parameters, time };

struct PartitionOptions {
  PartitionBy by = PartitionBy::parameters;
  at::Tensor sample_input;   // PartitionBy::time: the first module's input
  int timing_runs = 3;
  comm::Communicator* agree_over = nullptr;
};

std::vector<int> partition_sequential(const torch::nn::Sequential& model, int stages,
                                      const PartitionOptions& options = {});

// The balanced split of `costs` (one per module) into `stages` contiguous
// non-empty parts, as offsets (see the file comment).
std::vector<int> balanced_partition(const std::vector<double>& costs, int stages);

torch::nn::Sequential stage_of(const torch::nn::Sequential& model, const std::vector<int>& bounds, int stage);

}  // namespace cohort
