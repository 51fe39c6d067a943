"""Horovod's DistributedOptimizer: gradients averaged over the ranks, overlapped with backward.

    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    loss.backward()     # each gradient's allreduce starts as soon as it is accumulated
    optimizer.step()    # waits for them (synchronize()), then the wrapped optimizer's step

Contract (Horovod's):
- The result is an instance of a subclass of the wrapped optimizer's class
  (isinstance(opt, torch.optim.SGD) holds) over the same param groups (the
  same dicts: an LR scheduler of the wrapped optimizer drives it) and state.
- A hook on each parameter's gradient accumulator submits its allreduce,
  named by the parameter's name, when the gradient of the
  backward_passes_per_step-th backward pass since the last step() has been
  accumulated (earlier passes only accumulate locally: the reduced gradient
  is the ranks' op of their sums). Parameters whose gradient the backward
  did not reach are reduced (as zeros where they have no .grad) at
  synchronize(), so every rank submits the same names.
- synchronize() waits for every reduction and puts the results in .grad;
  step() calls it unless inside skip_synchronize(); zero_grad() between
  backward() and step() is an error (it would race the reductions).
- gradient_predivide_factor f (op=Average only): gradients are scaled by 1/f
  before the sum and by f/size() after it.
- Hooks are registered only when there is more than one rank (or the job is
  elastic, whose world may grow): a single process steps as the wrapped
  optimizer does.
"""

import collections
import warnings
from contextlib import contextmanager

import torch

from cohort import _C
from cohort.torch.compression import Compression
from cohort.torch.mpi_ops import Adasum, Average, _reduce_op, allreduce_async_, size, synchronize


class _DistributedOptimizer(torch.optim.Optimizer):
    """The methods that DistributedOptimizer() adds to the wrapped optimizer's class."""

    def __init__(self, optimizer, named_parameters, compression, backward_passes_per_step, op,
                 gradient_predivide_factor):
        # The wrapped optimizer's groups, options and state are taken over, not
        # copied; its own attributes (those its step() reads) come along.
        torch.optim.Optimizer.__init__(self, optimizer.param_groups, optimizer.defaults)
        self.state.update(optimizer.state)
        for key, value in vars(optimizer).items():
            if key not in vars(self):
                setattr(self, key, value)

        self._compression = compression
        if named_parameters is not None:
            named_parameters = list(named_parameters)
        else:
            named_parameters = [(f"allreduce.noname.{i}.{j}", p) for i, group in enumerate(self.param_groups)
                                for j, p in enumerate(group["params"])]
        if any(not isinstance(np, tuple) for np in named_parameters):
            raise ValueError("named_parameters should be a sequence of tuples (name, parameter), usually "
                             "produced by model.named_parameters()")
        counts = collections.Counter(name for name, _ in named_parameters)
        duplicates = sorted(n for n, c in counts.items() if c > 1)
        if duplicates:
            raise ValueError("Parameter names in named_parameters must be unique. Found duplicates: "
                             + ", ".join(duplicates))
        named_ids = {id(p) for _, p in named_parameters}
        unnamed = [p for group in self.param_groups for p in group["params"] if id(p) not in named_ids]
        if unnamed:
            raise ValueError(f"named_parameters was specified, but {len(unnamed)} of the optimizer's parameters "
                             "are not named in it (shapes: "
                             + ", ".join(str(tuple(p.shape)) for p in unnamed)
                             + "); pass model.named_parameters() of the model the optimizer trains")

        self._parameter_names = {p: name for name, p in sorted(named_parameters, key=lambda np: np[0])}
        self.backward_passes_per_step = backward_passes_per_step
        self._allreduce_delay = {p: backward_passes_per_step for p in self._parameter_names}
        self.op = op
        self.gradient_predivide_factor = gradient_predivide_factor
        self._handles = {}  # parameter -> (handle or None, compression context)
        self._grad_accs = []
        self._requires_update = {}  # the parameters with hooks, in param-group order
        self._synchronized = False
        self._should_synchronize = True
        if size() > 1 or _C.elastic():
            self._register_hooks()

    def load_state_dict(self, *args, **kwargs):
        self._handles = {}
        self._synchronized = False
        self._should_synchronize = True
        for p in self._allreduce_delay:
            self._allreduce_delay[p] = self.backward_passes_per_step
        super().load_state_dict(*args, **kwargs)

    def set_backward_passes_per_step(self, passes):
        self.backward_passes_per_step = passes
        for p in self._allreduce_delay:
            self._allreduce_delay[p] = passes

    def _register_hooks(self):
        for group in self.param_groups:
            for p in group["params"]:
                if not p.requires_grad:
                    continue
                self._requires_update[p] = None
                if hasattr(p, "register_post_accumulate_grad_hook"):  # torch >= 2.1
                    self._grad_accs.append(p.register_post_accumulate_grad_hook(self._make_hook(p)))
                else:
                    # The gradient accumulator of p: its hook runs once the
                    # gradient is in p.grad. Kept alive here, as Horovod does.
                    grad_acc = p.expand_as(p).grad_fn.next_functions[0][0]
                    grad_acc.register_hook(self._make_hook(p))
                    self._grad_accs.append(grad_acc)

    def _allreduce_grad_async(self, p):
        if p.grad is None:
            # This rank's backward did not reach p; another rank's may have.
            p.grad = torch.zeros_like(p)
        compressed, ctx = self._compression.compress(p.grad)
        if self.op == Average:
            prescale, postscale = 1.0 / self.gradient_predivide_factor, self.gradient_predivide_factor
        else:
            prescale, postscale = 1.0, 1.0
        handle = allreduce_async_(compressed, name=self._parameter_names[p], op=self.op,
                                  prescale_factor=prescale, postscale_factor=postscale)
        return handle, ctx

    def _make_hook(self, p):
        def hook(*unused):
            if p in self._handles and self._handles[p][0] is not None and self._allreduce_delay[p] <= 0:
                raise AssertionError("Gradients were computed more than backward_passes_per_step times before "
                                     "call to step(). Increase backward_passes_per_step to accumulate "
                                     "gradients locally.")
            assert not p.grad.requires_grad
            assert self._allreduce_delay[p] > 0
            handle, ctx = None, None
            self._allreduce_delay[p] -= 1
            if self._allreduce_delay[p] == 0:
                handle, ctx = self._allreduce_grad_async(p)
            self._handles[p] = (handle, ctx)
        return hook

    def synchronize(self):
        """Waits for every gradient's reduction and puts the results in .grad."""
        for p in self._requires_update:
            if p not in self._handles:
                self._handles[p] = self._allreduce_grad_async(p)
        for p, (handle, ctx) in list(self._handles.items()):
            if handle is None:
                self._handles[p] = self._allreduce_grad_async(p)
        for p, (handle, ctx) in self._handles.items():
            output = synchronize(handle)
            self._allreduce_delay[p] = self.backward_passes_per_step
            reduced = self._compression.decompress(output, ctx)
            if reduced is not p.grad:
                p.grad.copy_(reduced)
        self._handles.clear()
        self._synchronized = True

    @contextmanager
    def skip_synchronize(self):
        """Inside, step() does not synchronize(): for code that called synchronize() itself.

            optimizer.synchronize()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            with optimizer.skip_synchronize():
                optimizer.step()
        """
        self._should_synchronize = False
        try:
            yield
        finally:
            self._should_synchronize = True

    def step(self, closure=None):
        if self._should_synchronize:
            if self._synchronized:
                warnings.warn("optimizer.step() called without optimizer.skip_synchronize() context after "
                              "optimizer.synchronize(). This can cause training slowdown. You may want to "
                              "consider using optimizer.skip_synchronize() context if you use "
                              "optimizer.synchronize() in your code.")
            self.synchronize()
        self._synchronized = False
        return super().step(closure)

    def zero_grad(self, *args, **kwargs):
        if self._handles:
            raise AssertionError("optimizer.zero_grad() was called after loss.backward() but before "
                                 "optimizer.step() or optimizer.synchronize(). This is prohibited as it can "
                                 "cause a race condition.")
        return super().zero_grad(*args, **kwargs)


def DistributedOptimizer(optimizer, named_parameters=None, compression=Compression.none,
                         backward_passes_per_step=1, op=Average, gradient_predivide_factor=1.0,
                         num_groups=0, groups=None, sparse_as_dense=False):
    """Wraps `optimizer` so that step() applies gradients averaged (op) over all ranks.

    See the module comment. named_parameters names each parameter's
    allreduce (model.named_parameters(); without it, names by position,
    which must then be the same on every rank). compression:
    hvd.Compression.none, .fp16 or .bf16. op: hvd.Average (default) or
    hvd.Sum (Min, Max, Product are accepted too). Horovod's num_groups and
    groups are accepted as hints (cohort's engine fuses ready gradients
    itself); sparse_as_dense is accepted because cohort's gradients are
    dense (a sparse gradient is refused at its allreduce).
    """
    if op is Adasum:
        raise NotImplementedError("hvd.DistributedOptimizer(op=hvd.Adasum): cohort has no Adasum reduction; "
                                  "use op=hvd.Average (the default) and scale the learning rate by hvd.size()")
    op = _reduce_op(op)
    if gradient_predivide_factor != 1.0 and op != Average:
        raise ValueError("gradient_predivide_factor not supported with op != Average")
    if backward_passes_per_step <= 0:
        raise ValueError("backward_passes_per_step must be > 0")
    if isinstance(optimizer, _DistributedOptimizer):
        raise ValueError("hvd.DistributedOptimizer: the optimizer is already a DistributedOptimizer")
    cls = type(optimizer.__class__.__name__, (_DistributedOptimizer, optimizer.__class__), {})
    return cls(optimizer, named_parameters, compression, backward_passes_per_step, op, gradient_predivide_factor)
