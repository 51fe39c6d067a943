// How a tensor-parallel module's parameters map onto the full (unsplit)
// parameters of the same model on one rank, and moving whole models across
// that map: load full weights into a tp model, gather a tp model's full
// weights or gradients, or take this rank's slice of any full tensor.
//
// Every tp layer (parallel_linear.h, vocab_parallel_embedding.h) implements
// TensorParallelModule and says, per parameter, along which dim it is split
// and in how many interleaved chunks (a fused QKV projection splits each of
// Q, K, V separately: chunks = 3). Parameters of other modules (LayerNorm,
// position embeddings) are replicated: every tp rank holds all of them.
//
// Names are the module's own named_parameters() names, so a single-process
// model with the same structure (tp = 1) has the same keys.
#pragma once

#include <ATen/Tensor.h>
#include <torch/nn/module.h>

#include <cstdint>
#include <map>
#include <string>

#include "cohort/torch/model_parallel/tensor_parallel_region.h"

namespace cohort {

// Where a parameter's slice lies in the full parameter. dim < 0: replicated.
// Otherwise dim `dim` of the full tensor is `chunks` equal chunks, each split
// evenly over the group; rank r holds slice r of every chunk, in chunk order.
struct ShardSpec {
  int64_t dim = -1;
  int64_t chunks = 1;
};

class TensorParallelModule {
 public:
  virtual ~TensorParallelModule() = default;
  // For a parameter registered directly on this module ("weight", "bias").
  virtual ShardSpec shard_spec(const std::string& parameter) const = 0;
  virtual const TensorParallelGroup& group() const = 0;
};

// This rank's slice of `full` under `spec` (a contiguous copy; `full` itself
// when replicated). ConfigError naming `what` when the dim does not divide.
at::Tensor shard_of(const at::Tensor& full, const ShardSpec& spec, const TensorParallelGroup& group,
                    const std::string& what);
// The inverse, collective over the group: every rank's `local` joined.
at::Tensor unshard(const at::Tensor& local, const ShardSpec& spec, const TensorParallelGroup& group);

// True when `module` itself splits its parameters over a group of more than
// one rank (a group of one holds whole layers).
bool splits_over_ranks(const torch::nn::Module& module);

// The spec of each of `module`'s parameters (by recursive name).
std::map<std::string, ShardSpec> shard_specs(torch::nn::Module& module);

// Copies full tensors into `module`'s parameters, each rank keeping its
// slice. Every parameter must have an entry of the full shape (ConfigError
// naming the parameter otherwise); extra entries are an error too, so that
// a misspelt name cannot go unnoticed. Not collective.
void load_full_parameters(torch::nn::Module& module, const std::map<std::string, at::Tensor>& full);

// Collective over the group of the module's tp layers: the full value of
// every parameter (or, with `gradients`, of every parameter's gradient;
// undefined gradients are zeros). Replicated ones are copied, not reduced.
std::map<std::string, at::Tensor> gather_full_parameters(torch::nn::Module& module, bool gradients = false);

}  // namespace cohort
