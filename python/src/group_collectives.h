// GroupCollectives: torch.distributed's collectives, as c10d states them,
// on one GroupWorld's engine, with no c10d type in the interface (the
// c10d-facing class of the torch version in use, process_group.cc, maps its
// options onto these calls).
//
// Every call submits its engine ops at once, in the order torch.distributed
// issued them (ordered submissions: torch requires every rank of a group to
// issue its collectives in the same order, so no names are needed), and
// returns a Pending: the handles to wait for and what to do once they are
// done (copy a gathered result into the caller's output tensors). Inputs and
// outputs are the caller's tensors; they must stay untouched until the
// Pending finishes (c10d's contract for a Work).
//
// Ranks that disagree on an op (shape, dtype, reduce op, root) fail it on
// every rank with cohort's MismatchError naming the op; a rank that dies
// fails every pending op with PeerLostError naming it (the engine's
// contracts). Arguments that c10d would reject on one rank only (a list of
// the wrong length, a shape that does not match the group's) throw
// ConfigError at submission.
#pragma once

#include <ATen/Tensor.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "cohort/common/reduce_op.h"
#include "cohort/torch/core/tensor_handle.h"
#include "python/src/group_world.h"

namespace cohort::python {

struct Pending {
  std::vector<TensorHandle> handles;
  // Runs once every handle's wait() returned, with their results in order.
  std::function<void(std::vector<at::Tensor>& results)> finish;
  // What c10d's Work::result() and its future return.
  std::vector<at::Tensor> outputs;

  // Waits for the handles in order and runs finish; rethrows an op's error.
  void complete();
};

class GroupCollectives {
 public:
  explicit GroupCollectives(GroupWorld& world) : world_(world) {}

  int rank() const { return world_.rank(); }
  int size() const { return world_.size(); }

  // In place on every tensor.
  Pending allreduce(const std::vector<at::Tensor>& tensors, ReduceOp op);
  Pending broadcast(const std::vector<at::Tensor>& tensors, int root);
  // The reduction lands in `tensors` on `root` only; the others' are left as they were.
  Pending reduce(const std::vector<at::Tensor>& tensors, int root, ReduceOp op);
  // outputs[r] = rank r's input (each list as long as the group).
  Pending allgather(const std::vector<at::Tensor>& outputs, const at::Tensor& input);
  // output = every rank's input concatenated (flat), rank 0's first.
  Pending allgather_into(const at::Tensor& output, const at::Tensor& input);
  // allgather on `root` only; the others pass no outputs.
  Pending gather(const std::vector<at::Tensor>& outputs, const at::Tensor& input, int root);
  // output = root's inputs[rank()]; only root passes inputs.
  Pending scatter(const at::Tensor& output, const std::vector<at::Tensor>& inputs, int root);
  // output = the reduction over ranks of their inputs[rank()].
  Pending reduce_scatter(const at::Tensor& output, const std::vector<at::Tensor>& inputs, ReduceOp op);
  // output = block rank() of the reduction of the flat inputs (size() equal blocks).
  Pending reduce_scatter_flat(const at::Tensor& output, const at::Tensor& input, ReduceOp op);
  // Rows input_splits[p] of dim 0 go to rank p; output receives, in rank
  // order, output_splits[p] rows from each (empty splits: even).
  Pending alltoall_flat(const at::Tensor& output, const at::Tensor& input, std::vector<int64_t> output_splits,
                        std::vector<int64_t> input_splits);
  // outputs[p] receives rank p's inputs[rank()].
  Pending alltoall(const std::vector<at::Tensor>& outputs, const std::vector<at::Tensor>& inputs);
  Pending barrier();

 private:
  engine::Engine* engine() { return &world_.engine(); }
  GroupWorld& world_;
};

}  // namespace cohort::python
