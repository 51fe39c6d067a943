"""One rank of the "cohort" torch.distributed backend's tests (started by
dist_backend_test.py through dist_launch.py).

Modes:
  collectives  every collective the backend implements, on float32,
               float64, int32 and int64 tensors of odd shapes, equals what
               gloo gives for the same inputs (both groups live in this
               process: gloo is the default group, cohort a new_group); for
               the collectives gloo lacks, the reference is computed from
               every rank's input gathered over gloo. Inputs are multiples
               of 1/4, so every sum, mean and product is exact in any order
               and the comparison is exact. Then: the ops cohort does not
               have raise naming the op; a shape that differs between ranks
               raises on every rank naming the op, and the group still works.
  ddp          PyTorch's DistributedDataParallel (float64 MLP, 3 buckets)
               and ZeroRedundancyOptimizer over cohort give the parameters
               that the same code over gloo gives, after 20 steps.
  dead         cohort is the default group; rank `size-1` kills itself
               (SIGKILL) in the middle of a stream of allreduces; every
               survivor must raise naming that rank. Prints
               "detected <seconds>" measured from the victim's last
               timestamp (written before it dies).
"""

import copy
import os
import signal
import sys
import time

import torch
import torch.distributed as dist

import cohort

MODE = sys.argv[1]
RANK = int(os.environ["RANK"])
WORLD = int(os.environ["WORLD_SIZE"])
INIT = os.environ["INIT_METHOD"]
DTYPES = [torch.float32, torch.float64, torch.int32, torch.int64]
SHAPES = [(7,), (3, 5), (2, 3, 3)]
ROOTS = sorted({0, WORLD - 1})


def fail(message):
    print(f"rank {RANK}: FAIL: {message}", flush=True)
    sys.exit(1)


def check_equal(what, got, want):
    if got.dtype != want.dtype or got.shape != want.shape or not torch.equal(got, want):
        fail(f"{what}: cohort gave {got.tolist()} ({got.dtype}), the reference {want.tolist()} ({want.dtype})")


def sample(shape, dtype, rank, salt):
    """Rank-dependent values, multiples of 1/4 for floating dtypes (exact sums)."""
    g = torch.Generator().manual_seed(1000 * salt + rank)
    values = torch.randint(-8, 9, shape, generator=g)
    return (values.double() / 4).to(dtype) if dtype.is_floating_point else values.to(dtype)


def everyones(shape, dtype, salt, gloo):
    """Every rank's sample, gathered over gloo (the reference's inputs)."""
    mine = sample(shape, dtype, RANK, salt)
    out = [torch.empty_like(mine) for _ in range(WORLD)]
    dist.all_gather(out, mine, group=gloo)
    return out


def collectives():
    dist.init_process_group("gloo", init_method=INIT, rank=RANK, world_size=WORLD)
    gloo = dist.group.WORLD
    group = dist.new_group(backend="cohort")
    salt = 0
    for dtype in DTYPES:
        for shape in SHAPES:
            salt += 1
            tag = f"{dtype} {shape}"
            x = sample(shape, dtype, RANK, salt)
            # all_reduce with every op gloo has, and AVG against gloo's SUM.
            for name in ("SUM", "PRODUCT", "MIN", "MAX"):
                op = getattr(dist.ReduceOp, name)
                a, b = x.clone(), x.clone()
                dist.all_reduce(a, op=op, group=group)
                dist.all_reduce(b, op=op, group=gloo)
                check_equal(f"all_reduce {name} {tag}", a, b)
            if dtype.is_floating_point:
                a, b = x.clone(), x.clone()
                dist.all_reduce(a, op=dist.ReduceOp.AVG, group=group)
                dist.all_reduce(b, group=gloo)
                check_equal(f"all_reduce AVG {tag}", a, b / WORLD)
            for root in ROOTS:
                a, b = x.clone(), x.clone()
                dist.broadcast(a, root, group=group)
                dist.broadcast(b, root, group=gloo)
                check_equal(f"broadcast from {root} {tag}", a, b)
                a, b = x.clone(), x.clone()
                dist.reduce(a, root, op=dist.ReduceOp.MAX, group=group)
                dist.reduce(b, root, op=dist.ReduceOp.MAX, group=gloo)
                check_equal(f"reduce MAX to {root} {tag}", a, b if RANK == root else x)
                # gather and scatter
                got = [torch.empty_like(x) for _ in range(WORLD)] if RANK == root else None
                want = [torch.empty_like(x) for _ in range(WORLD)] if RANK == root else None
                dist.gather(x, got, dst=root, group=group)
                dist.gather(x, want, dst=root, group=gloo)
                if RANK == root:
                    for r in range(WORLD):
                        check_equal(f"gather to {root}, rank {r}'s {tag}", got[r], want[r])
                pieces = [sample(shape, dtype, r + 10 * RANK, salt) for r in range(WORLD)]
                a, b = torch.empty_like(x), torch.empty_like(x)
                dist.scatter(a, pieces if RANK == root else None, src=root, group=group)
                dist.scatter(b, pieces if RANK == root else None, src=root, group=gloo)
                check_equal(f"scatter from {root} {tag}", a, b)
            # all_gather, as a list and into one tensor
            got = [torch.empty_like(x) for _ in range(WORLD)]
            want = [torch.empty_like(x) for _ in range(WORLD)]
            dist.all_gather(got, x, group=group)
            dist.all_gather(want, x, group=gloo)
            for r in range(WORLD):
                check_equal(f"all_gather rank {r}'s {tag}", got[r], want[r])
            flat = torch.empty((WORLD * x.numel(),), dtype=dtype)
            dist.all_gather_into_tensor(flat, x.reshape(-1), group=group)
            check_equal(f"all_gather_into_tensor {tag}", flat, torch.cat([w.reshape(-1) for w in want]))
            # reduce_scatter (gloo has none): rank r gets the sum of every rank's block r
            blocks = [sample(shape, dtype, RANK, salt * 7 + r) for r in range(WORLD)]
            everyone = [everyones(shape, dtype, salt * 7 + r, gloo) for r in range(WORLD)]
            want_rs = sum(everyone[RANK][1:], everyone[RANK][0].clone())
            out = torch.empty_like(x)
            dist.reduce_scatter(out, blocks, group=group)
            check_equal(f"reduce_scatter {tag}", out, want_rs)
            out = torch.empty_like(x)
            dist.reduce_scatter_tensor(out, torch.cat([b.reshape(-1) for b in blocks]).reshape(WORLD * shape[0], *shape[1:]), group=group)
            check_equal(f"reduce_scatter_tensor {tag}", out, want_rs)
            # all_to_all_single: even, then uneven rows per rank
            rows = 2 * WORLD
            t = sample((rows, 3), dtype, RANK, salt)
            a, b = torch.empty_like(t), torch.empty_like(t)
            dist.all_to_all_single(a, t, group=group)
            dist.all_to_all_single(b, t, group=gloo)
            check_equal(f"all_to_all_single even {tag}", a, b)
            in_splits = [(RANK + p) % 3 + 1 for p in range(WORLD)]       # rows to rank p
            out_splits = [(p + RANK) % 3 + 1 for p in range(WORLD)]      # rows from rank p
            t = sample((sum(in_splits), 3), dtype, RANK, salt + 500)
            a = torch.empty((sum(out_splits), 3), dtype=dtype)
            b = torch.empty_like(a)
            dist.all_to_all_single(a, t, out_splits, in_splits, group=group)
            dist.all_to_all_single(b, t, out_splits, in_splits, group=gloo)
            check_equal(f"all_to_all_single uneven {tag}", a, b)
            # all_to_all (lists; gloo has none): outputs[p] is rank p's inputs[RANK]
            ins = [sample((p + 1, 2), dtype, RANK, salt + 900 + p) for p in range(WORLD)]
            outs = [torch.empty((RANK + 1, 2), dtype=dtype) for _ in range(WORLD)]
            dist.all_to_all(outs, ins, group=group)
            for p in range(WORLD):
                check_equal(f"all_to_all from rank {p} {tag}", outs[p], sample((RANK + 1, 2), dtype, p, salt + 900 + RANK))
    dist.barrier(group=group)
    objects = [None] * WORLD
    dist.all_gather_object(objects, {"rank": RANK, "name": f"r{RANK}"}, group=group)
    if objects != [{"rank": r, "name": f"r{r}"} for r in range(WORLD)]:
        fail(f"all_gather_object gave {objects}")
    # A group of some of the ranks (every rank creates it, as new_group asks).
    if WORLD > 2:
        pair = dist.new_group(ranks=[0, WORLD - 1], backend="cohort")
        if RANK in (0, WORLD - 1):
            t = torch.full((5,), float(RANK + 1), dtype=torch.float64)
            dist.all_reduce(t, group=pair)
            check_equal("all_reduce over ranks 0 and the last", t, torch.full((5,), float(WORLD + 1), dtype=torch.float64))
            dist.destroy_process_group(pair)
    # Asynchronous ops complete through their Work's wait() and future.
    t = torch.full((4,), float(RANK + 1))
    work = dist.all_reduce(t, group=group, async_op=True)
    fut = work.get_future()
    work.wait()
    check_equal("async all_reduce", fut.wait()[0], torch.full((4,), float(WORLD * (WORLD + 1) // 2)))

    # What cohort does not have raises, naming it, before anything is sent.
    for name, call in [("send", lambda: dist.send(torch.ones(1), (RANK + 1) % WORLD, group=group)),
                       ("recv", lambda: dist.recv(torch.ones(1), (RANK + 1) % WORLD, group=group)),
                       ("BAND", lambda: dist.all_reduce(torch.ones(1, dtype=torch.int32), op=dist.ReduceOp.BAND, group=group))]:
        try:
            call()
            fail(f"{name} did not raise")
        except RuntimeError as e:
            if name not in str(e) or "cohort" not in str(e):
                fail(f"{name} raised without naming it: {e}")
    # A shape that differs between ranks raises on every rank, naming the op.
    try:
        dist.all_reduce(torch.ones(3 + RANK), group=group)
        fail("an allreduce of different shapes did not raise")
    except cohort.MismatchError as e:
        if "allreduce" not in str(e):
            fail(f"the mismatch error does not name the op: {e}")
        print(f"rank {RANK}: mismatch: {e}", flush=True)
    t = torch.ones(2)
    dist.all_reduce(t, group=group)
    check_equal("all_reduce after a mismatch", t, torch.full((2,), float(WORLD)))
    dist.destroy_process_group(group)
    dist.destroy_process_group()
    print(f"rank {RANK}: collectives OK", flush=True)


def train(model, group, optimizer_factory, steps=20):
    ddp = torch.nn.parallel.DistributedDataParallel(model, process_group=group, bucket_cap_mb=0.01)
    optimizer = optimizer_factory(ddp.parameters())
    for step in range(steps):
        g = torch.Generator().manual_seed(100 * step + RANK)
        x = torch.randn(16, 20, generator=g, dtype=torch.float64)
        y = torch.randn(16, 1, generator=g, dtype=torch.float64)
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(ddp(x), y).backward()
        optimizer.step()
    return [p.detach() for p in model.parameters()]


def ddp():
    from torch.distributed.optim import ZeroRedundancyOptimizer
    dist.init_process_group("gloo", init_method=INIT, rank=RANK, world_size=WORLD)
    gloo = dist.group.WORLD
    group = dist.new_group(backend="cohort")
    torch.manual_seed(RANK)  # different initial weights: DDP's broadcast from rank 0 must fix them
    base = torch.nn.Sequential(torch.nn.Linear(20, 64), torch.nn.Tanh(), torch.nn.Linear(64, 64), torch.nn.Tanh(),
                               torch.nn.Linear(64, 1)).double()
    sgd = lambda params: torch.optim.SGD(params, lr=0.05, momentum=0.9)
    zero = lambda pg: (lambda params: ZeroRedundancyOptimizer(params, optimizer_class=torch.optim.SGD,
                                                              process_group=pg, lr=0.05, momentum=0.9))
    for what, factory_cohort, factory_gloo in [("DDP + SGD", sgd, sgd), ("DDP + ZeroRedundancyOptimizer", zero(group), zero(gloo))]:
        got = train(copy.deepcopy(base), group, factory_cohort)
        want = train(copy.deepcopy(base), gloo, factory_gloo)
        worst = max((a - b).abs().max().item() for a, b in zip(got, want))
        if worst > 1e-12:
            fail(f"{what}: parameters differ from gloo's by {worst} after 20 steps")
        moved = max((a - b).abs().max().item() for a, b in zip(got, base.parameters()))
        if moved < 1e-3:
            fail(f"{what}: training did not move the parameters ({moved})")
        print(f"rank {RANK}: {what}: largest difference from gloo {worst:.3g} after 20 steps", flush=True)
    dist.destroy_process_group(group)
    dist.destroy_process_group()


def dead():
    dist.init_process_group("cohort", init_method=INIT, rank=RANK, world_size=WORLD)
    victim = WORLD - 1
    t = torch.ones(1 << 16)
    stamp = os.environ["DEAD_STAMP"]
    for i in range(1000000):
        if RANK == victim and i == 50:
            with open(stamp, "w") as f:
                f.write(repr(time.time()))
            os.kill(os.getpid(), signal.SIGKILL)
        try:
            dist.all_reduce(t)
        except RuntimeError as e:
            now = time.time()
            with open(stamp) as f:
                died = float(f.read())
            print(f"rank {RANK}: detected {now - died:.3f} s after the kill: {type(e).__name__}: {e}", flush=True)
            if f"rank {victim}" not in str(e):
                fail(f"the error does not name rank {victim}: {e}")
            os._exit(0)  # the group cannot be shut down collectively any more
    fail("the allreduces went on without the dead rank")


{"collectives": collectives, "ddp": ddp, "dead": dead}[MODE]()
