// Averages of f16/bf16 on backends whose partial sums travel between ranks
// (gloo's ring, MPI, the hierarchical levels): rounding each partial sum to
// the buffer's type would overflow (8 ranks of 9000.0 in f16) and round more
// than once. Such a collective runs instead as an f32 sum of each rank's
// widened terms, which every rank then divides and rounds once
// (widen_for_average / narrow_average in cohort/common/reduce.h): the result
// is the mean rounded once, the same on every backend. It costs an f32 copy
// of the buffer and twice the bytes on the wire. A rank that calls avg while
// another calls sum is still a mismatch, reported on the f32 call.
// Internal to cohort/comm.
#pragma once

#include "cohort/comm/communicator.h"
#include "cohort/common/reduce.h"

namespace cohort::comm {

// True when `op` on `dtype` must go through f32 on such a backend.
inline bool average_needs_f32(DType dtype, ReduceOp op) {
  return op == ReduceOp::avg && averages_through_f32(dtype);
}

// comm.allreduce(send, recv, avg) of f16/bf16, through f32.
void allreduce_average_in_f32(Communicator& comm, BufferView send, BufferView recv);

// comm.reduce_scatter(send, recv, avg) of f16/bf16, through f32.
void reduce_scatter_average_in_f32(Communicator& comm, BufferView send, BufferView recv);

}  // namespace cohort::comm
