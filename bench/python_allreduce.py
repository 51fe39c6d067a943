#!/usr/bin/env python3
"""torch.distributed.all_reduce from Python: the "cohort" backend (python/)
against gloo, 8 B to 64 MiB of float32, in the same processes, and the
memory bound: every rank copying its tensor at once.

Each rank joins gloo as the default group and cohort as a new_group; for
every size, the two and the copy take turns (each goes first in turn from
repetition to repetition), each timing a batch of calls after a warm-up. A
size's figure per backend is the median over --reps batches of the time per
call, the slowest rank's (the times are max-reduced over gloo). Rank 0
prints one JSON line per size: latency_us of each, the algorithm bandwidth
(bytes / time, GB/s), cohort / gloo, the copy's time and cohort / copy.
Spawns --ranks processes itself; needs PYTHONPATH=build/python and Debian's
torch (/usr/bin/python3).
"""
import argparse
import json
import os
import statistics
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from pytorch_ddp_synthetic import free_port, pin_threads


SIZES = [8, 64, 512, 4 << 10, 32 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20]


def time_calls(t, group, calls):
    dist.barrier(group=group)
    start = time.perf_counter()
    for _ in range(calls):
        dist.all_reduce(t, group=group)
    return (time.perf_counter() - start) / calls


def time_copies(t, out, calls):
    """The memory bound: every rank at once copies its tensor (one read and
    one write of it, the least an allreduce of private buffers moves)."""
    dist.barrier()
    start = time.perf_counter()
    for _ in range(calls):
        out.copy_(t)
    return (time.perf_counter() - start) / calls


def worker(rank, args, port):
    import cohort  # noqa: F401  registers the backend
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=args.ranks)
    groups = {"gloo": dist.group.WORLD, "cohort": dist.new_group(backend="cohort")}
    for size in [s for s in SIZES if s <= args.max_bytes]:
        t = torch.ones(size // 4)
        out = torch.empty_like(t)
        calls = max(3, min(2000, (64 << 20) // size // 4))
        timers = {name: (lambda n, group=group: time_calls(t, group, n)) for name, group in groups.items()}
        timers["copy"] = lambda n: time_copies(t, out, n)
        samples = {name: [] for name in timers}
        for rep in range(args.reps):
            names = list(timers)  # each goes first in turn
            for name in names[rep % len(names):] + names[:rep % len(names)]:
                timers[name](max(1, calls // 10))  # warm-up
                samples[name].append(timers[name](calls))
        result = {}
        for name in timers:
            worst = torch.tensor(samples[name], dtype=torch.float64)
            dist.all_reduce(worst, op=dist.ReduceOp.MAX)  # over gloo: the slowest rank's
            result[name] = statistics.median(worst.tolist())
        if rank == 0:
            print(json.dumps({"bench": "python_allreduce", "ranks": args.ranks, "bytes": size, "calls": calls,
                              "reps": args.reps, "gloo_us": round(1e6 * result["gloo"], 2),
                              "cohort_us": round(1e6 * result["cohort"], 2),
                              "gloo_GBps": round(size / result["gloo"] / 1e9, 3),
                              "cohort_GBps": round(size / result["cohort"] / 1e9, 3),
                              "cohort_over_gloo": round(result["cohort"] / result["gloo"], 3),
                              "copy_us": round(1e6 * result["copy"], 2),
                              "cohort_over_copy": round(result["cohort"] / result["copy"], 3)}), flush=True)
    dist.barrier()
    os._exit(0)  # as pytorch_ddp_synthetic.py: skip a teardown that can hang in Debian's gloo


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--max-bytes", type=int, default=64 << 20)
    args = p.parse_args()
    pin_threads(1)
    mp.spawn(worker, args=(args, free_port()), nprocs=args.ranks, join=True)


if __name__ == "__main__":
    main()
