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


def _create_process_group(store, rank, world_size, timeout):
    return _C.ProcessGroupCohort(store, rank, world_size, timeout)


if "COHORT" not in getattr(torch.distributed.Backend, "_plugins", {}):
    torch.distributed.Backend.register_backend("cohort", _create_process_group)
