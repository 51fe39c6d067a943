#!/usr/bin/env python3
"""The peer of torch_scaling: PyTorch DistributedDataParallel (gloo backend)
training the same models on the same synthetic batches, measured the same
way (see torch_scaling.cc): warm-up steps that calibrate the step count to
about --seconds, --rounds timed rounds, the best round counts, a round's time
is the largest over ranks. Spawns --ranks processes itself; rank 0 prints one
JSON line. Needs Debian's python3-torch (scripts/bootstrap.sh --with-torch).
"""
import argparse
import json
import os
import socket
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn


def make_model(kind):
    # Must match fashion_mnist_classifier in cohort/models/image_classifiers.cc.
    if kind == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(),
                             nn.Linear(128, 10))
    return nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(32 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))


def slowest(seconds):
    t = torch.tensor([seconds], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


def timed(steps, step):
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    return slowest(time.perf_counter() - t0)


def worker(rank, args, port):
    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=args.ranks)
    torch.manual_seed(1 + rank)
    x = torch.randn(args.batch_size, 1, 28, 28)
    y = torch.randint(0, 10, (args.batch_size,))
    model = nn.parallel.DistributedDataParallel(make_model(args.model))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

    def step():
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()

    warm = timed(args.warmup_steps, step)
    steps = max(5, int(args.seconds * args.warmup_steps / warm))
    best = min(timed(steps, step) for _ in range(args.rounds))
    if rank == 0:
        samples = args.batch_size * steps * args.ranks
        print(json.dumps({"bench": "torch_ddp_peer", "model": args.model, "ranks": args.ranks,
                          "batch_per_rank": args.batch_size, "steps": steps, "threads": args.threads,
                          "torch": torch.__version__, "samples_per_s": round(samples / best, 1),
                          "step_ms": round(1e3 * best / steps, 3)}), flush=True)
    # Leave without destroy_process_group() and interpreter teardown: with
    # Debian's torch 1.13 a spawned gloo worker can hang there after its work
    # is done (seen in this benchmark), which would stall the whole run.
    dist.barrier()
    os._exit(0)


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--model", choices=["mlp", "cnn"], default="cnn")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--seconds", type=float, default=1.0)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--warmup-steps", type=int, default=10)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    mp.spawn(worker, args=(args, port), nprocs=args.ranks, join=True)


if __name__ == "__main__":
    main()
