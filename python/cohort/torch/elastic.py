"""hvd.elastic: training that goes on when ranks are lost or added (cohortrun --min-np).

    state = hvd.elastic.TorchState(model, optimizer, epoch=0, batch=0)

    @hvd.elastic.run
    def train(state):
        for state.epoch in range(state.epoch, epochs):
            ...one step...
            state.commit()

    train(state)

Contract (Horovod's, on cohort's membership epochs):
- run(func) calls state.sync() and then func(state). When a rank is lost, a
  collective raises HorovodInternalError on the survivors: each restores the
  state of its last commit, the world of the next membership epoch is formed
  (cohort._C.reform(), which the launcher's replacement joins), and sync()
  and func run again. When the launcher admits a rank, the next commit()
  raises HostsUpdatedInterrupt on every rank at once: the world is formed
  again with the newcomer and sync() hands it the state, nothing is rolled
  back. A rank that the new membership leaves out exits (status 0); the
  launcher ending the job raises cohort's MembershipEnded.
- commit() copies the state into this process's memory and then agrees with
  the other ranks whether the membership changed (one tiny collective; none
  outside an elastic job). The commit counts: sync() gives every rank the
  state of the rank with the most commits (the lowest such rank), so that a
  commit that one survivor made and another did not reach is neither lost
  nor applied twice; a newcomer holds none.
- Outside an elastic job run() is sync() then func(), and errors propagate.
- Collectives must not run between hvd.init() and run(): a newcomer runs
  its program from the start while the others are inside run().
"""

import copy
import functools
import math
import random

import torch

from cohort import _C
from cohort.torch import mpi_ops
from cohort.torch.functions import broadcast_object, broadcast_optimizer_state, broadcast_parameters
from cohort.torch.mpi_ops import HorovodInternalError, allgather, allreduce, rank, size


class HostsUpdatedInterrupt(RuntimeError):
    """The launcher changed the membership (raised by commit() on every rank at once).

    skip_sync: whether the state need not be synchronized after the reset
    (never, here: a changed membership brings a newcomer that needs it).
    """

    def __init__(self, skip_sync=False):
        super().__init__("the job's membership changed")
        self.skip_sync = skip_sync


class State:
    """What every rank keeps in memory to go on after a membership change (Horovod's State).

    Subclasses provide save(), restore() and _sync_from(root).
    """

    def __init__(self):
        self._commits = 0
        self._reset_callbacks = []

    def register_reset_callbacks(self, callbacks):
        """Functions called after each membership change, before sync() (e.g. to rescale the learning rate)."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self):
        self.reset()
        for callback in self._reset_callbacks:
            callback()

    def commit(self):
        """Saves the state in memory, then raises HostsUpdatedInterrupt if the membership changed."""
        self.save()
        self._commits += 1
        self.check_host_updates()

    def check_host_updates(self):
        """Raises HostsUpdatedInterrupt on every rank when the launcher published a new membership."""
        if not _C.elastic():
            return
        # Ranks may read the launcher's news a moment apart: take it if any did.
        changed = allreduce(torch.tensor([int(_C.membership_changed())], dtype=torch.int32), op=mpi_ops.Max)
        if changed.item():
            raise HostsUpdatedInterrupt(skip_sync=False)

    def sync(self):
        """Gives every rank the state of the one with the most commits (collective)."""
        commits = -1 if _C.elastic() and _C.elastic_joining() else self._commits
        all_commits = allgather(torch.tensor([commits], dtype=torch.int64)).tolist()
        root = all_commits.index(max(all_commits))
        self._sync_from(root)
        self._commits = max(all_commits)
        # What a restore goes back to is the state every rank now holds.
        self.save()
        if _C.elastic() and _C.elastic_joining():
            _C.finish_joining()

    def save(self):
        raise NotImplementedError

    def restore(self):
        raise NotImplementedError

    def _sync_from(self, root):
        raise NotImplementedError

    def reset(self):
        """Called after a membership change, before sync(); for subclasses."""


class ObjectState(State):
    """State of plain Python values, given as keyword arguments and kept as attributes."""

    def __init__(self, **kwargs):
        self._saved_state = kwargs
        self._set_attrs()
        super().__init__()

    def save(self):
        self._saved_state = {key: copy.deepcopy(getattr(self, key)) for key in self._saved_state}

    def restore(self):
        self._set_attrs()

    def _sync_from(self, root):
        if self._saved_state:
            self._saved_state = broadcast_object(self._saved_state, root)
            self._set_attrs()

    def _set_attrs(self):
        for key, value in self._saved_state.items():
            setattr(self, key, copy.deepcopy(value))


class _ModelHandler:
    def __init__(self, model):
        self.value = model
        self.save()

    def save(self):
        self._saved = copy.deepcopy(self.value.state_dict())

    def restore(self):
        self.value.load_state_dict(self._saved)

    def sync(self, root):
        broadcast_parameters(self.value.state_dict(), root_rank=root)


class _OptimizerHandler(_ModelHandler):
    def sync(self, root):
        broadcast_optimizer_state(self.value, root_rank=root)


class _SamplerHandler(_ModelHandler):
    def sync(self, root):
        self.value.load_state_dict(broadcast_object(self.value.state_dict(), root))


class TorchState(ObjectState):
    """State of a PyTorch training: models, optimizers, ElasticSamplers and plain values.

    Every keyword argument becomes an attribute; models (torch.nn.Module),
    optimizers and ElasticSamplers are saved through their state_dict(), the
    rest as Python values.
    """

    def __init__(self, model=None, optimizer=None, **kwargs):
        kwargs.update(model=model, optimizer=optimizer)
        handlers, values = {}, {}
        for key, value in kwargs.items():
            handler = _handler_for(value)
            if handler is None:
                values[key] = value
            else:
                handlers[key] = handler
                object.__setattr__(self, key, value)
        object.__setattr__(self, "_handlers", handlers)
        super().__init__(**values)

    def __setattr__(self, key, value):
        handlers = self.__dict__.get("_handlers", {})
        if key in handlers:  # a new model or optimizer object: track it from now on
            handlers[key] = _handler_for(value)
        super().__setattr__(key, value)

    def save(self):
        for handler in self._handlers.values():
            handler.save()
        super().save()

    def restore(self):
        for handler in self._handlers.values():
            handler.restore()
        super().restore()

    def _sync_from(self, root):
        # Optimizers first: a newcomer's optimizer gets its state from a local
        # step on zero gradients, which may move the parameters (weight
        # decay) before the models' broadcast puts the root's there.
        ordered = sorted(self._handlers.values(), key=lambda h: not isinstance(h, _OptimizerHandler))
        for handler in ordered:
            handler.sync(root)
        super()._sync_from(root)


class ElasticSampler(torch.utils.data.Sampler):
    """Partitions a data set over the ranks and, after a membership change, the rest of the epoch.

    Keep it in the TorchState, call record_batch(batch_idx, batch_size) after
    each step and set_epoch(epoch) when an epoch ends (clearing the record).
    The order is a permutation seeded by seed + epoch (shuffle=True), the
    same on every rank; indices are padded by repetition to a multiple of
    size(), as DistributedSampler does.
    """

    def __init__(self, dataset, shuffle=True, seed=0):
        self.dataset = dataset
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0
        self.processed_num = 0
        self.reset()

    def set_epoch(self, epoch):
        self.epoch = epoch
        self.processed_num = 0
        self.reset()

    def record_batch(self, batch_idx, batch_size):
        """Records that a batch of batch_size per rank was processed by every rank."""
        self.processed_num += batch_size * self.num_replicas

    def state_dict(self):
        return dict(epoch=self.epoch, processed_num=self.processed_num)

    def load_state_dict(self, state_dict):
        self.epoch = state_dict["epoch"]
        self.processed_num = state_dict["processed_num"]
        self.reset()

    def reset(self):
        """Partitions what remains of the epoch over the current ranks."""
        self.num_replicas = size()
        self.rank = rank()
        order = list(range(len(self.dataset)))
        if self.shuffle:
            random.Random(self.seed + self.epoch).shuffle(order)
        self.remaining_indices = order[self.processed_num:]
        self.num_samples = int(math.ceil(len(self.remaining_indices) / self.num_replicas))
        self.total_size = self.num_samples * self.num_replicas

    def __iter__(self):
        indices = self.remaining_indices[:]
        indices += indices[:self.total_size - len(indices)]
        return iter(indices[self.rank:self.total_size:self.num_replicas])

    def __len__(self):
        return self.num_samples


def _handler_for(value):
    if isinstance(value, torch.nn.Module):
        return _ModelHandler(value)
    if isinstance(value, torch.optim.Optimizer):
        return _OptimizerHandler(value)
    if isinstance(value, ElasticSampler):
        return _SamplerHandler(value)
    return None


def _reset():
    """Forms the next membership epoch's world (blocks until the launcher published it)."""
    with mpi_ops._peer_loss_as_internal_error():
        _C.reform()
    mpi_ops._reset_world()


def run(func):
    """Decorator: runs func(state, ...) through membership changes (see the module comment)."""

    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        skip_sync = False
        reset = False
        while True:
            try:
                if reset:
                    # A rank lost while the new world forms is recovered
                    # from as one lost in func.
                    _reset()
                    state.on_reset()
                if not skip_sync:
                    state.sync()
                return func(state, *args, **kwargs)
            except HorovodInternalError:
                if not _C.elastic():
                    raise
                state.restore()
                skip_sync = False
            except HostsUpdatedInterrupt as e:
                skip_sync = e.skip_sync
            except _C.ElasticLeave:
                raise SystemExit(0)
            reset = True

    return wrapper


__all__ = ["ElasticSampler", "HorovodInternalError", "HostsUpdatedInterrupt", "ObjectState", "State",
           "TorchState", "run"]
