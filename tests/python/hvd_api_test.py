"""Horovod's PyTorch API on cohort (import cohort.torch as hvd): the semantics of
Horovod's own test/parallel/test_torch.py cases, with closed-form expected
values. Every rank runs every case in the same order:

    cohortrun -np 3 python3 tests/python/hvd_api_test.py [--only SUBSTRING] [--keep-going]

Exits non-zero on the first failure (cohortrun then stops the other ranks),
naming the case and the rank; --keep-going runs the other cases (only when
the failure left the ranks in step).
"""

import argparse
import contextlib
import itertools
import math
import os
import shutil
import sys
import tempfile
import time
import traceback
import warnings

import torch
import torch.nn.functional as F

import cohort
import cohort.torch as hvd

# Every reduction dtype of cohort._C, and the ranges in which size * (size + 1) / 2
# times a value stays exact in it at 3 ranks (bfloat16 holds the integers to
# 256 exactly, int8 to 127).
REDUCE_DTYPES = {
    torch.float32: 100, torch.float64: 100, torch.float16: 100, torch.bfloat16: 20,
    torch.int32: 100, torch.int64: 100, torch.int8: 20, torch.uint8: 20,
}
FLOAT_DTYPES = [torch.float32, torch.float64]
MOVE_DTYPES = list(REDUCE_DTYPES) + [torch.int16, torch.bool]

CASES = []
RANK, SIZE = os.environ.get("COHORT_RANK", "0"), os.environ.get("COHORT_SIZE", "1")


def case(fn):
    CASES.append(fn)
    return fn


def check(cond, message):
    if not cond:
        raise AssertionError(message)


def check_equal(actual, expected, what):
    check(actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype}, expected {expected.dtype}")
    check(actual.shape == expected.shape, f"{what}: shape {tuple(actual.shape)}, expected {tuple(expected.shape)}")
    if not torch.equal(actual, expected):
        diff = (actual.double() - expected.double()).abs()
        raise AssertionError(f"{what}: differs from the expected values in {int((diff > 0).sum())} of "
                             f"{actual.numel()} elements (max |diff| {diff.max().item():g}); first values "
                             f"{actual.flatten()[:5].tolist()} vs {expected.flatten()[:5].tolist()}")


def check_close(actual, expected, what, rtol, atol=0.0):
    check(actual.shape == expected.shape, f"{what}: shape {tuple(actual.shape)}, expected {tuple(expected.shape)}")
    if not torch.allclose(actual.double(), expected.double(), rtol=rtol, atol=atol):
        diff = (actual.double() - expected.double()).abs().max().item()
        raise AssertionError(f"{what}: max |diff| {diff:g} beyond rtol {rtol:g} atol {atol:g}")


def check_raises(exceptions, fn, what):
    try:
        fn()
    except exceptions as e:
        return e
    raise AssertionError(f"{what}: no {exceptions} raised")


def base_tensor(dtype, dim, bound, seed=1234):
    """Random integers in [-bound, bound) ([0, bound) for uint8) of shape [17] * dim, the same on every rank."""
    g = torch.Generator().manual_seed(seed)
    low = 0 if dtype == torch.uint8 else -bound
    return torch.randint(low, bound, [17] * dim, generator=g, dtype=torch.int64).to(dtype)


def rank_sum_factor(n):
    return n * (n + 1) // 2  # sum over ranks of (rank + 1)


# ---- runtime ---------------------------------------------------------------------


@case
def runtime_queries():
    hvd.init()  # again: idempotent, as Horovod's
    check(hvd.is_initialized(), "is_initialized() after init()")
    n, r = hvd.size(), hvd.rank()
    check(n == int(os.environ["COHORT_SIZE"]), f"size() {n}, cohortrun started {os.environ['COHORT_SIZE']}")
    check(r == int(os.environ["COHORT_RANK"]), f"rank() {r}, cohortrun's {os.environ['COHORT_RANK']}")
    check(hvd.local_rank() == int(os.environ["COHORT_LOCAL_RANK"]), "local_rank()")
    check(hvd.local_size() == int(os.environ["COHORT_LOCAL_SIZE"]), "local_size()")
    # cohortrun without hosts: one host, so every local_rank has one rank
    check((hvd.cross_rank(), hvd.cross_size()) == (0, 1), f"cross_rank/size {hvd.cross_rank()}, {hvd.cross_size()}")
    check(hvd.is_homogeneous(), "is_homogeneous() on one host")
    check_equal(hvd.allgather(torch.tensor([r])), torch.arange(n), "allgather of the ranks")
    check(not hvd.nccl_built() and not hvd.cuda_built(), "nccl_built/cuda_built on a CPU-only API")


# ---- allreduce -------------------------------------------------------------------


@case
def allreduce_sum_every_dtype():
    n, r = hvd.size(), hvd.rank()
    for dtype, dim in itertools.product(REDUCE_DTYPES, [1, 2, 3]):
        base = base_tensor(dtype, dim, REDUCE_DTYPES[dtype])
        summed = hvd.allreduce(base * (r + 1), op=hvd.Sum)
        check_equal(summed, base * rank_sum_factor(n), f"allreduce Sum {dtype} dim {dim}")


@case
def allreduce_average():
    n, r = hvd.size(), hvd.rank()
    for dtype, dim in itertools.product(REDUCE_DTYPES, [1, 2, 3]):
        base = base_tensor(dtype, dim, REDUCE_DTYPES[dtype])
        if dtype.is_floating_point:
            # mean over ranks of base * (rank + 1) = base * (n + 1) / 2
            averaged = hvd.allreduce(base * (r + 1))
            check_close(averaged, base.double() * (n + 1) / 2, f"allreduce Average {dtype} dim {dim}",
                        rtol=1e-2 if dtype in (torch.float16, torch.bfloat16) else 1e-6)
        else:
            # Horovod's integer case: the same tensor everywhere averages to itself
            check_equal(hvd.allreduce(base), base, f"allreduce Average {dtype} dim {dim}")
    # the default op is Average
    check_close(hvd.allreduce(torch.full((3,), float(r))), torch.full((3,), (n - 1) / 2), "default op", 1e-6)


@case
def allreduce_min_max_product():
    n, r = hvd.size(), hvd.rank()
    for dtype, dim in itertools.product([torch.int32, torch.int64, torch.float32, torch.float64], [1, 2, 3]):
        g = torch.Generator().manual_seed(1234)
        every = torch.randint(-100, 100, [n] + [17] * dim, generator=g).to(dtype)
        check_equal(hvd.allreduce(every[r], op=hvd.Min), every.min(0).values, f"Min {dtype} dim {dim}")
        check_equal(hvd.allreduce(every[r], op=hvd.Max), every.max(0).values, f"Max {dtype} dim {dim}")
        small = torch.randint(-4, 5, [n] + [17] * dim, generator=g).to(dtype)
        check_equal(hvd.allreduce(small[r], op=hvd.Product), small.prod(0).to(dtype), f"Product {dtype} dim {dim}")


@case
def allreduce_prescale_postscale():
    n, r = hvd.size(), hvd.rank()
    factor = 0.3728
    for dtype, dim in itertools.product(FLOAT_DTYPES, [1, 2, 3]):
        base = base_tensor(dtype, dim, 100)
        mine = base * (r + 1)
        expected = base.double() * rank_sum_factor(n) * factor
        rtol = 1e-6 if dtype == torch.float32 else 1e-12
        check_close(hvd.allreduce(mine, op=hvd.Sum, prescale_factor=factor), expected, f"prescale {dtype}", rtol)
        check_close(hvd.allreduce(mine, op=hvd.Sum, postscale_factor=factor), expected, f"postscale {dtype}", rtol)
        both = hvd.allreduce(mine, op=hvd.Average, prescale_factor=2.0, postscale_factor=factor)
        check_close(both, expected * 2.0 / n, f"Average with both factors {dtype}", rtol)
    for dtype in (torch.int32, torch.int64):
        base = base_tensor(dtype, 2, 100)
        check_equal(hvd.allreduce(base, op=hvd.Sum, prescale_factor=2.0), base * 2 * n, f"prescale 2 {dtype}")
        check_equal(hvd.allreduce(base, op=hvd.Sum, postscale_factor=3.0), base * 3 * n, f"postscale 3 {dtype}")


@case
def allreduce_deprecated_average_argument():
    n = hvd.size()
    t = torch.ones(4)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        summed = hvd.allreduce(t, average=False)
        averaged = hvd.allreduce(t, average=True)
    check_equal(summed, torch.full((4,), float(n)), "average=False sums")
    check_equal(averaged, torch.ones(4), "average=True averages")
    check(any(issubclass(w.category, DeprecationWarning) for w in caught), "average= warns DeprecationWarning")
    check_raises(ValueError, lambda: hvd.allreduce(t, average=True, op=hvd.Sum), "average= with op=")
    check_raises(NotImplementedError, lambda: hvd.allreduce(t, op=hvd.Adasum), "op=hvd.Adasum")
    check_raises(ValueError, lambda: hvd.allreduce(t, op=42), "op=42")


@case
def allreduce_inplace_and_noncontiguous():
    n, r = hvd.size(), hvd.rank()
    for dtype in REDUCE_DTYPES:
        base = base_tensor(dtype, 2, REDUCE_DTYPES[dtype])
        t = base * (r + 1)
        out = hvd.allreduce_(t, op=hvd.Sum)
        check(out is t, f"allreduce_ returns its argument ({dtype})")
        check_equal(t, base * rank_sum_factor(n), f"allreduce_ in place {dtype}")
    # a transposed view is reduced as the values it shows, in place too
    base = base_tensor(torch.float64, 2, 100)
    view = (base * (r + 1)).t()
    check_equal(hvd.allreduce(view, op=hvd.Sum), base.t() * rank_sum_factor(n), "allreduce of a transposed view")
    hvd.allreduce_(view, op=hvd.Sum)
    check_equal(view, base.t() * rank_sum_factor(n), "allreduce_ of a transposed view")
    # the input of the out-of-place form is left alone
    t = base * (r + 1)
    hvd.allreduce(t, op=hvd.Sum)
    check_equal(t, base * (r + 1), "allreduce leaves its input")


@case
def allreduce_async_poll_synchronize():
    n, r = hvd.size(), hvd.rank()
    pending = []
    for dtype, dim in itertools.product(REDUCE_DTYPES, [1, 2, 3]):
        base = base_tensor(dtype, dim, REDUCE_DTYPES[dtype])
        pending.append((dtype, base, hvd.allreduce_async(base * (r + 1), op=hvd.Sum)))
    check(len({h for _, _, h in pending}) == len(pending), "handles are distinct")
    first = pending[0][2]
    for _ in range(10 ** 5):  # poll() turns True without synchronize()
        if hvd.poll(first):
            break
        time.sleep(0.0002)
    check(hvd.poll(first), "poll() never turned True")
    for dtype, base, handle in pending:
        check_equal(hvd.synchronize(handle), base * rank_sum_factor(n), f"allreduce_async {dtype}")
    check(hvd.synchronize(first) is None, "synchronize() of a synchronized handle returns None (Horovod)")
    check_raises(ValueError, lambda: hvd.poll(first), "poll() of a synchronized handle")
    t = torch.ones(5) * r
    handle = hvd.allreduce_async_(t, op=hvd.Sum)
    check(hvd.synchronize(handle) is t, "allreduce_async_ result is its argument")
    check_equal(t, torch.ones(5) * (n * (n - 1) / 2), "allreduce_async_ in place")


@case
def async_op_is_pending_until_every_rank_submitted():
    n, r = hvd.size(), hvd.rank()
    if n == 1:
        return
    if r == 0:
        h = hvd.allreduce_async(torch.ones(3), name="probe", op=hvd.Sum)
        # the others submit 'probe' only after this barrier: it cannot be done
        check(not hvd.poll(h), "poll() is True before the other ranks submitted the op")
    hvd.barrier()
    if r != 0:
        h = hvd.allreduce_async(torch.ones(3), name="probe", op=hvd.Sum)
    check_equal(hvd.synchronize(h), torch.full((3,), float(n)), "the probe's result")


@case
def allreduce_names_match_across_ranks_in_any_order():
    n, r = hvd.size(), hvd.rank()
    names = [f"tensor{i}" for i in range(4)]
    order = names if r % 2 == 0 else list(reversed(names))
    handles = {name: hvd.allreduce_async(torch.full((i + 2,), float(r * 10 + i)), name=name, op=hvd.Sum)
               for i, name in sorted(enumerate(names), key=lambda x: order.index(x[1]))}
    for i, name in enumerate(names):
        expected = torch.full((i + 2,), float(10 * n * (n - 1) / 2 + n * i))
        check_equal(hvd.synchronize(handles[name]), expected, f"named allreduce {name}")
    # the same name in another kind of collective is another op
    a = hvd.allreduce_async(torch.ones(3), name="shared", op=hvd.Sum)
    b = hvd.broadcast_async(torch.full((2,), float(r)), 0, name="shared")
    check_equal(hvd.synchronize(a), torch.full((3,), float(n)), "allreduce 'shared'")
    check_equal(hvd.synchronize(b), torch.zeros(2), "broadcast 'shared'")


@case
def allreduce_duplicate_name_in_flight():
    n, r = hvd.size(), hvd.rank()
    if n == 1:
        return
    t = torch.ones(17)
    if r == 0:
        # The others have not submitted 'duplicate_name' yet: the first op
        # cannot complete, so the second submission must be refused.
        first = hvd.allreduce_async(t, name="duplicate_name", op=hvd.Sum)
        check_raises(ValueError, lambda: hvd.allreduce_async(t, name="duplicate_name"), "name in flight")
    hvd.barrier()
    if r > 0:
        first = hvd.allreduce_async(t, name="duplicate_name", op=hvd.Sum)
    check_equal(hvd.synchronize(first), torch.full((17,), float(n)), "the first op of the name")
    # completed: the name may be used again
    check_equal(hvd.allreduce(t, name="duplicate_name", op=hvd.Sum), torch.full((17,), float(n)), "name reused")


@case
def allreduce_mismatch_raises_on_every_rank():
    n, r = hvd.size(), hvd.rank()
    if n == 1:
        return
    # same rank count, different shapes
    e = check_raises(RuntimeError, lambda: hvd.allreduce(torch.ones([17 + r] * 3)), "shape mismatch")
    check(isinstance(e, cohort.MismatchError), f"shape mismatch raised {type(e).__name__}, not MismatchError")
    # same element count, different ranks of shape
    shape = [17, 23 * 57] if r == 0 else [17, 23, 57]
    check_raises(RuntimeError, lambda: hvd.allreduce(torch.ones(shape), name="rank_mismatch"), "dims mismatch")
    # different dtypes
    t = torch.ones(17, dtype=torch.int32 if r % 2 == 0 else torch.float32)
    check_raises(RuntimeError, lambda: hvd.allreduce(t, name="dtype_mismatch"), "dtype mismatch")
    # and the ranks go on
    check_equal(hvd.allreduce(torch.ones(3), op=hvd.Sum), torch.full((3,), float(n)), "allreduce after mismatches")


@case
def unsupported_tensors_are_refused():
    for t, what in [(torch.ones(3, dtype=torch.int16), "int16 allreduce"),
                    (torch.ones(3, dtype=torch.bool), "bool allreduce"),
                    (torch.ones(3, dtype=torch.complex64), "complex64 allreduce")]:
        check_raises((cohort.ConfigError, ValueError), lambda: hvd.allreduce(t), what)
    check_raises((cohort.ConfigError, ValueError), lambda: hvd.allgather(torch.ones(3, dtype=torch.complex64)),
                 "complex64 allgather")
    check_raises((cohort.ConfigError, ValueError), lambda: hvd.allreduce(torch.ones(3).to_sparse()),
                 "sparse allreduce")


@case
def allreduce_gradients():
    n = hvd.size()
    for dtype, dim in itertools.product(FLOAT_DTYPES, [1, 2, 3]):
        t = base_tensor(dtype, dim, 100).requires_grad_()
        hvd.allreduce(t, op=hvd.Sum).backward(torch.ones([17] * dim, dtype=dtype))
        check_equal(t.grad, torch.full([17] * dim, float(n), dtype=dtype), f"Sum gradient {dtype}")
        t = base_tensor(dtype, dim, 100).requires_grad_()
        hvd.allreduce(t, op=hvd.Average).backward(torch.ones([17] * dim, dtype=dtype))
        check_equal(t.grad, torch.ones([17] * dim, dtype=dtype), f"Average gradient {dtype}")


@case
def grouped_allreduce():
    n, r = hvd.size(), hvd.rank()
    bases = [base_tensor(torch.float64, dim, 100, seed=dim) for dim in (1, 2, 3)]
    summed = hvd.grouped_allreduce([b * (r + 1) for b in bases], op=hvd.Sum)
    for b, s in zip(bases, summed):
        check_equal(s, b * rank_sum_factor(n), f"grouped_allreduce dim {b.dim()}")
    mine = [b * (r + 1) for b in bases]
    hvd.grouped_allreduce_(mine, op=hvd.Sum, name="group")
    for b, s in zip(bases, mine):
        check_equal(s, b * rank_sum_factor(n), f"grouped_allreduce_ dim {b.dim()}")
    leaves = [b.clone().requires_grad_() for b in bases]
    sum(x.sum() for x in hvd.grouped_allreduce(leaves, op=hvd.Sum)).backward()
    for leaf in leaves:
        check_equal(leaf.grad, torch.full_like(leaf, float(n)), "grouped_allreduce gradient")


# ---- allgather -------------------------------------------------------------------


@case
def allgather_every_dtype_and_variable_rows():
    n, r = hvd.size(), hvd.rank()
    rows = [17, 32, 81, 12, 15, 23, 22][:n] if n <= 7 else [3] * n
    for dtype, dim in itertools.product(MOVE_DTYPES, [1, 2, 3]):
        value = r % 2 if dtype == torch.bool else r
        t = torch.full([rows[r]] + [17] * (dim - 1), value).to(dtype)
        gathered = hvd.allgather(t)
        expected = torch.cat([torch.full([rows[i]] + [17] * (dim - 1), i % 2 if dtype == torch.bool else i)
                              for i in range(n)]).to(dtype)
        check_equal(gathered, expected, f"allgather {dtype} dim {dim}")
    handles = [hvd.allgather_async(torch.full((2, 3), float(r + k))) for k in range(5)]
    for k, h in enumerate(handles):
        expected = torch.cat([torch.full((2, 3), float(i + k)) for i in range(n)])
        check_equal(hvd.synchronize(h), expected, f"allgather_async {k}")
    # a rank with no rows
    t = torch.full((0 if r == 0 else 2, 4), float(r))
    expected = torch.cat([torch.full((0 if i == 0 else 2, 4), float(i)) for i in range(n)])
    check_equal(hvd.allgather(t, name="some_empty"), expected, "allgather with an empty rank")


@case
def int16_and_bool_move_bit_for_bit():
    # They travel as float16 and uint8: every int16 pattern, float16's NaN
    # and infinity patterns among them, must arrive unchanged.
    n, r = hvd.size(), hvd.rank()
    every = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16)
    mine = every.roll(r)
    check_equal(hvd.allgather(mine), torch.cat([every.roll(i) for i in range(n)]), "allgather of every int16")
    check_equal(hvd.broadcast(mine, n - 1), every.roll(n - 1), "broadcast of every int16")
    received = hvd.alltoall(torch.cat([mine] * n))
    check_equal(received, torch.cat([every.roll(i) for i in range(n)]), "alltoall of every int16")
    flags = torch.tensor([True, False, r % 2 == 0])
    check_equal(hvd.allgather(flags), torch.tensor([x for i in range(n) for x in (True, False, i % 2 == 0)]),
                "allgather of bool")


@case
def allgather_gradient():
    n, r = hvd.size(), hvd.rank()
    rows = [3, 2, 7, 4, 6, 8, 10][:n] if n <= 7 else [2] * n
    for dtype, dim in itertools.product(FLOAT_DTYPES, [1, 2, 3]):
        t = torch.full([rows[r]] + [17] * (dim - 1), float(r), dtype=dtype).requires_grad_()
        grad_ys = torch.cat([torch.full([rows[i]] + [17] * (dim - 1), float(i), dtype=dtype) for i in range(n)])
        hvd.allgather(t).backward(grad_ys)
        check_equal(t.grad, torch.full_like(t, float(r)), f"allgather gradient {dtype} dim {dim}")


# ---- broadcast -------------------------------------------------------------------


@case
def broadcast_from_every_root():
    n, r = hvd.size(), hvd.rank()
    for dtype, dim, root in itertools.product(MOVE_DTYPES, [1, 2, 3], range(n)):
        value = (lambda x: x % 2) if dtype == torch.bool else (lambda x: x)
        t = torch.full([17] * dim, value(r)).to(dtype)
        before = t.clone()
        check_equal(hvd.broadcast(t, root), torch.full([17] * dim, value(root)).to(dtype),
                    f"broadcast {dtype} dim {dim} root {root}")
        check_equal(t, before, "broadcast leaves its input")
        out = hvd.broadcast_(t, root)
        check(out is t, "broadcast_ returns its argument")
        check_equal(t, torch.full([17] * dim, value(root)).to(dtype), f"broadcast_ {dtype} root {root}")
    t = torch.full((4,), float(r))
    h = hvd.broadcast_async_(t, n - 1, name="bcast_async")
    check(hvd.synchronize(h) is t, "broadcast_async_ result is its argument")
    check_equal(t, torch.full((4,), float(n - 1)), "broadcast_async_")


@case
def broadcast_bad_root_raises():
    n = hvd.size()
    check_raises((RuntimeError, ValueError), lambda: hvd.broadcast(torch.ones(3), n), f"root {n} of {n} ranks")
    check_raises((RuntimeError, ValueError), lambda: hvd.broadcast(torch.ones(3), -1), "root -1")
    if n > 1:
        # ranks that disagree on the root
        check_raises(RuntimeError, lambda: hvd.broadcast(torch.ones(3), hvd.rank(), name="root_mismatch"),
                     "different roots")
    check_equal(hvd.broadcast(torch.full((2,), float(hvd.rank())), 0), torch.zeros(2), "broadcast afterwards")


@case
def broadcast_gradient():
    n, r = hvd.size(), hvd.rank()
    for dtype, dim, root in itertools.product(FLOAT_DTYPES, [1, 2, 3], range(n)):
        t = torch.full([17] * dim, float(r), dtype=dtype).requires_grad_()
        hvd.broadcast(t, root).backward(torch.ones([17] * dim, dtype=dtype))
        expected = torch.full([17] * dim, 1.0 if r == root else 0.0, dtype=dtype)
        check_equal(t.grad, expected, f"broadcast gradient {dtype} dim {dim} root {root}")


# ---- alltoall --------------------------------------------------------------------


def alltoall_input(n, r, dim, dtype):
    # r + 1 rows of value i for every destination i
    t = torch.tensor([float(i) for i in range(n) for _ in range(r + 1)])
    for _ in range(dim - 1):
        t = torch.stack([t, t], dim=1) if t.dim() == 1 else torch.cat([t.unsqueeze(1)] * 2, dim=1)
    return t.to(dtype)


@case
def alltoall_with_splits_and_equal():
    n, r = hvd.size(), hvd.rank()
    for dtype, dim in itertools.product(MOVE_DTYPES, [1, 2, 3]):
        if dtype == torch.bool:
            continue
        t = alltoall_input(n, r, dim, dtype)
        received, received_splits = hvd.alltoall(t, splits=torch.tensor([r + 1] * n, dtype=torch.int32))
        rows = n * (n + 1) // 2
        check_equal(received, torch.full((rows,) + tuple(t.shape[1:]), r).to(dtype), f"alltoall {dtype} dim {dim}")
        check_equal(received_splits, torch.tensor([i + 1 for i in range(n)], dtype=torch.int32),
                    f"alltoall received_splits {dtype}")
    # equal splits: rank r sends row block i (value 100 r + i) to rank i
    t = torch.tensor([100.0 * r + i for i in range(n) for _ in range(2)])
    received = hvd.alltoall(t)
    check(torch.is_tensor(received), "alltoall without splits returns only the tensor")
    check_equal(received, torch.tensor([100.0 * i + r for i in range(n) for _ in range(2)]), "alltoall equal")
    # splits as a list, one destination empty
    splits = [0 if i == 0 else 1 for i in range(n)]
    received, received_splits = hvd.alltoall(torch.tensor([float(r)] * (n - 1)), splits=splits)
    expected_rows = 0 if r == 0 else n
    check_equal(received, torch.arange(n, dtype=torch.float32)[:expected_rows], "alltoall with an empty split")
    check_equal(received_splits, torch.tensor([0 if r == 0 else 1] * n, dtype=torch.int32),
                "received_splits with an empty split")
    h = hvd.alltoall_async(torch.arange(n * 2, dtype=torch.float64) + 10 * r, name="a2a_async")
    expected = torch.cat([torch.tensor([10.0 * i + 2 * r, 10.0 * i + 2 * r + 1], dtype=torch.float64)
                          for i in range(n)])
    check_equal(hvd.synchronize(h), expected, "alltoall_async equal split")


@case
def alltoall_bad_splits_raise():
    n = hvd.size()
    t = torch.ones(n * 2 + (1 if n > 1 else 0))  # not divisible into equal parts (n > 1)
    if n > 1:
        check_raises((RuntimeError, ValueError), lambda: hvd.alltoall(t), "rows not divisible by size()")
    check_raises((RuntimeError, ValueError), lambda: hvd.alltoall(torch.ones(4), splits=[1] * (n + 1)),
                 "a split per rank, plus one")
    check_raises((RuntimeError, ValueError), lambda: hvd.alltoall(torch.ones(4), splits=[5] * n),
                 "splits summing past the rows")
    check_raises(ValueError, lambda: hvd.alltoall(torch.ones(4), splits=torch.ones(n)), "float splits")


@case
def alltoall_gradient():
    n, r = hvd.size(), hvd.rank()
    for dtype, dim in itertools.product(FLOAT_DTYPES, [1, 2, 3]):
        t = alltoall_input(n, r, dim, dtype).requires_grad_()
        received, _ = hvd.alltoall(t, splits=[r + 1] * n)
        received.backward(torch.ones_like(received))
        check_equal(t.grad, torch.ones_like(t), f"alltoall gradient {dtype} dim {dim}")


# ---- reducescatter ---------------------------------------------------------------


@case
def reducescatter_sum_average_and_uneven():
    n, r = hvd.size(), hvd.rank()
    for dtype, dim in itertools.product(REDUCE_DTYPES, [1, 2, 3]):
        g = torch.Generator().manual_seed(1234)
        bound = REDUCE_DTYPES[dtype]
        base = torch.randint(0 if dtype == torch.uint8 else -bound, bound, [n * 4] * dim, generator=g).to(dtype)
        summed = hvd.reducescatter(base * (r + 1), op=hvd.Sum)
        check_equal(summed, (base * rank_sum_factor(n))[r * 4:(r + 1) * 4], f"reducescatter Sum {dtype} dim {dim}")
        averaged = hvd.reducescatter(base)
        check_equal(averaged, base[r * 4:(r + 1) * 4], f"reducescatter Average {dtype} dim {dim}")
    # uneven rows: the first rows % size ranks get one more
    rows = 3 * n + 1
    base = torch.arange(rows * 2, dtype=torch.float64).reshape(rows, 2)
    counts = [rows // n + (1 if i < rows % n else 0) for i in range(n)]
    start = sum(counts[:r])
    check_equal(hvd.reducescatter(base * (r + 1), op=hvd.Sum), (base * rank_sum_factor(n))[start:start + counts[r]],
                "reducescatter of uneven rows")
    factor = 0.3728
    check_close(hvd.reducescatter(base, op=hvd.Sum, prescale_factor=factor, postscale_factor=2.0),
                (base * n * factor * 2.0)[start:start + counts[r]], "reducescatter with factors", 1e-12)
    h = hvd.reducescatter_async(base, name="rs_async", op=hvd.Sum)
    check_equal(hvd.synchronize(h), (base * n)[start:start + counts[r]], "reducescatter_async")


@case
def reducescatter_errors_and_gradient():
    n = hvd.size()
    check_raises(ValueError, lambda: hvd.reducescatter(torch.tensor(1.0)), "reducescatter of a scalar")
    check_raises(ValueError, lambda: hvd.reducescatter(torch.ones(n * 2), op=hvd.Min), "reducescatter op=Min")
    check_raises(NotImplementedError, lambda: hvd.reducescatter(torch.ones(n * 2), op=hvd.Adasum), "Adasum")
    for dtype, dim in itertools.product(FLOAT_DTYPES, [1, 2, 3]):
        t = torch.ones([n * 4] * dim, dtype=dtype).requires_grad_()
        hvd.reducescatter(t, op=hvd.Sum).backward(torch.ones([4] + [n * 4] * (dim - 1), dtype=dtype))
        check_equal(t.grad, torch.full_like(t, float(n)), f"reducescatter Sum gradient {dtype} dim {dim}")
        t = torch.ones([n * 4] * dim, dtype=dtype).requires_grad_()
        hvd.reducescatter(t, op=hvd.Average).backward(torch.ones([4] + [n * 4] * (dim - 1), dtype=dtype))
        check_equal(t.grad, torch.ones_like(t), f"reducescatter Average gradient {dtype} dim {dim}")


# ---- join and barrier ------------------------------------------------------------


@case
def join_serves_the_others_collectives():
    n, r = hvd.size(), hvd.rank()
    if n == 1:
        return
    for first, dtype in itertools.product(range(n), [torch.int32, torch.int64, torch.float32, torch.float64]):
        base = base_tensor(dtype, 2, 100)
        if r == first:
            last = hvd.join()
        else:
            a = hvd.allreduce_async(base * (r + 1), name="tensor_a", op=hvd.Sum)
            b = hvd.allreduce_async(base * (r + 1), name="tensor_b", op=hvd.Average)
            # the joined rank adds zeros to a Sum; an Average is over the ranks that submitted it
            others = [i + 1 for i in range(n) if i != first]
            check_equal(hvd.synchronize(a), base * sum(others), f"Sum beside a joined rank ({dtype})")
            if dtype.is_floating_point:
                check_close(hvd.synchronize(b), base.double() * sum(others) / len(others),
                            f"Average beside a joined rank ({dtype})", 1e-6)
            else:
                hvd.synchronize(b)
            # allgather: no rows from the joined rank
            gathered = hvd.allgather(torch.full((2,), r), name="join_gather")
            check_equal(gathered, torch.tensor([i for i in range(n) if i != first for _ in range(2)]),
                        "allgather beside a joined rank")
            # broadcast from the joined rank cannot be served
            check_raises(RuntimeError, lambda: hvd.broadcast(torch.ones(3), first, name="join_bcast"),
                         "broadcast from a joined root")
            last = hvd.join()
        check(last != first, f"join() returned {last}, the rank that joined first")
        check(hvd.allgather_object(last) == [last] * n, "join() returns the same rank everywhere")


@case
def join_with_uneven_batches_trains_as_the_ranks_that_remain():
    # Rank r has r + 1 batches. Step k averages the gradients of the ranks
    # that still have a batch k (the others have joined); the last rank's
    # parameters then equal a one-process replay of that schedule.
    n, r = hvd.size(), hvd.rank()
    torch.manual_seed(7)
    x = torch.randn(n, 6, 4, dtype=torch.float64)
    y = torch.randn(n, 6, 1, dtype=torch.float64)
    init = torch.nn.Linear(4, 1).double()

    def model_and_opt(distributed):
        model = torch.nn.Linear(4, 1).double()
        model.load_state_dict(init.state_dict())
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.5)
        if distributed:
            opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
        return model, opt

    model, opt = model_and_opt(True)
    for k in range(r + 1):
        opt.zero_grad()
        F.mse_loss(model(x[r, k::n]), y[r, k::n]).backward()
        opt.step()
    hvd.join()
    ref, ref_opt = model_and_opt(False)
    for k in range(r + 1):
        grads = []
        for q in range(k, n):  # ranks with a batch k
            ref.zero_grad()
            F.mse_loss(ref(x[q, k::n]), y[q, k::n]).backward()
            grads.append([p.grad.clone() for p in ref.parameters()])
        for p, *g in zip(ref.parameters(), *grads):
            p.grad = sum(g) / len(g)
        ref_opt.step()
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        check_close(p.detach(), q.detach(), f"{name} after uneven batches and join", 1e-12, 1e-14)


@case
def barrier_waits_for_every_rank():
    n, r = hvd.size(), hvd.rank()
    directory = hvd.broadcast_object(tempfile.mkdtemp() if r == 0 else None, 0)
    with open(os.path.join(directory, f"rank{r}"), "w") as f:
        f.write("here")
    hvd.barrier()
    present = sorted(os.listdir(directory))
    hvd.barrier()
    if r == 0:
        shutil.rmtree(directory)
    check(present == sorted(f"rank{i}" for i in range(n)), f"after barrier() the directory holds {present}")


# ---- DistributedOptimizer --------------------------------------------------------


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(5, 8)
        self.fc2 = torch.nn.Linear(8, 3)

    def forward(self, x):
        return self.fc2(torch.tanh(self.fc1(x)))


def make_net(seed=11):
    torch.manual_seed(seed)
    return Net().double()


def data(rows, seed=5):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(rows, 5, generator=g, dtype=torch.float64), torch.randn(rows, 3, generator=g,
                                                                                dtype=torch.float64)


def train_reference(net, opt_factory, batches, passes=1):
    """One process on the global batches: passes micro-batches of mean losses per step."""
    opt = opt_factory(net.parameters())
    for x, y in batches:
        opt.zero_grad()
        for xm, ym in zip(x.chunk(passes), y.chunk(passes)):
            F.mse_loss(net(xm), ym).backward()
        opt.step()
    return net


def shard(t, passes=1):
    """This rank's rows of a global batch: each micro-batch split evenly over the ranks."""
    n, r = hvd.size(), hvd.rank()
    return torch.cat([m.chunk(n)[r] for m in t.chunk(passes)])


def check_same_params(a, b, what, rtol=1e-12):
    for (name, p), q in zip(a.named_parameters(), b.parameters()):
        check_close(p.detach(), q.detach(), f"{what}: {name}", rtol, 1e-14 if rtol < 1e-6 else rtol)


@case
def distributed_optimizer_equals_one_process():
    n = hvd.size()
    global_rows = 12 * n
    batches = [data(global_rows, seed) for seed in range(4)]
    sgd = lambda params: torch.optim.SGD(params, lr=0.1, momentum=0.9)
    adam = lambda params: torch.optim.Adam(params, lr=0.01)
    for factory, kwargs, what in [(sgd, {}, "SGD"), (adam, {}, "Adam"),
                                  (sgd, {"gradient_predivide_factor": 2.0}, "SGD, gradient_predivide_factor 2")]:
        net = make_net()
        opt = hvd.DistributedOptimizer(factory(net.parameters()), named_parameters=net.named_parameters(), **kwargs)
        check(isinstance(opt, type(factory([torch.zeros(1, requires_grad=True)]))),
              "the DistributedOptimizer is an instance of the wrapped optimizer's class")
        for x, y in batches:
            opt.zero_grad()
            F.mse_loss(net(shard(x)), shard(y)).backward()
            opt.step()
        check_same_params(net, train_reference(make_net(), factory, batches), what)


@case
def distributed_optimizer_backward_passes_per_step():
    n = hvd.size()
    batches = [data(12 * n, seed) for seed in range(3)]
    factory = lambda params: torch.optim.SGD(params, lr=0.05, momentum=0.5)
    net = make_net()
    opt = hvd.DistributedOptimizer(factory(net.parameters()), named_parameters=net.named_parameters(),
                                   backward_passes_per_step=2)
    for x, y in batches:
        opt.zero_grad()
        for xm, ym in zip(shard(x, 2).chunk(2), shard(y, 2).chunk(2)):
            F.mse_loss(net(xm), ym).backward()
        opt.step()
    check_same_params(net, train_reference(make_net(), factory, batches, passes=2), "backward_passes_per_step 2")
    # a third backward pass before step() is an error
    opt.zero_grad()
    x, y = batches[0]
    for _ in range(2):
        F.mse_loss(net(shard(x)), shard(y)).backward()
    check_raises(AssertionError, lambda: F.mse_loss(net(shard(x)), shard(y)).backward(), "3 passes, 2 declared")
    opt.synchronize()
    with opt.skip_synchronize():
        opt.step()


@case
def distributed_optimizer_compression_and_sum():
    n, r = hvd.size(), hvd.rank()
    batches = [data(12 * n, seed) for seed in range(3)]
    factory = lambda params: torch.optim.SGD(params, lr=0.1)
    for compression, what in [(hvd.Compression.fp16, "fp16"), (hvd.Compression.bf16, "bf16")]:
        net = make_net()
        opt = hvd.DistributedOptimizer(factory(net.parameters()), named_parameters=net.named_parameters(),
                                       compression=compression)
        for x, y in batches:
            opt.zero_grad()
            F.mse_loss(net(shard(x)), shard(y)).backward()
            opt.step()
        for p in net.parameters():
            check(p.grad.dtype == torch.float64, f"{what}: gradients come back as float64")
        # 16-bit gradients: the parameters follow the float64 run to 16-bit precision of the updates
        check_same_params(net, train_reference(make_net(), factory, batches), f"{what} compression", rtol=2e-2)
    # op=Sum: the gradient is the sum of the ranks' gradients
    net = make_net()
    opt = hvd.DistributedOptimizer(factory(net.parameters()), named_parameters=net.named_parameters(), op=hvd.Sum)
    x, y = batches[0]
    opt.zero_grad()
    F.mse_loss(net(shard(x)), shard(y)).backward()
    opt.synchronize()
    ref = make_net()
    for q in range(n):
        F.mse_loss(ref(x.chunk(n)[q]), y.chunk(n)[q]).backward()  # accumulates the sum
    for (name, p), q in zip(net.named_parameters(), ref.parameters()):
        check_close(p.grad, q.grad, f"op=Sum gradient of {name}", 1e-12, 1e-14)
    with opt.skip_synchronize():
        opt.step()


@case
def distributed_optimizer_arguments():
    net = make_net()
    sgd = torch.optim.SGD(net.parameters(), lr=0.1)
    two = [torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)]
    check_raises(ValueError, lambda: hvd.DistributedOptimizer(
        torch.optim.SGD(itertools.chain(two[0].parameters(), two[1].parameters()), lr=0.1),
        named_parameters=itertools.chain(two[0].named_parameters(), two[1].named_parameters())), "duplicate names")
    check_raises(ValueError, lambda: hvd.DistributedOptimizer(
        sgd, named_parameters=list(net.named_parameters())[:1]), "parameters left unnamed")
    check_raises(ValueError, lambda: hvd.DistributedOptimizer(sgd, named_parameters=list(net.parameters())),
                 "named_parameters without names")
    check_raises(NotImplementedError, lambda: hvd.DistributedOptimizer(sgd, op=hvd.Adasum), "op=hvd.Adasum")
    check_raises(ValueError, lambda: hvd.DistributedOptimizer(sgd, backward_passes_per_step=0),
                 "backward_passes_per_step=0")
    check_raises(ValueError, lambda: hvd.DistributedOptimizer(sgd, op=hvd.Sum, gradient_predivide_factor=2.0),
                 "gradient_predivide_factor with op=Sum")


@case
def distributed_optimizer_protocol():
    n, r = hvd.size(), hvd.rank()
    x, y = data(4 * n)
    # without named_parameters (names by position), with an LR scheduler of the wrapped optimizer
    net = make_net()
    inner = torch.optim.SGD(net.parameters(), lr=0.1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # it counts the wrapped optimizer's steps, not ours
        scheduler = torch.optim.lr_scheduler.StepLR(inner, step_size=1, gamma=0.5)
    opt = hvd.DistributedOptimizer(inner)
    opt.zero_grad()
    F.mse_loss(net(shard(x)), shard(y)).backward()
    if n > 1:
        check_raises(AssertionError, opt.zero_grad, "zero_grad() between backward() and step()")
    opt.step()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scheduler.step()
    check(opt.param_groups[0]["lr"] == 0.05, f"the scheduler drives the DistributedOptimizer (lr "
                                              f"{opt.param_groups[0]['lr']})")
    # gradient clipping: synchronize(), clip, step() inside skip_synchronize()
    # applies the clipped gradients; a rank-dependent change after
    # synchronize() shows that step() reduced nothing again
    net = make_net()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(net.parameters(), lr=0.1), named_parameters=net.named_parameters())
    opt.zero_grad()
    F.mse_loss(net(shard(x)), shard(y)).backward()
    opt.synchronize()
    norm = torch.nn.utils.clip_grad_norm_(net.parameters(), 1e-3)
    check(norm > 1e-3, "the synchronized gradient's norm is above the clip")
    for p in net.parameters():
        p.grad.mul_(r + 1)
    expected = [(p - 0.1 * p.grad).detach() for p in net.parameters()]
    with opt.skip_synchronize():
        opt.step()
    for (name, p), e in zip(net.named_parameters(), expected):
        check_equal(p.detach(), e, f"step() inside skip_synchronize() applies this rank's gradient ({name})")
    # step() after synchronize() without skip_synchronize() warns
    opt.zero_grad()
    F.mse_loss(net(shard(x)), shard(y)).backward()
    opt.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        opt.step()
    check(any("skip_synchronize" in str(w.message) for w in caught), "step() after synchronize() warns")


@case
def distributed_optimizer_unused_and_frozen_parameters():
    # rank 0 trains fc2's output, the others fc3's: each rank's unused
    # parameters are reduced as zeros; requires_grad toggled between steps
    n, r = hvd.size(), hvd.rank()
    if n == 1:
        return  # one process registers no hooks: nothing is reduced

    class Branches(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = torch.nn.Linear(5, 6)
            self.fc2 = torch.nn.Linear(6, 3)
            self.fc3 = torch.nn.Linear(3, 3)

        def forward(self, x, rank):
            h = self.fc2(torch.relu(self.fc1(x)))
            return h if rank == 0 else self.fc3(torch.relu(h))

    def make():
        torch.manual_seed(3)
        return Branches().double()

    x, y = data(4 * n)
    net = make()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(net.parameters(), lr=0.1), named_parameters=net.named_parameters())
    opt.zero_grad()
    F.mse_loss(net(shard(x), r), shard(y)).backward()
    opt.synchronize()
    ref = make()
    grads = {name: torch.zeros_like(p) for name, p in ref.named_parameters()}
    for q in range(n):
        ref.zero_grad()
        F.mse_loss(ref(x.chunk(n)[q], q), y.chunk(n)[q]).backward()
        for name, p in ref.named_parameters():
            if p.grad is not None:
                grads[name] += p.grad / n
    for name, p in net.named_parameters():
        check_close(p.grad, grads[name], f"gradient of {name} with unused parameters", 1e-12, 1e-14)
    with opt.skip_synchronize():
        opt.step()

    gen, disc = torch.nn.Conv2d(1, 4, 1), torch.nn.Conv2d(4, 1, 1)
    gen_opt = hvd.DistributedOptimizer(torch.optim.SGD(gen.parameters(), lr=0.1),
                                       named_parameters=gen.named_parameters())
    disc_opt = hvd.DistributedOptimizer(torch.optim.SGD(disc.parameters(), lr=0.1),
                                        named_parameters=disc.named_parameters())
    inp = torch.rand(1, 1, 8, 8, generator=torch.Generator().manual_seed(1))
    for train_gen in [True, False, True]:
        for p in gen.parameters():
            p.requires_grad_(train_gen)
        for p in disc.parameters():
            p.requires_grad_(not train_gen)
        gen_opt.zero_grad()
        disc_opt.zero_grad()
        disc(gen(inp)).sum().backward()
        for p in gen.parameters():
            check(train_gen == (p.grad is not None and bool(p.grad.abs().max() > 0)), "generator gradient")
        (gen_opt if train_gen else disc_opt).step()


# ---- broadcast_parameters, broadcast_optimizer_state, objects --------------------


@case
def broadcast_parameters_from_root():
    n, r = hvd.size(), hvd.rank()
    root = n - 1
    net = make_net(seed=100 + r)
    hvd.broadcast_parameters(net.state_dict(), root_rank=root)
    check_same_params(net, make_net(seed=100 + root), "broadcast_parameters(state_dict())", rtol=0)
    net = make_net(seed=200 + r)
    hvd.broadcast_parameters(list(net.named_parameters()), root_rank=0)
    check_same_params(net, make_net(seed=200), "broadcast_parameters(named_parameters)", rtol=0)
    net = make_net(seed=300 + r)
    hvd.broadcast_parameters(list(net.parameters()), root_rank=0)
    check_same_params(net, make_net(seed=300), "broadcast_parameters(parameters)", rtol=0)
    check_raises(ValueError, lambda: hvd.broadcast_parameters(net.parameters(), 0), "a generator of parameters")


def optimizer_after_one_step(opt_class, options, seed):
    net = make_net()
    opt = opt_class(net.parameters(), **options)
    x, y = data(8, seed)
    F.mse_loss(net(x), y).backward()
    opt.step()
    return net, opt


@case
def broadcast_optimizer_state_from_root():
    n, r = hvd.size(), hvd.rank()
    for opt_class, options in [(torch.optim.SGD, lambda q: dict(lr=0.1 + q, momentum=0.5 + 0.1 * q)),
                               (torch.optim.Adam, lambda q: dict(lr=0.01 * (q + 1), betas=(0.8 + 0.01 * q, 0.99))),
                               (torch.optim.RMSprop, lambda q: dict(lr=0.01, centered=True, alpha=0.9 - 0.01 * q))]:
        _, opt = optimizer_after_one_step(opt_class, options(r), seed=r)
        hvd.broadcast_optimizer_state(opt, root_rank=0)
        _, expected = optimizer_after_one_step(opt_class, options(0), seed=0)
        for key, value in expected.param_groups[0].items():
            if key != "params":
                got = opt.param_groups[0][key]
                check(type(got) == type(value) and got == value,
                      f"{opt_class.__name__} option {key}: {got!r}, root's {value!r}")
        for p, q in zip(expected.param_groups[0]["params"], opt.param_groups[0]["params"]):
            for key, value in expected.state[p].items():
                got = opt.state[q][key]
                if torch.is_tensor(value):
                    check_equal(got, value, f"{opt_class.__name__} state {key}")
                else:
                    check(got == value, f"{opt_class.__name__} state {key}: {got!r}, root's {value!r}")
    # a new optimizer gets its state first (Adam's moments), then the root's options
    net = make_net()
    opt = hvd.DistributedOptimizer(torch.optim.Adam(net.parameters(), lr=0.001 * (r + 1)),
                                   named_parameters=net.named_parameters())
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    check(len(opt.state) == len(list(net.parameters())), "a fresh optimizer's state is initialized")
    check(opt.param_groups[0]["lr"] == 0.001, "a fresh optimizer takes the root's lr")
    check_raises(ValueError, lambda: hvd.broadcast_optimizer_state(torch.optim.LBFGS(net.parameters()), 0),
                 "LBFGS")


@case
def broadcast_and_allgather_objects():
    n, r = hvd.size(), hvd.rank()
    expected = {"hello": 123, 0: [1, 2], "t": (1.5, None)}
    check(hvd.broadcast_object(expected if r == 0 else {}, root_rank=0) == expected, "broadcast_object")
    check(hvd.broadcast_object(expected if r == n - 1 else None, root_rank=n - 1, name="named") == expected,
          "broadcast_object with a name, from the last rank, of another type elsewhere")
    d = {"metric_val_1": r}
    if r == 1:
        d["metric_val_2"] = 42
    want = [{"metric_val_1": i} for i in range(n)]
    if n > 1:
        want[1] = {"metric_val_1": 1, "metric_val_2": 42}
    check(hvd.allgather_object(d) == want, "allgather_object")
    check(hvd.allgather_object("x" * (r * 1000)) == ["x" * (i * 1000) for i in range(n)],
          "allgather_object of different lengths")


@case
def compression_round_trip():
    for compression, wire in [(hvd.Compression.fp16, torch.float16), (hvd.Compression.bf16, torch.bfloat16)]:
        for dtype in [torch.float32, torch.float64]:
            t = torch.ones([5] * 3, dtype=dtype) * 1.5
            c, ctx = compression.compress(t)
            check(c.dtype == wire, f"{compression.__name__} sends {dtype} as {c.dtype}")
            check_equal(compression.decompress(c, ctx), t, f"{compression.__name__} round trip of {dtype}")
        for dtype in [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64]:
            t = torch.ones(5, dtype=dtype)
            c, ctx = compression.compress(t)
            check(c.dtype == dtype, f"{compression.__name__} leaves {dtype} alone")
            check_equal(compression.decompress(c, ctx), t, f"{compression.__name__} {dtype}")
    t = torch.ones(3)
    c, ctx = hvd.Compression.none.compress(t)
    check(c is t and hvd.Compression.none.decompress(c, ctx) is t, "Compression.none")
    n = hvd.size()
    check_equal(hvd.allreduce(torch.full((4,), 1.5, dtype=torch.float64), op=hvd.Sum, compression=hvd.Compression.fp16),
                torch.full((4,), 1.5 * n, dtype=torch.float64), "allreduce with fp16 compression")


# ---- elastic state outside an elastic job --------------------------------------


@case
def elastic_state_commit_restore_sync():
    n, r = hvd.size(), hvd.rank()
    net = make_net(seed=40 + r)
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    state = hvd.elastic.TorchState(net, opt, epoch=r, batches=[r])
    calls = []

    @hvd.elastic.run
    def train(state, extra):
        calls.append(extra)
        # run() synchronized: every rank holds rank 0's state
        check_same_params(state.model, make_net(seed=40), "model after run()'s sync", rtol=0)
        check(state.epoch == 0 and state.batches == [0], f"values after sync: {state.epoch}, {state.batches}")
        x, y = data(6)
        state.optimizer.zero_grad()
        F.mse_loss(state.model(x), y).backward()
        state.optimizer.step()
        state.epoch = 5
        state.batches.append(1)
        state.commit()
        committed = [p.detach().clone() for p in state.model.parameters()]
        state.optimizer.zero_grad()
        F.mse_loss(state.model(x * 2), y).backward()
        state.optimizer.step()
        state.epoch = 6
        state.batches.append(2)
        state.restore()
        for p, q in zip(state.model.parameters(), committed):
            check_equal(p.detach(), q, "restore() puts back the committed parameters")
        check(state.epoch == 5 and state.batches == [0, 1], f"restored values {state.epoch}, {state.batches}")
        return "done"

    check(train(state, "arg") == "done" and calls == ["arg"], "run() calls func once with its arguments")

    @hvd.elastic.run
    def fails(state):
        raise hvd.HorovodInternalError("lost")

    check_raises(hvd.HorovodInternalError, lambda: fails(state), "outside an elastic job the error propagates")
    sampler = hvd.elastic.ElasticSampler(list(range(10)), shuffle=False)
    # DistributedSampler's partition: every n-th index, padded with the first ones
    expected = {1: [list(range(10))], 2: [[0, 2, 4, 6, 8], [1, 3, 5, 7, 9]],
                3: [[0, 3, 6, 9], [1, 4, 7, 0], [2, 5, 8, 1]]}
    if n in expected:
        check(list(sampler) == expected[n][r], f"ElasticSampler's indices on rank {r}: {list(sampler)}")
    sampler.record_batch(0, 2)
    sampler.reset()
    check(len(sampler) == math.ceil((10 - 2 * n) / n), "ElasticSampler after a recorded batch")


@case
def elastic_sync_takes_the_state_with_most_commits():
    # A member that committed a step the others did not reach (their
    # collectives failed first) holds the newest state: sync() gives it to
    # all. Outside an elastic job commit() is local, so ranks can differ here.
    n, r = hvd.size(), hvd.rank()
    newest = n - 1 if n > 1 else 0
    state = hvd.elastic.TorchState(make_net(seed=60 + r), torch.optim.SGD(make_net().parameters(), lr=0.1),
                                   value=r)
    for _ in range(2 if r == newest else 1):
        state.commit()
    state.sync()
    check_same_params(state.model, make_net(seed=60 + newest), "model after sync()", rtol=0)
    check(state.value == newest, f"value after sync(): {state.value}, expected rank {newest}'s")


@case
def shutdown_and_init_again():
    hvd.shutdown()
    check(not hvd.is_initialized(), "is_initialized() after shutdown()")
    check_raises(ValueError, hvd.rank, "rank() after shutdown()")
    hvd.init()
    check(hvd.is_initialized(), "init() after shutdown()")
    n = hvd.size()
    check_equal(hvd.allreduce(torch.ones(2), op=hvd.Sum), torch.full((2,), float(n)), "allreduce after init again")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", default="", help="run the cases whose name contains this")
    parser.add_argument("--skip", action="append", default=[], help="skip the cases whose name contains this")
    parser.add_argument("--keep-going", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    hvd.init()
    failures = 0
    cases = [fn for fn in CASES if args.only in fn.__name__ and not any(s in fn.__name__ for s in args.skip)]
    for fn in cases:
        try:
            fn()
        except Exception:
            failures += 1
            print(f"FAILED {fn.__name__} on rank {RANK} of {SIZE}:\n{traceback.format_exc()}",
                  file=sys.stderr, flush=True)
            if not args.keep_going:
                sys.exit(1)
    if failures:
        sys.exit(1)
    if hvd.rank() == 0:
        print(f"hvd_api_test: {len(cases)} cases passed on {hvd.size()} ranks")
    hvd.shutdown()


if __name__ == "__main__":
    main()
