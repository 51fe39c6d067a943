"""Starts N worker processes of a test script the way a torch.distributed
user does by hand: RANK, WORLD_SIZE and a tcp:// init_method on a free port
of this host. Used by the tests of the "cohort" backend that need no
launcher (and that kill a worker on purpose).

    run_workers(script, np, args) -> list of (returncode, stdout+stderr)
"""

import os
import socket
import subprocess
import sys

PYTHON = "/usr/bin/python3"  # Debian's, with PyTorch


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_workers(script, np, args=(), timeout=120, env_extra=None, init_method=None):
    init_method = init_method or f"tcp://127.0.0.1:{free_port()}"
    procs = []
    for rank in range(np):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(np),
                   INIT_METHOD=init_method,
                   OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
        env.update(env_extra or {})
        procs.append(subprocess.Popen([PYTHON, script, *args], env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    results = []
    for p in procs:
        try:
            out, _ = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            out, _ = p.communicate()
            out += f"\n[killed after {timeout} s]"
        results.append((p.returncode, out))
    return results


def report(results):
    """Prints every worker's output; exit status 0 only when all exited 0."""
    status = 0
    for rank, (code, out) in enumerate(results):
        sys.stdout.write(f"---- rank {rank}: exit {code}\n{out}")
        status = status or (code != 0)
    return status
