#include "cohort/comm/f32_average.h"

#include <vector>

#include "cohort/common/check.h"

namespace cohort::comm {
namespace {

BufferView f32_view(std::vector<float>& v) { return BufferView{v.data(), v.size(), DType::f32}; }

}  // namespace

void allreduce_average_in_f32(Communicator& comm, BufferView send, BufferView recv) {
  COHORT_CHECK_EQ(send.count, recv.count) << "allreduce send and recv counts differ";
  std::vector<float> terms(send.count);
  widen_for_average(send.dtype, send.data, terms.data(), terms.size(), comm.size());
  comm.allreduce(f32_view(terms), {.op = ReduceOp::sum});
  narrow_average(recv.dtype, terms.data(), recv.data, recv.count, comm.size());
}

void reduce_scatter_average_in_f32(Communicator& comm, BufferView send, BufferView recv) {
  COHORT_CHECK_EQ(send.count, recv.count * size_t(comm.size())) << "reduce_scatter send must hold size() recv blocks";
  std::vector<float> terms(send.count), mine(recv.count);
  widen_for_average(send.dtype, send.data, terms.data(), terms.size(), comm.size());
  comm.reduce_scatter(f32_view(terms), f32_view(mine), {.op = ReduceOp::sum});
  narrow_average(recv.dtype, mine.data(), recv.data, recv.count, comm.size());
}

}  // namespace cohort::comm
