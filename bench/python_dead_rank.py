#!/usr/bin/env python3
"""How long the survivors of a killed rank take to learn of it, from Python:
torch.distributed over --backend cohort or gloo, 3 processes, all_reduce of
256 KiB in a loop; rank 2 writes a timestamp and kills itself (SIGKILL) at
its 50th call. Each survivor prints one JSON line: the seconds from the
kill to the exception (or "none" when --timeout-s passed without one: the
survivor hung), the exception's type and first line. Needs
PYTHONPATH=build/python for cohort, and Debian's torch (/usr/bin/python3).
"""
import argparse
import datetime
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

from pytorch_ddp_synthetic import free_port, pin_threads


def worker(backend, stamp, init, rank, size, timeout_s):
    import torch
    import torch.distributed as dist
    if backend == "cohort":
        import cohort  # noqa: F401
    dist.init_process_group(backend, init_method=init, rank=rank, world_size=size,
                            timeout=datetime.timedelta(seconds=timeout_s))
    t = torch.ones(1 << 16)
    for i in range(10**9):
        if rank == size - 1 and i == 50:
            with open(stamp, "w") as f:
                f.write(repr(time.time()))
            os.kill(os.getpid(), signal.SIGKILL)
        try:
            dist.all_reduce(t)
        except Exception as e:  # noqa: BLE001  whatever the backend raises
            with open(stamp) as f:
                died = float(f.read())
            # One write(2) of the whole line: the survivors share the pipe, and
            # print() may write the text and its newline separately.
            line = json.dumps({"bench": "python_dead_rank", "backend": backend, "rank": rank,
                               "detected_s": round(time.time() - died, 3), "error": type(e).__name__,
                               "message": str(e).splitlines()[0][:200]}) + "\n"
            os.write(sys.stdout.fileno(), line.encode())
            os._exit(0)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backend", choices=["cohort", "gloo"], required=True)
    p.add_argument("--timeout-s", type=float, default=60, help="the process group's timeout, and how long to wait")
    p.add_argument("--worker", nargs=4, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        stamp, init, rank, size = args.worker
        worker(args.backend, stamp, init, int(rank), int(size), args.timeout_s)
        return
    init = f"tcp://127.0.0.1:{free_port()}"
    pin_threads(1)
    env = dict(os.environ)
    with tempfile.TemporaryDirectory() as tmp:
        stamp = os.path.join(tmp, "stamp")
        procs = [subprocess.Popen([sys.executable, __file__, "--backend", args.backend, "--timeout-s",
                                   str(args.timeout_s), "--worker", stamp, init, str(r), "3"], env=env)
                 for r in range(3)]
        deadline = time.time() + args.timeout_s + 30
        for r, proc in enumerate(procs[:2]):
            try:
                proc.wait(timeout=max(1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                print(json.dumps({"bench": "python_dead_rank", "backend": args.backend, "rank": r,
                                  "detected_s": "none", "error": f"still waiting after {args.timeout_s + 30:.0f} s"}),
                      flush=True)
        for proc in procs:
            proc.kill()
            proc.wait()


if __name__ == "__main__":
    main()
