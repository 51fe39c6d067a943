"""cohort for Python: cohort's engine under PyTorch.

``import cohort`` registers the ``torch.distributed`` backend "cohort":

    import cohort, torch.distributed as dist
    dist.init_process_group("cohort")          # under cohortrun, torchrun, mpirun
    model = torch.nn.parallel.DistributedDataParallel(model)

and ``import cohort.torch as hvd`` is Horovod's PyTorch API on the same engine.
Errors that cohort raises in C++ arrive as the exceptions below (every one a
RuntimeError), carrying cohort's message: the rank that died, the op whose
ranks disagreed.
"""

import atexit
import os

import torch  # the extension links LibTorch's Python bindings: load them first
import torch.distributed

from cohort import _C
from cohort._C import (
    CohortError,
    ConfigError,
    MismatchError,
    PeerLostError,
    TimeoutError,
)

__all__ = ["CohortError", "ConfigError", "MismatchError", "PeerLostError", "TimeoutError"]
__version__ = _C.__version__


def _fill_torch_env_under_mpirun():
    """env:// under OpenMPI's mpirun: the rank and size are MPI's (the master
    is the user's: mpirun -x MASTER_ADDR=host -x MASTER_PORT=port, as for
    gloo)."""
    for torch_name, mpi_name in (("RANK", "OMPI_COMM_WORLD_RANK"), ("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE"),
                                 ("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK"),
                                 ("LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE")):
        if mpi_name in os.environ:
            os.environ.setdefault(torch_name, os.environ[mpi_name])


_fill_torch_env_under_mpirun()


def _create_process_group(store, rank, world_size, timeout):
    return _C.ProcessGroupCohort(store, rank, world_size, timeout)



def _close_at_exit():
    """Before the interpreter finalizes, while other threads may still take
    the GIL: the cohort process groups and the world of init() stop, and
    their threads free the Python tensors they hold (a thread that takes the
    GIL during finalization is ended by CPython, which aborts the process:
    python/src/process_group.h)."""
    _C._close_process_groups()
    if _C.initialized():
        _C.shutdown()


atexit.register(_close_at_exit)

if "COHORT" not in getattr(torch.distributed.Backend, "_plugins", {}):
    torch.distributed.Backend.register_backend("cohort", _create_process_group)
