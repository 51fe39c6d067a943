// Megatron's two tensor-parallel linear layers, y = x W^T + b split over the
// ranks of a tensor-parallel group (tensor_parallel_region.h).
//
//   ColumnParallelLinear: W split by rows (output features). Each rank
//     computes its slice of y from the full x; with gather_output the slices
//     are gathered so every rank gets the full y, otherwise y stays split
//     (the input of a RowParallelLinear, or of parallel_cross_entropy).
//   RowParallelLinear: W split by columns (input features). Each rank
//     multiplies its slice of x (split by a preceding ColumnParallelLinear:
//     input_is_parallel, or scattered here from a full x) and the partial
//     products are summed over the group; the bias is added once, after.
//
// A ColumnParallelLinear followed by a RowParallelLinear costs one allreduce
// forward and one backward (an MLP or attention block, Megatron style).
//
// Contracts:
// - The split dimension must divide by the group size (and by `chunks`):
//   ConfigError naming the layer and sizes otherwise.
// - Initialisation reproduces the single-process layer: every rank draws the
//   FULL weight (uniform(-1/sqrt(in), 1/sqrt(in)) like torch::nn::Linear)
//   from options.seed with a private generator, then keeps its slice. The
//   same seed therefore gives the same model at any tp size, including 1.
//   load_full_parameters() (tensor_parallel_module.h) or load_full() loads
//   given full weights instead.
// - `chunks` (column only): the output features are `chunks` equal parts
//   (e.g. Q, K and V of a fused projection), each split over the group, so
//   that rank r holds slice r of every part. The gathered output is in the
//   full layer's order.
// - Every rank of the group must run forward/backward in the same order
//   (ordered collectives). Inputs are (..., in_features).
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <cstdint>
#include <string>

#include "cohort/torch/model_parallel/tensor_parallel_module.h"
#include "cohort/torch/model_parallel/tensor_parallel_region.h"

namespace cohort {

struct ColumnParallelLinearOptions {
  bool bias = true;
  bool gather_output = true;
  int64_t chunks = 1;
  uint64_t seed = 0;
  at::ScalarType dtype = at::kFloat;
  engine::Engine* engine = nullptr;  // the tp group's; null: the thread's current engine
};

class ColumnParallelLinearImpl : public torch::nn::Module, public TensorParallelModule {
 public:
  ColumnParallelLinearImpl(int64_t in_features, int64_t out_features, ColumnParallelLinearOptions options = {});

  at::Tensor forward(const at::Tensor& input);
  // Full weight (out, in) and bias (out) of the single-process layer; bias
  // must be given iff the layer has one.
  void load_full(const at::Tensor& weight, const at::Tensor& bias = {});

  ShardSpec shard_spec(const std::string& parameter) const override;
  const TensorParallelGroup& group() const override { return group_; }

  at::Tensor weight;  // (out_features / size, in_features)
  at::Tensor bias;    // (out_features / size), undefined without bias
  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }  // full
  int64_t local_out_features() const { return out_ / group_.size; }
  const ColumnParallelLinearOptions& options() const { return options_; }

 private:
  int64_t in_, out_;
  ColumnParallelLinearOptions options_;
  TensorParallelGroup group_;
};
// Module holders as TORCH_MODULE declares them, with the constructor spelt
// out so that options can be passed as a braced list.
class ColumnParallelLinear : public torch::nn::ModuleHolder<ColumnParallelLinearImpl> {
 public:
  using torch::nn::ModuleHolder<ColumnParallelLinearImpl>::ModuleHolder;
  ColumnParallelLinear(int64_t in_features, int64_t out_features, ColumnParallelLinearOptions options = {})
      : ModuleHolder(std::make_shared<ColumnParallelLinearImpl>(in_features, out_features, options)) {}
  using Impl = ColumnParallelLinearImpl;
};

struct RowParallelLinearOptions {
  bool bias = true;
  bool input_is_parallel = false;  // true: input is (..., in_features / size), this rank's slice
  uint64_t seed = 0;
  at::ScalarType dtype = at::kFloat;
  engine::Engine* engine = nullptr;
};

class RowParallelLinearImpl : public torch::nn::Module, public TensorParallelModule {
 public:
  RowParallelLinearImpl(int64_t in_features, int64_t out_features, RowParallelLinearOptions options = {});

  at::Tensor forward(const at::Tensor& input);
  void load_full(const at::Tensor& weight, const at::Tensor& bias = {});

  ShardSpec shard_spec(const std::string& parameter) const override;
  const TensorParallelGroup& group() const override { return group_; }

  at::Tensor weight;                           // (out_features, in_features / size)
  at::Tensor bias;                             // (out_features), replicated
  int64_t in_features() const { return in_; }  // full
  int64_t out_features() const { return out_; }
  int64_t local_in_features() const { return in_ / group_.size; }
  const RowParallelLinearOptions& options() const { return options_; }

 private:
  int64_t in_, out_;
  RowParallelLinearOptions options_;
  TensorParallelGroup group_;
};
class RowParallelLinear : public torch::nn::ModuleHolder<RowParallelLinearImpl> {
 public:
  using torch::nn::ModuleHolder<RowParallelLinearImpl>::ModuleHolder;
  RowParallelLinear(int64_t in_features, int64_t out_features, RowParallelLinearOptions options = {})
      : ModuleHolder(std::make_shared<RowParallelLinearImpl>(in_features, out_features, options)) {}
  using Impl = RowParallelLinearImpl;
};

// The full weight (out, in) and bias (out) a layer of these sizes starts
// from for `seed`: what every rank slices. Uses its own generator, so rank
// threads of one process do not race on LibTorch's global one.
struct FullLinearInit {
  at::Tensor weight, bias;
};
FullLinearInit full_linear_init(int64_t in_features, int64_t out_features, bool bias, uint64_t seed,
                                at::ScalarType dtype);

}  // namespace cohort
