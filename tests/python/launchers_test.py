"""init_process_group("cohort") as PyTorch users write it, under every way
they start a job: cohortrun, torchrun and mpirun with env:// (no arguments
but the backend), and by hand with a file:// init_method; and a plain gloo
program under cohortrun. Each rank all-reduces its rank + 1 and checks the
closed form, size * (size + 1) / 2.

    launchers_test.py COHORTRUN
"""

import os
import subprocess
import sys
import tempfile

from dist_launch import PYTHON, free_port, report, run_workers

COHORTRUN = sys.argv[1]
SCRIPT = r'''
import os, sys, torch, torch.distributed as dist
import cohort
if "INIT_METHOD" in os.environ:  # started by hand: the URL, the rank and the size
    dist.init_process_group("cohort", init_method=os.environ["INIT_METHOD"], rank=int(os.environ["RANK"]),
                            world_size=int(os.environ["WORLD_SIZE"]))
else:                            # a launcher's env://
    dist.init_process_group("cohort")
rank, size = dist.get_rank(), dist.get_world_size()
t = torch.tensor([rank + 1.0], dtype=torch.float64)
dist.all_reduce(t)
want = size * (size + 1) / 2
if t.item() != want or dist.get_backend() != "cohort":
    sys.exit(f"rank {rank}: all_reduce gave {t.item()}, want {want}; backend {dist.get_backend()}")
dist.destroy_process_group()
print(f"rank {rank} of {size}: OK", flush=True)
'''

# A plain PyTorch program, which knows nothing of cohort: gloo's env:// under
# cohortrun (its MASTER_ADDR/MASTER_PORT are torch's master, not cohort's
# store, whose port rank 0's TCPStore would find taken).
PLAIN_GLOO = r'''
import sys, torch, torch.distributed as dist
dist.init_process_group("gloo")
rank, size = dist.get_rank(), dist.get_world_size()
t = torch.tensor([rank + 1.0], dtype=torch.float64)
dist.all_reduce(t)
if t.item() != size * (size + 1) / 2:
    sys.exit(f"rank {rank}: all_reduce gave {t.item()}")
dist.destroy_process_group()
print(f"rank {rank} of {size}: OK", flush=True)
'''


def run(what, command, want_ranks):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    p = subprocess.run(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
    ok = p.returncode == 0 and p.stdout.count(": OK") == want_ranks
    print(f"---- {what}: exit {p.returncode}, {p.stdout.count(': OK')} of {want_ranks} ranks OK\n{p.stdout}")
    return ok


with tempfile.TemporaryDirectory() as tmp:
    script = os.path.join(tmp, "train.py")
    with open(script, "w") as f:
        f.write(SCRIPT)
    ok = run("cohortrun", [COHORTRUN, "-np", "3", PYTHON, script], 3)
    plain = os.path.join(tmp, "plain_gloo.py")
    with open(plain, "w") as f:
        f.write(PLAIN_GLOO)
    ok &= run("cohortrun, gloo without cohort", [COHORTRUN, "-np", "3", PYTHON, plain], 3)
    # Debian's torchrun 1.13 under Python 3.11 fails at its default
    # --redirects 0 (its Std flag lookup skips the zero member on 3.11):
    # redirect and tee stdout instead, which it parses.
    ok &= run("torchrun", ["torchrun", "--redirects", "1", "--tee", "1", "--nnodes", "1", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
                           "--master_port", str(free_port()), script], 2)
    ok &= run("mpirun", ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2", "--mca", "btl", "self,tcp",
                         "-x", "MASTER_ADDR=127.0.0.1", "-x", f"MASTER_PORT={free_port()}", "-x", "PYTHONPATH",
                         PYTHON, script], 2)
    status = report(run_workers(script, 2, init_method=f"file://{tmp}/rendezvous"))
    ok &= status == 0
sys.exit(0 if ok else 1)
