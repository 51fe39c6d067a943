"""The "cohort" torch.distributed backend against gloo (see
dist_backend_worker.py for what each mode checks).

    dist_backend_test.py collectives|ddp|dead NP
"""

import os
import sys
import tempfile

from dist_launch import report, run_workers

HERE = os.path.dirname(os.path.abspath(__file__))
mode, np = sys.argv[1], int(sys.argv[2])
worker = os.path.join(HERE, "dist_backend_worker.py")
with tempfile.TemporaryDirectory() as tmp:
    env = {"DEAD_STAMP": os.path.join(tmp, "stamp")}
    results = run_workers(worker, np, [mode], env_extra=env)
if mode == "dead":
    # The victim died by SIGKILL; the survivors must have exited 0.
    code, out = results[-1]
    sys.stdout.write(f"---- rank {np - 1} (killed): exit {code}\n{out}")
    if code != -9:
        print(f"FAIL: the victim exited {code}, not by SIGKILL")
        sys.exit(1)
    results = results[:-1]
sys.exit(report(results))
