"""Horovod's PyTorch API on cohort's engine: ``import cohort.torch as hvd``.

A Horovod program runs with its import line changed:

    import cohort.torch as hvd           # was: import horovod.torch as hvd
    hvd.init()
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)

and is launched by cohortrun (or torchrun, mpirun):

    cohortrun -np 4 python3 train.py

What differs from Horovod is listed in python/cohort/torch/README.md.
"""

from cohort.torch import elastic
from cohort.torch.compression import Compression
from cohort.torch.functions import (allgather_object, broadcast_object, broadcast_optimizer_state,
                                    broadcast_parameters)
from cohort.torch.mpi_ops import (Adasum, Average, HorovodInternalError, Max, Min, Product, Sum, allgather,
                                  allgather_async, allreduce, allreduce_, allreduce_async, allreduce_async_,
                                  alltoall, alltoall_async, barrier, broadcast, broadcast_, broadcast_async,
                                  broadcast_async_, ccl_built, cross_rank, cross_size, cuda_built, ddl_built,
                                  grouped_allreduce, grouped_allreduce_, grouped_allreduce_async,
                                  grouped_allreduce_async_, init, is_homogeneous, is_initialized, join,
                                  local_rank, local_size, nccl_built, poll, rank, reducescatter,
                                  reducescatter_async, rocm_built, shutdown, size, synchronize)
from cohort.torch.elastic import HostsUpdatedInterrupt
from cohort.torch.optimizer import DistributedOptimizer

__all__ = [
    "Adasum", "Average", "Compression", "DistributedOptimizer", "HorovodInternalError", "HostsUpdatedInterrupt",
    "Max", "Min", "Product", "Sum", "allgather", "allgather_async", "allgather_object", "allreduce", "allreduce_",
    "allreduce_async", "allreduce_async_", "alltoall", "alltoall_async", "barrier", "broadcast", "broadcast_",
    "broadcast_async", "broadcast_async_", "broadcast_object", "broadcast_optimizer_state",
    "broadcast_parameters", "ccl_built", "cross_rank", "cross_size", "cuda_built", "ddl_built", "elastic",
    "grouped_allreduce", "grouped_allreduce_", "grouped_allreduce_async", "grouped_allreduce_async_", "init",
    "is_homogeneous", "is_initialized", "join", "local_rank", "local_size", "nccl_built", "poll", "rank",
    "reducescatter", "reducescatter_async", "rocm_built", "shutdown", "size", "synchronize",
]
