"""Horovod's helpers over the collectives: parameters, optimizer state and objects.

Contract: every function is collective (all ranks call it, in the same order
with respect to other unnamed collectives) and leaves every rank with the
root's values. Objects travel as pickles (the standard pickle module: what
it cannot pickle, such as lambdas, is refused with pickle's error).
"""

import collections
import pickle

import torch

from cohort.torch.mpi_ops import (allgather, broadcast_, broadcast_async_, rank, size, synchronize)


def broadcast_parameters(params, root_rank):
    """Writes root_rank's parameters into every rank's.

    params: a dict of tensors (model.state_dict()), or a list of tensors or
    of (name, tensor) pairs (model.parameters(), model.named_parameters()).
    """
    if isinstance(params, dict):
        params = sorted(params.items())
    elif isinstance(params, list):
        params = [p if isinstance(p, tuple) else (None, p) for p in params]
    else:
        raise ValueError(f"hvd.broadcast_parameters: params must be a dict (model.state_dict()) or a list "
                         f"(list(model.named_parameters())), not {type(params).__name__}")
    # All at once, then wait: the engine fuses the small ones.
    handles = [broadcast_async_(p, root_rank, name) for name, p in params]
    for handle in handles:
        synchronize(handle)


def broadcast_optimizer_state(optimizer, root_rank, model=None):
    """Writes root_rank's optimizer state (tensors, scalars and param-group options) into every rank's.

    An optimizer without state yet gets it first from one local step() on
    zero gradients (no collective), so that every rank has the same state to
    receive. model is Horovod's argument for sparse parameters, which cohort
    does not have.
    """
    from cohort.torch.optimizer import _DistributedOptimizer

    if isinstance(optimizer, torch.optim.LBFGS):
        raise ValueError("hvd.broadcast_optimizer_state: torch.optim.LBFGS's state is not per parameter; "
                         "broadcast it with hvd.broadcast_object(optimizer.state_dict()) instead")
    state_dict = optimizer.state_dict()
    if not state_dict["state"]:
        for group in optimizer.param_groups:
            for p in group["params"]:
                if p.requires_grad:
                    p.grad = torch.zeros_like(p)
        # A DistributedOptimizer's step() would allreduce: take its wrapped
        # optimizer's step, local.
        if isinstance(optimizer, _DistributedOptimizer):
            super(_DistributedOptimizer, optimizer).step()
        else:
            optimizer.step()
        state_dict = optimizer.state_dict()
    if not state_dict["state"]:
        return  # a stateless optimizer (plain SGD): only its options matter, which it does not have yet

    tensors = []
    scalars = {}
    setters = {}
    occurrences = collections.defaultdict(int)

    def option_setter(index, key):
        def set_option(value):
            optimizer.param_groups[index][key] = value
        return set_option

    def state_setter(param_state, key):
        def set_state(value):
            param_state[key] = value
        return set_state

    for index, group in enumerate(state_dict["param_groups"]):
        for key, value in group.items():
            if key != "params":
                name = f"{key}.{index}"
                scalars[name] = value
                setters[name] = option_setter(index, key)
        for pid in group["params"]:
            param_state = state_dict["state"].get(pid)
            if param_state is None:
                continue  # no gradient yet (requires_grad is False)
            # state_dict()'s per-parameter dicts are the optimizer's own: the
            # tensors are written in place, the scalars through the dict.
            for key, value in param_state.items():
                occurrences[key] += 1
                name = f"{key}.{occurrences[key]}"
                if torch.is_tensor(value):
                    tensors.append((name, value))
                else:
                    scalars[name] = value
                    setters[name] = state_setter(param_state, key)

    broadcast_parameters(tensors, root_rank)
    for name, value in broadcast_object(scalars, root_rank).items():
        setters[name](value)


def broadcast_object(obj, root_rank=0, name=None):
    """Returns root_rank's `obj` on every rank (pickled, sent, unpickled)."""
    if rank() == root_rank:
        payload = torch.frombuffer(bytearray(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)), dtype=torch.uint8)
        length = torch.tensor([payload.numel()], dtype=torch.int64)
    else:
        length = torch.zeros(1, dtype=torch.int64)
    broadcast_(length, root_rank, None if name is None else f"{name}.sz")
    if rank() != root_rank:
        payload = torch.empty(int(length.item()), dtype=torch.uint8)
    broadcast_(payload, root_rank, None if name is None else f"{name}.t")
    return obj if rank() == root_rank else pickle.loads(payload.numpy().tobytes())


def allgather_object(obj, name=None):
    """Returns the list of every rank's `obj`, in rank order."""
    payload = torch.frombuffer(bytearray(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)), dtype=torch.uint8)
    lengths = allgather(torch.tensor([payload.numel()], dtype=torch.int64),
                        name=None if name is None else f"{name}.sz").tolist()
    gathered = allgather(payload, name=None if name is None else f"{name}.t").numpy()
    offsets = [0]
    for length in lengths:
        offsets.append(offsets[-1] + length)
    return [pickle.loads(gathered[offsets[r]:offsets[r + 1]].tobytes()) for r in range(size())]
