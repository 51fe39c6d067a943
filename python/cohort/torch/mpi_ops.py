"""Horovod's runtime and collectives (horovod.torch.mpi_ops) on cohort's engine.

Contract (Horovod's, on cohort._C):
- init() discovers the job from cohortrun, torchrun or mpirun variables (one
  process when none is set) and is idempotent; shutdown() ends it.
- Every collective has a blocking form (an autograd function, so gradients
  flow through it as Horovod defines them) and an *_async form returning an
  integer handle for poll() and synchronize(). The in-place forms (trailing
  underscore) write the result into their argument.
- name=None submits an ordered op: every rank must issue its unnamed ops in
  the same order. A name matches the op across ranks in any order; it may not
  be used again on this rank while its op is in flight (ValueError, as
  Horovod). Names are kept apart per kind of collective, as in Horovod:
  allreduce(name="x") and broadcast(name="x") are different ops.
- Tensors are CPU and dense. Reductions take float32, float64, float16,
  bfloat16, int32, int64, uint8 and int8; allgather, broadcast and alltoall
  also move int16 and bool (as bits). Anything else raises cohort's
  ConfigError at submission.
- A collective that a lost rank can never complete raises HorovodInternalError
  (which is also cohort's PeerLostError): hvd.elastic.run recovers from it.
  Other failures (ranks that disagree on an op: MismatchError) raise cohort's
  error unchanged; both are RuntimeErrors, as Horovod's are.
- join(): cohort's engine divides an Average by the ranks that submitted the
  op, where Horovod divides by size(): after a rank joined, the others'
  averages are over the ranks still working.
"""

import contextlib
import itertools
import threading
import warnings

import torch

from cohort import _C
from cohort.torch.compression import Compression

# ---- reduction ops -------------------------------------------------------------

Average = _C.ReduceOp.AVG
Sum = _C.ReduceOp.SUM
Min = _C.ReduceOp.MIN
Max = _C.ReduceOp.MAX
Product = _C.ReduceOp.PRODUCT


class _AdasumOp:
    """Horovod's Adasum: named so that code that mentions it imports, refused when used."""

    def __repr__(self):
        return "Adasum"


Adasum = _AdasumOp()
_REDUCE_OPS = (Average, Sum, Min, Max, Product)


def _reduce_op(op, average=None):
    """The op of a reduction from Horovod's op= and its deprecated average= arguments."""
    if op is not None and average is not None:
        raise ValueError("The op parameter supersedes average. Please provide only one of them.")
    if average is not None:
        warnings.warn("Parameter `average` has been replaced with `op` and will be removed; "
                      "use op=hvd.Average or op=hvd.Sum", DeprecationWarning, stacklevel=3)
        op = Average if average else Sum
    if op is None:
        op = Average
    if op is Adasum:
        raise NotImplementedError("op=hvd.Adasum: cohort has no Adasum reduction; use op=hvd.Average "
                                  "(the default) and scale the learning rate by hvd.size()")
    if op not in _REDUCE_OPS:
        raise ValueError(f"op={op!r} is not a reduction; use hvd.Average, hvd.Sum, hvd.Min, hvd.Max "
                         "or hvd.Product")
    return op


# ---- errors --------------------------------------------------------------------


class HorovodInternalError(RuntimeError):
    """A collective failed because a rank was lost (Horovod's name).

    In an elastic job (hvd.elastic.run) it is recovered from: the state is
    restored to its last commit and training goes on in the next world.
    What this module raises is also a cohort.PeerLostError.
    """


class _PeerLost(HorovodInternalError, _C.PeerLostError):
    pass


@contextlib.contextmanager
def _peer_loss_as_internal_error():
    """Raises a PeerLostError of cohort._C as HorovodInternalError (see the module contract)."""
    try:
        yield
    except HorovodInternalError:
        raise
    except _C.PeerLostError as e:
        error = _PeerLost(*e.args)
        for attr in ("rank", "host"):  # the lost rank, as cohort's PeerLostError names it
            if hasattr(e, attr):
                setattr(error, attr, getattr(e, attr))
        raise error from e


# ---- runtime -------------------------------------------------------------------

# What this module keeps per world: handles not yet synchronized, names in
# flight, and the cross communicator's coordinates (a world of the next
# membership epoch starts afresh: _reset_world()).
_lock = threading.Lock()  # hooks may submit from autograd's threads
_handle_map = {}
_names_in_flight = {}
_handle_ids = itertools.count(1)
_cross = None  # (cross_rank, cross_size)


def _reset_world():
    """Forgets the ops of the world that ended and learns the new one's layout (collective)."""
    global _cross
    with _lock:
        _handle_map.clear()
        _names_in_flight.clear()
    _cross = None
    if _C.initialized():
        # Horovod's cross communicator holds the ranks of one local_rank, one
        # per host; its size and this rank's place in it come from every
        # rank's local_rank. One tiny collective, here, where every rank is.
        local_ranks = synchronize(allgather_async(torch.tensor([_C.local_rank()], dtype=torch.int64)))
        mine = [r for r, lr in enumerate(local_ranks.tolist()) if lr == _C.local_rank()]
        _cross = (mine.index(_C.rank()), len(mine))


def init(comm=None, process_sets=None):
    """Starts cohort's runtime on the job's processes (Horovod's hvd.init()).

    Idempotent. The job comes from the launcher's variables (cohortrun,
    torchrun, mpirun, srun), so Horovod's comm= and process_sets= are refused.
    """
    if comm is not None:
        raise ValueError("hvd.init(comm=...): cohort takes the job from its launcher's variables "
                         "(cohortrun, torchrun, mpirun); call hvd.init() without comm")
    if process_sets is not None:
        raise ValueError("hvd.init(process_sets=...): cohort.torch has no process sets; "
                         "every collective runs over all ranks")
    if not _C.initialized():
        _C.init()
        _reset_world()
        # As Horovod, the world ends with the interpreter: `import cohort`
        # registered that with atexit.


def shutdown():
    """Ends the runtime (collective); a later init() starts it again."""
    with _lock:
        _handle_map.clear()
        _names_in_flight.clear()
    global _cross
    _cross = None
    _C.shutdown()


def is_initialized():
    return _C.initialized()


def _require_init():
    if not _C.initialized():
        raise ValueError("cohort.torch has not been initialized; call hvd.init() first")


def rank():
    _require_init()
    return _C.rank()


def size():
    _require_init()
    return _C.size()


def local_rank():
    _require_init()
    return _C.local_rank()


def local_size():
    _require_init()
    return _C.local_size()


def cross_rank():
    """This rank's place among the ranks of its local_rank, one per host."""
    _require_init()
    return _cross[0]


def cross_size():
    """The number of hosts that run a rank of this rank's local_rank."""
    _require_init()
    return _cross[1]


def is_homogeneous():
    """Whether every host runs the same number of ranks."""
    return local_size() * cross_size() == size()


# cohort's Python API runs on CPU tensors only: these are true statements,
# which Horovod programs ask before choosing a device or an algorithm.
def nccl_built():
    return False


def cuda_built():
    return False


def rocm_built():
    return False


def ddl_built():
    return False


def ccl_built():
    return False


# ---- handles -------------------------------------------------------------------


class _Op:
    """An op in flight: the engine's handles and how their outputs become the result."""

    __slots__ = ("handles", "finish", "names")

    def __init__(self, handles, finish, names):
        self.handles = handles
        self.finish = finish
        self.names = names


def _submit(names, submit, finish):
    """Runs submit() (which returns the engine's handles) and returns an integer handle.

    `names` are the engine's names that submit() uses (empty for ordered ops).
    """
    with _lock:
        for name in names:
            previous = _names_in_flight.get(name)
            if previous is not None and not previous.poll():
                raise ValueError(f"name '{name}' is used by an op still in flight on this rank; names of "
                                 "concurrent ops must differ (synchronize() the first one)")
        with _peer_loss_as_internal_error():
            handles = submit()
        for name, handle in zip(names, handles):
            _names_in_flight[name] = handle
        handle_id = next(_handle_ids)
        _handle_map[handle_id] = _Op(handles, finish, names)
        return handle_id


def poll(handle):
    """Whether the op of `handle` has completed (synchronize() then returns at once)."""
    with _lock:
        op = _handle_map.get(handle)
    if op is None:
        raise ValueError(f"hvd.poll(): unknown handle {handle!r} (already synchronized, or not from "
                         "an *_async call of this world)")
    return all(h.poll() for h in op.handles)


def synchronize(handle):
    """Waits for the op of `handle` and returns its result (None for an unknown handle, as Horovod)."""
    with _lock:
        op = _handle_map.pop(handle, None)
    if op is None:
        return None
    try:
        with _peer_loss_as_internal_error():
            outputs = [h.wait() for h in op.handles]
    finally:
        with _lock:
            for name, h in zip(op.names, op.handles):
                if _names_in_flight.get(name) is h:
                    del _names_in_flight[name]
    return op.finish(outputs)


def _engine_name(kind, name):
    return "" if name is None else f"{kind}.{name}"


def _names(*engine_names):
    return [n for n in engine_names if n]


# The engine moves these dtypes' bits as a supported dtype of the same width.
_MOVED_AS = {torch.int16: torch.float16, torch.bool: torch.uint8}


def _as_movable(tensor):
    moved_as = _MOVED_AS.get(tensor.dtype)
    return (tensor, None) if moved_as is None else (tensor.view(moved_as), tensor.dtype)


def _from_movable(tensor, dtype):
    return tensor if dtype is None else tensor.view(dtype)


def _writable(tensor):
    # The engine writes in-place results into the tensor's memory: a
    # parameter (a leaf that requires grad) is written like its .data.
    return tensor.detach()


# ---- allreduce -----------------------------------------------------------------


def _host_scaling(tensor, prescale_factor, postscale_factor):
    """How a reduction of `tensor` applies its factors: (tensor to submit, the engine's factors, post).

    cohort's engine scales floating dtypes; integers are scaled here as
    Horovod scales them: in float64, truncated back to the dtype, each
    rank's tensor before the reduction and the result after it. post is
    None when there is nothing to do after the reduction's result.
    """
    prescale_factor, postscale_factor = float(prescale_factor), float(postscale_factor)
    if tensor.dtype.is_floating_point or (prescale_factor == 1.0 and postscale_factor == 1.0):
        return tensor, prescale_factor, postscale_factor, None
    if prescale_factor != 1.0:
        tensor = (tensor.double() * prescale_factor).to(tensor.dtype)
    post = None if postscale_factor == 1.0 else (lambda out: (out.double() * postscale_factor).to(out.dtype))
    return tensor, 1.0, 1.0, post


def _allreduce_part(tensor, inplace, engine_name, op, prescale_factor, postscale_factor):
    """One tensor's allreduce: (submit() -> the engine's handle, finish(engine's output) -> the result)."""
    source, prescale, postscale, post = _host_scaling(tensor, prescale_factor, postscale_factor)

    def submit():
        return _C.allreduce_async(_writable(source) if inplace else source, name=engine_name, op=op,
                                  prescale=prescale, postscale=postscale, inplace=inplace)

    def finish(output):
        result = output if post is None else post(output)
        if not inplace:
            return result
        if source is not tensor or post is not None:
            _writable(tensor).copy_(result)
        return tensor

    return submit, finish


def _allreduce_async(tensor, output, name, op, prescale_factor, postscale_factor):
    engine_name = _engine_name("allreduce", name)
    submit, finish = _allreduce_part(tensor, output is not None, engine_name, op, prescale_factor, postscale_factor)
    return _submit(_names(engine_name), lambda: [submit()], lambda outputs: finish(outputs[0]))


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0):
    """Starts reducing `tensor` over all ranks (op, default Average); returns a handle.

    `tensor` is not modified. prescale_factor multiplies each rank's tensor
    before the reduction, postscale_factor the result.
    """
    op = _reduce_op(op, average)
    return _allreduce_async(tensor, None, name, op, prescale_factor, postscale_factor)


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0):
    """As allreduce_async(), writing the result into `tensor`."""
    op = _reduce_op(op, average)
    return _allreduce_async(tensor, tensor, name, op, prescale_factor, postscale_factor)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0):
    """Reduces `tensor` over all ranks in place; returns it."""
    return synchronize(allreduce_async_(tensor, average, name, op, prescale_factor, postscale_factor))


def _check_reduction_has_grad(op):
    # Horovod's gradient of a reduction is the same reduction of the ranks'
    # output gradients: right for Average and Sum, not for the others.
    if op not in (Average, Sum):
        raise RuntimeError(f"hvd.allreduce with op={op} has no gradient; only hvd.Average and hvd.Sum have one")


class _Allreduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, op, prescale_factor, postscale_factor):
        ctx.op, ctx.prescale_factor, ctx.postscale_factor = op, prescale_factor, postscale_factor
        return synchronize(_allreduce_async(tensor, None, name, op, prescale_factor, postscale_factor))

    @staticmethod
    def backward(ctx, grad_output):
        _check_reduction_has_grad(ctx.op)
        grad = synchronize(_allreduce_async(grad_output.contiguous(), None, None, ctx.op, ctx.prescale_factor,
                                            ctx.postscale_factor))
        return grad, None, None, None, None


def allreduce(tensor, average=None, name=None, compression=Compression.none, op=None, prescale_factor=1.0,
              postscale_factor=1.0):
    """Returns `tensor` reduced over all ranks (op, default Average); differentiable.

    compression (hvd.Compression.fp16) reduces a 16-bit copy of a floating
    point tensor and returns the result in the tensor's dtype.
    """
    op = _reduce_op(op, average)
    compressed, ctx = compression.compress(tensor)
    reduced = _Allreduce.apply(compressed, name, op, prescale_factor, postscale_factor)
    return compression.decompress(reduced, ctx)


# ---- grouped allreduce ---------------------------------------------------------


def _grouped_allreduce_async(tensors, outputs, name, op, prescale_factor, postscale_factor):
    tensors = list(tensors)
    if not tensors:
        raise ValueError("hvd.grouped_allreduce: the list of tensors is empty")
    engine_names = [_engine_name("allreduce", None if name is None else f"{name}.{i}") for i in range(len(tensors))]
    parts = [_allreduce_part(t, outputs is not None, n, op, prescale_factor, postscale_factor)
             for t, n in zip(tensors, engine_names)]
    return _submit(_names(*engine_names), lambda: [submit() for submit, _ in parts],
                   lambda results: [finish(r) for (_, finish), r in zip(parts, results)])


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                            postscale_factor=1.0):
    """Starts reducing each tensor of a list (as allreduce_async); synchronize() returns the list."""
    op = _reduce_op(op, average)
    return _grouped_allreduce_async(tensors, None, name, op, prescale_factor, postscale_factor)


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                             postscale_factor=1.0):
    op = _reduce_op(op, average)
    tensors = list(tensors)
    return _grouped_allreduce_async(tensors, tensors, name, op, prescale_factor, postscale_factor)


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0):
    return synchronize(grouped_allreduce_async_(tensors, average, name, op, prescale_factor, postscale_factor))


class _GroupedAllreduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, op, prescale_factor, postscale_factor, *tensors):
        ctx.op, ctx.prescale_factor, ctx.postscale_factor = op, prescale_factor, postscale_factor
        return tuple(synchronize(_grouped_allreduce_async(tensors, None, name, op, prescale_factor,
                                                          postscale_factor)))

    @staticmethod
    def backward(ctx, *grad_outputs):
        _check_reduction_has_grad(ctx.op)
        grads = synchronize(_grouped_allreduce_async([g.contiguous() for g in grad_outputs], None, None, ctx.op,
                                                     ctx.prescale_factor, ctx.postscale_factor))
        return (None, None, None, None, *grads)


def grouped_allreduce(tensors, average=None, name=None, compression=Compression.none, op=None,
                      prescale_factor=1.0, postscale_factor=1.0):
    """Returns each tensor of a list reduced over all ranks; differentiable, as allreduce()."""
    op = _reduce_op(op, average)
    compressed = [compression.compress(t) for t in tensors]
    reduced = _GroupedAllreduce.apply(name, op, prescale_factor, postscale_factor, *[c for c, _ in compressed])
    return [compression.decompress(r, ctx) for r, (_, ctx) in zip(reduced, compressed)]


# ---- allgather -----------------------------------------------------------------


def allgather_async(tensor, name=None):
    """Starts concatenating every rank's `tensor` along dim 0 (ranks may differ in dim 0)."""
    engine_name = _engine_name("allgather", name)
    movable, dtype = _as_movable(tensor)
    return _submit(_names(engine_name), lambda: [_C.allgather_async(movable, name=engine_name)],
                   lambda outputs: _from_movable(outputs[0], dtype))


class _Allgather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name):
        ctx.dim0 = tensor.shape[0] if tensor.dim() > 0 else 1
        return synchronize(allgather_async(tensor, name))

    @staticmethod
    def backward(ctx, grad_output):
        # Horovod's gradient: the ranks' output gradients averaged, and this
        # rank's rows of the result.
        grad = synchronize(_allreduce_async(grad_output.contiguous(), None, None, Average, 1.0, 1.0))
        dims = synchronize(allgather_async(torch.tensor([ctx.dim0], dtype=torch.int64))).tolist()
        offset = sum(dims[:_C.rank()])
        return grad.narrow(0, offset, ctx.dim0), None


def allgather(tensor, name=None):
    """Returns every rank's `tensor` concatenated along dim 0, in rank order; differentiable."""
    return _Allgather.apply(tensor, name)


# ---- broadcast -----------------------------------------------------------------


def _broadcast_async(tensor, root_rank, name, inplace):
    engine_name = _engine_name("broadcast", name)
    movable, dtype = _as_movable(_writable(tensor) if inplace else tensor)

    def submit():
        return [_C.broadcast_async(movable, int(root_rank), name=engine_name, inplace=inplace)]

    def finish(outputs):
        return tensor if inplace else _from_movable(outputs[0], dtype)

    return _submit(_names(engine_name), submit, finish)


def broadcast_async(tensor, root_rank, name=None):
    """Starts sending root_rank's `tensor` to every rank; `tensor` is not modified."""
    return _broadcast_async(tensor, root_rank, name, inplace=False)


def broadcast_async_(tensor, root_rank, name=None):
    """As broadcast_async(), writing root_rank's values into `tensor`."""
    return _broadcast_async(tensor, root_rank, name, inplace=True)


def broadcast_(tensor, root_rank, name=None):
    """Writes root_rank's `tensor` into every rank's `tensor`; returns it."""
    return synchronize(broadcast_async_(tensor, root_rank, name))


class _Broadcast(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, root_rank, name):
        ctx.root_rank = root_rank
        return synchronize(broadcast_async(tensor, root_rank, name))

    @staticmethod
    def backward(ctx, grad_output):
        # Horovod's gradient: the ranks' output gradients averaged, on the root only.
        grad = synchronize(_allreduce_async(grad_output.contiguous(), None, None, Average, 1.0, 1.0))
        if _C.rank() != ctx.root_rank:
            grad = grad * 0
        return grad, None, None


def broadcast(tensor, root_rank, name=None):
    """Returns root_rank's `tensor` on every rank; differentiable."""
    return _Broadcast.apply(tensor, root_rank, name)


# ---- alltoall ------------------------------------------------------------------


def _splits_list(splits):
    if splits is None:
        return []
    if isinstance(splits, torch.Tensor):
        if splits.dtype.is_floating_point or splits.dim() != 1:
            raise ValueError("hvd.alltoall: splits must be a 1-D integer tensor or a list of ints, "
                             f"one per rank (got a {splits.dim()}-D {splits.dtype} tensor)")
        return [int(s) for s in splits.tolist()]
    return [int(s) for s in splits]


def alltoall_async(tensor, splits=None, name=None):
    """Starts sending splits[r] rows (dim 0) of `tensor` to each rank r, in order.

    splits=None sends equal parts. synchronize() returns the received rows
    concatenated in rank order and, with splits given, the int32 tensor of
    how many rows came from each rank.
    """
    engine_name = _engine_name("alltoall", name)
    movable, dtype = _as_movable(tensor)
    split_list = _splits_list(splits)
    handles = []

    def submit():
        handles.append(_C.alltoall_async(movable, splits=split_list, name=engine_name))
        return handles

    def finish(outputs):
        received = _from_movable(outputs[0], dtype)
        if splits is None:
            return received
        return received, torch.tensor(handles[0].received_splits(), dtype=torch.int32)

    return _submit(_names(engine_name), submit, finish)


class _Alltoall(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, splits, name):
        received, received_splits = synchronize(alltoall_async(tensor, splits if splits is not None else [],
                                                               name))
        ctx.received_splits = received_splits
        ctx.mark_non_differentiable(received_splits)
        return received, received_splits

    @staticmethod
    def backward(ctx, grad_output, grad_splits):
        # The rows' gradients go back to where the rows came from.
        grad, _ = synchronize(alltoall_async(grad_output.contiguous(), ctx.received_splits))
        return grad, None, None


def alltoall(tensor, splits=None, name=None):
    """Returns the rows every rank sent this one (see alltoall_async); differentiable.

    With splits given, returns (received, received_splits), as Horovod.
    """
    received, received_splits = _Alltoall.apply(tensor, splits, name)
    return received if splits is None else (received, received_splits)


# ---- reducescatter -------------------------------------------------------------


def _reducescatter_op(op):
    op = _reduce_op(op)
    if op not in (Average, Sum):
        raise ValueError(f"hvd.reducescatter: op={op} is not supported; use hvd.Average or hvd.Sum (as Horovod)")
    return op


def reducescatter_async(tensor, name=None, op=Average, prescale_factor=1.0, postscale_factor=1.0):
    """Starts reducing `tensor` over all ranks and scattering its dim-0 rows.

    Rank r gets rows [r*n/size, (r+1)*n/size) of the reduction, the first
    n % size ranks one row more.
    """
    op = _reducescatter_op(op)
    if tensor.dim() == 0:
        raise ValueError("hvd.reducescatter: the tensor is a scalar; it needs a dimension 0 to scatter")
    engine_name = _engine_name("reducescatter", name)
    source, prescale, postscale, post = _host_scaling(tensor, prescale_factor, postscale_factor)
    return _submit(_names(engine_name),
                   lambda: [_C.reducescatter_async(source, name=engine_name, op=op, prescale=prescale,
                                                   postscale=postscale)],
                   lambda outputs: outputs[0] if post is None else post(outputs[0]))


class _Reducescatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, op, prescale_factor, postscale_factor):
        ctx.op, ctx.prescale_factor, ctx.postscale_factor = op, prescale_factor, postscale_factor
        return synchronize(reducescatter_async(tensor, name, op, prescale_factor, postscale_factor))

    @staticmethod
    def backward(ctx, grad_output):
        # Horovod's gradient: the ranks' output gradients gathered, scaled by
        # size() for Sum and by the factors.
        scale = ctx.prescale_factor * ctx.postscale_factor * (_C.size() if ctx.op == Sum else 1)
        grad = grad_output * scale if scale != 1 else grad_output
        return synchronize(allgather_async(grad.contiguous())), None, None, None, None


def reducescatter(tensor, name=None, compression=Compression.none, op=Average, prescale_factor=1.0,
                  postscale_factor=1.0):
    """Returns this rank's rows of `tensor` reduced over all ranks; differentiable."""
    op = _reducescatter_op(op)
    compressed, ctx = compression.compress(tensor)
    reduced = _Reducescatter.apply(compressed, name, op, prescale_factor, postscale_factor)
    return compression.decompress(reduced, ctx)


# ---- join and barrier ----------------------------------------------------------


def join(device=-1):
    """This rank has no more work: it serves the others' collectives until every rank joined.

    Returns the rank that joined last (the same on every rank). device is
    Horovod's GPU argument; cohort's tensors are CPU.
    """
    _require_init()
    with _peer_loss_as_internal_error():
        return _C.join()


def barrier():
    """Returns when every rank has called barrier()."""
    _require_init()
    with _peer_loss_as_internal_error():
        _C.barrier()
