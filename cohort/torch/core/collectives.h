// Tensor collectives: cohort's engine ops on LibTorch tensors, Horovod style.
//
//   at::Tensor mean = cohort::allreduce(t);                 // avg over ranks
//   cohort::allreduce_(t, {.op = cohort::ReduceOp::sum});   // in place
//   auto h = cohort::allgather_async(rows, {.name = "rows"}); // overlap, then
//   at::Tensor all = h.wait();
//
// Contracts shared by every op:
// - Tensors are checked at submission (tensor_view.h): defined, dense, CPU,
//   a dtype cohort moves; ConfigError otherwise. Non-contiguous tensors are
//   copied once into contiguous scratch (and copied back for in-place ops
//   when the op completes, in wait()).
// - A non-empty name matches the op across ranks, which may then submit in
//   any order (the engine's named ops; a name may not be reused on a rank
//   until its op has completed there). An empty name makes an ordered
//   submission: every rank must then issue its unnamed ops in the same order.
// - Ranks that disagree on an op (dtype, shape, reduce op, root) fail with a
//   MismatchError naming the op and the ranks (see cohort/engine/engine.h).
// - Results are new tensors unless the function name ends in '_' (in place,
//   returns its argument). None of these ops is differentiable: results do
//   not require grad.
// - The engine used is options.engine, else the thread's EngineScope, else
//   the one of cohort::init() (runtime.h).
// - Async forms return a TensorHandle (tensor_handle.h); the input tensors
//   must not be modified until it completes.
#pragma once

#include <ATen/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "cohort/common/reduce_op.h"
#include "cohort/engine/engine.h"
#include "cohort/torch/core/tensor_handle.h"

namespace cohort {

struct AllreduceOptions {
  std::string name;               // empty: ordered submission
  ReduceOp op = ReduceOp::avg;    // as Horovod: the average by default
  double prescale = 1.0;          // multiplies each input first (floating dtypes)
  double postscale = 1.0;         // multiplies the result
  engine::Engine* engine = nullptr;
};

// The reduction over ranks of `tensor` (same shape and dtype on every rank).
at::Tensor allreduce(const at::Tensor& tensor, const AllreduceOptions& options = {});
at::Tensor allreduce_(const at::Tensor& tensor, const AllreduceOptions& options = {});
TensorHandle allreduce_async(const at::Tensor& tensor, const AllreduceOptions& options = {});
TensorHandle allreduce_async_(const at::Tensor& tensor, const AllreduceOptions& options = {});

struct AllgatherOptions {
  std::string name;
  engine::Engine* engine = nullptr;
  // Gather into this contiguous tensor (its dtype, and as many elements as
  // the ranks' rows together) instead of a fresh one: a buffer reused step
  // after step costs no allocation or page faults. ConfigError on a
  // mismatch.
  at::Tensor out;
};

// Every rank's tensor concatenated along dim 0, rank 0's first. Ranks may
// differ in dim 0 (including 0 rows) and must agree on the other dims.
at::Tensor allgather(const at::Tensor& tensor, const AllgatherOptions& options = {});
TensorHandle allgather_async(const at::Tensor& tensor, const AllgatherOptions& options = {});

struct BroadcastOptions {
  std::string name;
  int root = 0;
  engine::Engine* engine = nullptr;
};

// Root's tensor on every rank (same shape and dtype everywhere).
at::Tensor broadcast(const at::Tensor& tensor, const BroadcastOptions& options = {});
at::Tensor broadcast_(const at::Tensor& tensor, const BroadcastOptions& options = {});
TensorHandle broadcast_async(const at::Tensor& tensor, const BroadcastOptions& options = {});
TensorHandle broadcast_async_(const at::Tensor& tensor, const BroadcastOptions& options = {});

struct AlltoallOptions {
  std::string name;
  // Rows of dim 0 sent to each rank (size() entries summing to dim 0); empty:
  // dim 0 is split evenly and must divide by size().
  std::vector<int64_t> splits;
  engine::Engine* engine = nullptr;
};

// Rows splits[p] of this rank go to rank p; the result holds the rows every
// rank sent here, in rank order, and the handle's received_splits() says how
// many came from each. Uneven splits exchange the split table first and pad
// every block to the largest one (traffic: size() x the largest block).
at::Tensor alltoall(const at::Tensor& tensor, const AlltoallOptions& options = {});
TensorHandle alltoall_async(const at::Tensor& tensor, const AlltoallOptions& options = {});

struct ReduceScatterOptions {
  std::string name;
  ReduceOp op = ReduceOp::avg;
  double prescale = 1.0;
  double postscale = 1.0;
  engine::Engine* engine = nullptr;
};

// The reduction over ranks of `tensor`, split along dim 0: rank r gets block
// r, where the first (rows % size) ranks get one row more than the others
// (Horovod's split). Every rank passes the same shape.
at::Tensor reduce_scatter(const at::Tensor& tensor, const ReduceScatterOptions& options = {});
TensorHandle reduce_scatter_async(const at::Tensor& tensor, const ReduceScatterOptions& options = {});

// Rows of dim 0 rank `rank` owns when `rows` are split over `size` ranks as
// reduce_scatter does: the offset of its first row and its row count.
struct RowBlock {
  int64_t offset = 0;
  int64_t rows = 0;
};
RowBlock reduce_scatter_block(int64_t rows, int size, int rank);

struct BarrierOptions {
  std::string name;  // empty: this rank's next unnamed barrier
  engine::Engine* engine = nullptr;
};
void barrier(const BarrierOptions& options = {});

// See Engine::join(): this rank has no more work; it takes part in the other
// ranks' ops with neutral contributions until every rank has joined. Returns
// the last rank to join (broadcast the model from it to resynchronise).
int join(engine::Engine* engine = nullptr);

}  // namespace cohort
