"""`pip install .` and `python3 -m cohort.run` as a user runs them.

Installs the package into a fresh virtual environment (with the system's
site packages, where Debian's torch is; --no-build-isolation --no-index:
no network) from this checkout, reusing the build directory
(COHORT_BUILD_DIR: nothing is compiled again), then, from another
directory and without PYTHONPATH:
  - every binary of the installed package finds its cohort libraries
    through $ORIGIN, none through an absolute path (the build directory);
  - `python3 -m cohort.run -np 2 train.py` runs a 2-rank job whose ranks
    import the installed cohort and cohort.torch and all-reduce over the
    "cohort" backend, checked against the closed form.

    package_test.py SOURCE_DIR BUILD_DIR
"""

import glob
import os
import subprocess
import sys
import tempfile

SOURCE, BUILD = sys.argv[1], sys.argv[2]
TRAIN = r'''
import os, sys, torch, torch.distributed as dist
import cohort, cohort.torch
assert cohort.__file__.startswith(os.environ["VENV"]), cohort.__file__
dist.init_process_group("cohort")
t = torch.tensor([dist.get_rank() + 1.0])
dist.all_reduce(t)
assert t.item() == 3.0, t
dist.destroy_process_group()
print("rank", dist.get_rank() if dist.is_initialized() else os.environ["RANK"], "OK from", cohort.__file__, flush=True)
'''


def run(command, **kwargs):
    print("$", " ".join(command), flush=True)
    done = subprocess.run(command, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, **kwargs)
    if done.returncode != 0:
        sys.exit(f"FAIL: exit {done.returncode}:\n{done.stdout}")
    return done.stdout


with tempfile.TemporaryDirectory() as tmp:
    venv = os.path.join(tmp, "venv")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(COHORT_BUILD_DIR=os.path.abspath(BUILD), VENV=venv, OMP_NUM_THREADS="1")
    run(["/usr/bin/python3", "-m", "venv", "--system-site-packages", venv], env=env)
    print(run([f"{venv}/bin/pip", "install", "--no-build-isolation", "--no-index", SOURCE], env=env, cwd=tmp)[-400:])
    site = glob.glob(f"{venv}/lib/python3*/site-packages/cohort")[0]
    binaries = glob.glob(f"{site}/_C*.so") + [f"{site}/bin/cohortrun"] + glob.glob(f"{site}/lib/*.so")
    for binary in binaries:
        dynamic = run(["readelf", "-d", binary])
        runpaths = [line.split("[")[1].rstrip("]") for line in dynamic.splitlines() if "RUNPATH" in line]
        if not runpaths or any(not p.startswith("$ORIGIN") for p in runpaths[0].split(":")):
            sys.exit(f"FAIL: {binary} has RUNPATH {runpaths}: the installed package must find its libraries "
                     "through $ORIGIN")
    script = os.path.join(tmp, "train.py")
    with open(script, "w") as f:
        f.write(TRAIN)
    out = run([f"{venv}/bin/python3", "-m", "cohort.run", "-np", "2", "train.py"], env=env, cwd=tmp)
    print(out)
    if out.count("OK from " + site) != 2:
        sys.exit("FAIL: the ranks did not both run the installed package")
print("package OK")
