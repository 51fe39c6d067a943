// The functions under cohort.torch (Horovod's PyTorch API, written in
// Python over these): the job's runtime (cohort::init() and its elastic
// membership) and the tensor collectives of cohort/torch/core on the
// runtime's engine, each returning a handle.
#pragma once

namespace pybind11 {
class module_;
}

namespace cohort::python {

// Binds into `module`: init, shutdown, initialized, rank, size, local_rank,
// local_size, elastic, reform, membership_changed, elastic_joining,
// finish_joining; ReduceOp; Handle; allreduce_async, allgather_async,
// broadcast_async, alltoall_async, reducescatter_async, barrier, join.
// Calls that block release the GIL.
void bind_horovod_ops(pybind11::module_& module);

}  // namespace cohort::python
