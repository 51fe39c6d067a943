#!/usr/bin/env python3
"""The PyTorch peer of examples/synthetic_benchmark: PyTorch
DistributedDataParallel (gloo backend, or --backend cohort: cohort's
torch.distributed backend, python/, with PYTHONPATH=build/python) on the same models, synthetic batches,
per-rank batch, SGD with momentum 0.9, measured the same way: --warmup steps,
then --steps steps each timed on every rank; a step's time is the slowest
rank's; the median step counts. Spawns --ranks processes itself; rank 0
prints one JSON line. Needs Debian's python3-torch (/usr/bin/python3).
"""
import argparse
import ctypes
import json
import os
import socket
import statistics
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = None
        if stride != 1 or cin != cout:
            self.shortcut = nn.Conv2d(cin, cout, 1, stride, bias=False)
            self.shortcut_bn = nn.BatchNorm2d(cout)

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return torch.relu(y + (self.shortcut_bn(self.shortcut(x)) if self.shortcut is not None else x))


def make_model(kind):
    # Must match synthetic_classifier in cohort/models/image_classifiers.cc.
    if kind == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 4096), nn.ReLU(), nn.Linear(4096, 4096), nn.ReLU(),
                             nn.Linear(4096, 10))
    if kind == "cnn":
        return nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(),
                             nn.MaxPool2d(2), nn.Conv2d(64, 128, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Flatten(), nn.Linear(6272, 256), nn.ReLU(), nn.Linear(256, 10))
    return nn.Sequential(nn.Conv2d(1, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU(), BasicBlock(16, 16, 1),
                         BasicBlock(16, 32, 2), BasicBlock(32, 64, 2), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(64, 10))


def free_port():
    """A TCP port free on this host now (the ranks' tcp:// rendezvous)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pin_threads(threads):
    """Read by the spawned ranks' OpenMP and BLAS when they load torch: Debian's
    OpenBLAS (pthread build) sizes its own pool from OPENBLAS_NUM_THREADS or the
    core count, whatever torch.set_num_threads says."""
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(threads)


def blas_threads():
    """OpenBLAS's own pool size (-1 when the BLAS is not OpenBLAS): torch.set_num_threads does not set it."""
    try:
        return ctypes.CDLL("libopenblas.so.0").openblas_get_num_threads()
    except (OSError, AttributeError):
        return -1


def no_communication(state, bucket):
    """A DDP comm hook that leaves the bucket as it is (--backend none)."""
    done = torch.futures.Future()
    done.set_result(bucket.buffer())
    return done


def worker(rank, args, port):
    torch.set_num_threads(args.threads)
    backends = {"both": ["gloo", "cohort"], "all": ["gloo", "cohort", "none"]}.get(args.backend, [args.backend])
    if "cohort" in backends:
        import cohort  # noqa: F401  registers the backend
    dist.init_process_group("gloo" if backends[0] == "none" else backends[0], init_method=f"tcp://127.0.0.1:{port}",
                            rank=rank, world_size=args.ranks)
    # --backend both: a cohort group beside gloo's, a model on each, and the
    # steps alternate between them, so both meet the same machine state.
    # "none" is a third model whose gradients are never exchanged (a comm
    # hook that returns the bucket as it is): the step that free
    # communication would give, with the other process computing beside it.
    groups = {backends[0]: dist.group.WORLD}
    for name in backends[1:]:
        groups[name] = dist.new_group(backend=name) if name != "none" else dist.group.WORLD
    loss_fn = nn.CrossEntropyLoss()
    x = torch.randn(args.batch_size, 1, 28, 28)
    y = torch.randint(0, 10, (args.batch_size,))
    steps = {}
    for name, group in groups.items():
        torch.manual_seed(42 + rank)
        model = nn.parallel.DistributedDataParallel(make_model(args.model), process_group=group,
                                                    gradient_as_bucket_view=bool(args.bucket_view))
        if name == "none":
            model.register_comm_hook(None, no_communication)
        opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)

        def step(model=model, opt=opt):
            opt.zero_grad(set_to_none=True)  # as synthetic_benchmark (PyTorch 2 default)
            loss_fn(model(x), y).backward()
            opt.step()

        steps[name] = step
    for _ in range(args.warmup):
        for step in steps.values():
            step()
    dist.barrier()
    local = {name: [] for name in steps}
    for i in range(args.steps):
        names = list(steps)  # each goes first in turn
        order = names[i % len(names):] + names[:i % len(names)]
        for name in order:
            t0 = time.perf_counter()
            steps[name]()
            local[name].append(time.perf_counter() - t0)
    for name in steps:
        times = torch.tensor(local[name], dtype=torch.float64)
        dist.all_reduce(times, op=dist.ReduceOp.MAX, group=groups[backends[0]])
        step_s = statistics.median(times.tolist())
        if rank == 0:
            print(json.dumps({"bench": "pytorch_ddp_synthetic", "backend": name, "interleaved": len(steps) > 1,
                              "model": args.model, "ranks": args.ranks,
                              "batch_per_rank": args.batch_size, "steps": args.steps, "threads": args.threads,
                              "blas_threads": blas_threads(),
                              "bucket_view": args.bucket_view, "torch": torch.__version__,
                              "step_ms": round(1e3 * step_s, 3),
                              "samples_per_s": round(args.batch_size * args.ranks / step_s, 1)}), flush=True)
    # As bench/torch_ddp_peer.py: skip teardown, where Debian's torch 1.13
    # gloo workers can hang after their work is done.
    dist.barrier()
    os._exit(0)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--model", choices=["mlp", "cnn", "resnet"], default="mlp")
    p.add_argument("--backend", choices=["gloo", "cohort", "none", "both", "all"], default="gloo",
                   help="both: gloo and cohort in the same processes, their steps alternating; none: DDP with "
                        "no communication (a comm hook that does nothing: the bound); all: gloo, cohort and none")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--bucket-view", type=int, choices=[0, 1], default=1,
                   help="DDP gradient_as_bucket_view (default 1, as synthetic_benchmark)")
    args = p.parse_args()
    for name in ("ranks", "batch_size", "steps", "threads"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    pin_threads(args.threads)
    mp.spawn(worker, args=(args, free_port()), nprocs=args.ranks, join=True)


if __name__ == "__main__":
    main()
