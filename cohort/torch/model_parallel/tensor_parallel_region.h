// The communication of tensor (Megatron-style) model parallelism, as
// differentiable LibTorch functions over a tensor-parallel group's engine.
//
// A tensor-parallel (tp) group is the set of ranks that split one layer's
// weights; its engine is any cohort Engine whose ranks are exactly that group
// (the world engine when tp = world size, or a sub-group's engine). Inside a
// tp region each rank holds a slice of the activations; outside it every
// rank holds the same full activations. The four crossings:
//
//   function                          forward                     backward
//   copy_to_tensor_parallel_region    identity                    allreduce (sum)
//   reduce_from_tensor_parallel_region allreduce (sum)            identity
//   gather_from_tensor_parallel_region allgather along last dim   own slice of last dim
//   scatter_to_tensor_parallel_region own slice of last dim       allgather along last dim
//
// Each is a torch::autograd::Function, so gradients flow through the
// communication with no hooks.
//
// Contracts:
// - Collectives are ordered (unnamed) submissions on the group's engine:
//   every rank of the group must call these functions, and run backward, in
//   the same order. That holds when the ranks run the same model on
//   same-shaped inputs (LibTorch orders a backward pass by the graph alone).
// - Tensors are dense CPU tensors of a dtype cohort moves (tensor_view.h);
//   activations on the same call have the same shape on every rank.
// - Scatter needs the last dim divisible by the group size (ConfigError
//   naming the tensor and sizes otherwise); gather needs equal last dims.
// - Each call costs one engine round trip: about 13 us for a 1 KiB allreduce
//   and 0.7 ms for 1 MiB at tp = 2 over shm (rank threads on a busy 2-core
//   machine). Fine for layers of realistic size, dominant for toy ones.
// - A group of one (tp = 1) communicates nothing.
#pragma once

#include <ATen/Tensor.h>

#include <cstdint>

#include "cohort/engine/engine.h"

namespace cohort {

// The ranks a tensor-parallel layer splits over: their engine, and this
// rank's place in it. Cheap to copy; the engine must outlive the layers.
struct TensorParallelGroup {
  engine::Engine* engine = nullptr;
  int rank = 0;
  int size = 1;

  // The group of `engine` (or, when null, of the thread's current engine:
  // runtime.h's resolve_engine).
  static TensorParallelGroup of(engine::Engine* engine = nullptr);
};

at::Tensor copy_to_tensor_parallel_region(const at::Tensor& input, const TensorParallelGroup& group);
at::Tensor reduce_from_tensor_parallel_region(const at::Tensor& input, const TensorParallelGroup& group);
at::Tensor gather_from_tensor_parallel_region(const at::Tensor& input, const TensorParallelGroup& group);
at::Tensor scatter_to_tensor_parallel_region(const at::Tensor& input, const TensorParallelGroup& group);

// Non-differentiable helpers the functions above and the layers share.
// The sum over the group (a new tensor).
at::Tensor tensor_parallel_sum(const at::Tensor& input, const TensorParallelGroup& group);
// Every rank's `input` concatenated along the last dim, rank 0's first.
at::Tensor tensor_parallel_gather_last_dim(const at::Tensor& input, const TensorParallelGroup& group);
// This rank's contiguous 1/size of the last dim.
at::Tensor tensor_parallel_slice_last_dim(const at::Tensor& input, const TensorParallelGroup& group);

// `total` split evenly over the group, with a ConfigError naming `what`
// (e.g. "ColumnParallelLinear out_features") when it does not divide.
int64_t divide_evenly(int64_t total, int size, const char* what);

}  // namespace cohort
