#!/usr/bin/env python3
"""The torchrun side of bench/elastic.sh: what PyTorch's documentation
recommends for fault tolerance under torchrun (checkpoint every epoch,
resume from it when started again), with the workload of cohort's
elastic_program --model mlp|cnn: the same mlp (784-4096-4096-10) or the
Fashion-MNIST example's cnn, SGD with
momentum 0.9, lr 0.05, --rows random rows per epoch in global batches of
--batch rows per rank, DDP over gloo. Rank 0 prints "step K world W epoch A
at T" after each step (A: torchrun's restart count, T: CLOCK_REALTIME
seconds) and the rank --kill-rank of the
first attempt (TORCHELASTIC_RESTART_COUNT 0) prints "kill at T" and kills
itself with SIGKILL at step --kill-step, before its backward's allreduce.

  torchrun --nnodes=1:1 --nproc_per_node=3 --max_restarts=3 bench/elastic_torchrun_peer.py \\
      --checkpoint DIR/ckpt.pt [--rows 960] [--batch 32] [--epochs 3] [--kill-rank 1 --kill-step 15] [--model cnn]
"""
import argparse
import os
import signal
import time

import torch
import torch.distributed as dist
import torch.nn as nn


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--rows", type=int, default=960)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--kill-rank", type=int, default=-1)
    p.add_argument("--kill-step", type=int, default=-1)
    p.add_argument("--model", choices=("mlp", "cnn"), default="mlp")
    a = p.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    first_attempt = attempt == 0

    torch.manual_seed(7)
    if a.model == "mlp":
        model = nn.Sequential(nn.Flatten(), nn.Linear(784, 4096), nn.ReLU(), nn.Linear(4096, 4096), nn.ReLU(),
                              nn.Linear(4096, 10))
    else:  # cohort::models::fashion_mnist_classifier("cnn")
        model = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                              nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                              nn.Flatten(), nn.Linear(32 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))
    ddp = nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    x = torch.randn(a.rows, 1, 28, 28)
    y = torch.randint(0, 10, (a.rows,))
    start_epoch = 0
    if os.path.exists(a.checkpoint):
        state = torch.load(a.checkpoint)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start_epoch = state["epoch"]
    per_epoch = (a.rows + world * a.batch - 1) // (world * a.batch)
    for epoch in range(start_epoch, a.epochs):
        for b in range(per_epoch):
            step = epoch * per_epoch + b
            begin = b * world * a.batch + rank * a.batch
            xs, ys = x[begin:begin + a.batch], y[begin:begin + a.batch]
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(ddp(xs), ys)
            if first_attempt and rank == a.kill_rank and step == a.kill_step:
                print(f"kill at {time.time():.6f}", flush=True)
                os.kill(os.getpid(), signal.SIGKILL)
            loss.backward()
            optimizer.step()
            if rank == 0:
                print(f"step {step} world {world} epoch {attempt} at {time.time():.6f}", flush=True)
        if rank == 0:
            tmp = a.checkpoint + ".tmp"
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch + 1}, tmp)
            os.replace(tmp, a.checkpoint)
        dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
