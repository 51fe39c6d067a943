#!/usr/bin/env python3
"""Runs docs/guide.md's multi-host recipes as written on an emulated cluster.

Usage: run_recipes.py GUIDE SOURCE_DIR COHORTRUN CHECK PROGRAM [ARGS...]

The recipes are the ```sh blocks that begin `# <name>.sh: ...` (§3 and §4:
cohortrun on two hosts through ssh, with a hostfile, through a launch
template; `cohortrun --check` of the ssh launch; mpirun across two hosts).
Each runs under `bash -e` in a scratch directory, on a cluster of two
hosts that scripts/cluster.sh emulates, with exactly these substitutions
of what names a real cluster, word for word:

- node1, node2: the emulated hosts' addresses (names of namespaces resolve
  nowhere, as names without DNS would not); `ssh`, first on PATH, is a
  script that runs its command in the namespace that holds the address
  (the emulated hosts' ssh server), with a TMPDIR of its own per host, as
  real hosts have (the namespaces share /tmp and one host name, which
  OpenMPI's session directories are keyed by);
- 10.0.0.1: the bridge's address (the launching machine on the hosts'
  network); 10.0.0.0/24: the cluster's subnet;
- build/cohort/launcher/cohortrun: COHORTRUN; scripts/cluster.sh: under
  SOURCE_DIR; ./guide_two_ranks: PROGRAM ARGS (a torch-free build passes a
  cohort program of its own); the cluster prefix `demo`: one unique to
  this run.

CHECK is REGEX=COUNT: each recipe's output must hold COUNT lines matching
REGEX (the program's lines of one run), and a recipe that asks for
--dry-run must print the dry run. A recipe that runs `cohortrun --check`
(which starts probes, not the program) must instead print the check's
verdict that the launch would work (and exit 0, as every recipe must).
mpirun recipes are skipped, saying so, without mpirun or with
COHORT_RECIPES_NO_MPI=1 (a build without MPI).
Exits 77 (skipped) when namespaces cannot be created (not root).
"""
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from extract_blocks import named_blocks  # noqa: E402

SKIP = 77


def fail(message, output=""):
    print(output)
    print("FAIL: " + message)
    sys.exit(1)


def cluster_unavailable():
    if os.geteuid() != 0:
        return "needs root to create network namespaces"
    if not shutil.which("ip") or not shutil.which("tc"):
        return "needs iproute2 (ip, tc)"
    return None


def up(script, prefix):
    p = subprocess.run([script, "up", "--hosts", "2", "--prefix", prefix, "--owner", str(os.getpid())],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode != 0:
        fail("scripts/cluster.sh up failed", p.stdout)
    values = dict(line.split("=", 1) for line in p.stdout.splitlines() if "=" in line and " " not in line.split("=")[0])
    hosts = [line.split("=", 1)[1].split() for line in p.stdout.splitlines() if line.startswith("host=")]
    return {"subnet": values["subnet"], "bridge": values["bridge"].split()[1], "hosts": hosts}


def write_ssh(directory, hosts, scratch):
    """An `ssh` that runs its command in the emulated host of the address given."""
    cases = "".join(f"  {address}) ns={name} ;;\n" for name, address in hosts)
    path = os.path.join(directory, "ssh")
    with open(path, "w", encoding="utf-8") as f:
        f.write(f"""#!/bin/sh
# ssh [options] [user@]HOST COMMAND...: COMMAND in the emulated host HOST.
while [ $# -gt 0 ]; do
  case $1 in -o|-p|-i|-l|-F) shift 2 ;; -*) shift ;; *) break ;; esac
done
host=${{1#*@}}
shift
case $host in
{cases}  *) echo "ssh: Could not resolve hostname $host" >&2; exit 255 ;;
esac
mkdir -p {scratch}/tmp-$ns
exec ip netns exec "$ns" env TMPDIR={scratch}/tmp-$ns /bin/sh -c "$*"
""")
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def substitute(block, cluster, source_dir, cohortrun, program, prefix):
    replacements = [
        (r"\bnode1\b", cluster["hosts"][0][1]),
        (r"\bnode2\b", cluster["hosts"][1][1]),
        (r"\b10\.0\.0\.0/24\b", cluster["subnet"]),
        (r"\b10\.0\.0\.1\b", cluster["bridge"]),
        (r"(?<![\w/])build/cohort/launcher/cohortrun\b", cohortrun),
        (r"(?<![\w/])scripts/cluster\.sh\b", os.path.join(source_dir, "scripts", "cluster.sh")),
        (r"(?<![\w/])\./guide_two_ranks\b", " ".join(program)),
        (r"\bdemo\b", prefix),
    ]
    for pattern, value in replacements:
        block = re.sub(pattern, lambda _m, v=value: v, block)
    return block


def main():
    guide, source_dir, cohortrun = (os.path.abspath(a) for a in sys.argv[1:4])
    check = sys.argv[4]
    program = [os.path.abspath(sys.argv[5])] + sys.argv[6:]
    regex, count = check.rsplit("=", 1)
    if (why := cluster_unavailable()) is not None:
        print("skipped: " + why)
        sys.exit(SKIP)
    recipes = named_blocks(guide, "sh", every_block_named=False)
    if len(recipes) < 5:
        fail(f"expected the guide's 5 multi-host recipes, found {[name for name, _ in recipes]}")
    script = os.path.join(source_dir, "scripts", "cluster.sh")
    tag = f"{os.getpid() % 100000:05d}"
    cluster = up(script, "gr" + tag)
    try:
        with tempfile.TemporaryDirectory(prefix="cohort_recipes_") as scratch:
            bin_dir = os.path.join(scratch, "bin")
            os.mkdir(bin_dir)
            write_ssh(bin_dir, cluster["hosts"], scratch)
            env = dict(os.environ, PATH=bin_dir + ":" + os.environ["PATH"], OMP_NUM_THREADS="1",
                       OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
            # OpenMPI 4.1's daemon may map its shared hwloc topology where its
            # stack grows (SIGSEGV one run in tens): each process reads its own.
            env["OMPI_MCA_rtc_hwloc_vmhole"] = "none"
            for name, block in recipes:
                if "mpirun" in block and (os.environ.get("COHORT_RECIPES_NO_MPI") == "1" or not shutil.which("mpirun")):
                    print(f"{name}: skipped (no mpirun, or this build has no MPI backend)")
                    continue
                text = substitute(block, cluster, source_dir, cohortrun, program, "gd" + tag)
                print(f"$ bash -e {name}\n{text}")
                p = subprocess.run(["bash", "-e", "-c", text], cwd=scratch, env=env, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True, timeout=240)
                print(p.stdout)
                if p.returncode != 0:
                    fail(f"{name} exited {p.returncode}")
                if "--check" in block:
                    if not re.search(r"^cohortrun: check: a launch of .* would work$", p.stdout, flags=re.M):
                        fail(f"{name}: the check did not say the launch would work")
                    print(f"{name}: ok")
                    continue
                found = len(re.findall(regex, p.stdout, flags=re.M))
                if found != int(count):
                    fail(f"{name}: expected {count} lines matching {regex!r}, found {found}")
                if "--dry-run" in block and "cohortrun: dry run, nothing is started" not in p.stdout:
                    fail(f"{name}: the dry run printed no plan")
                print(f"{name}: ok")
    finally:
        # The emulated-hosts recipe's own cluster too, should it have failed
        # before its `down`.
        for prefix in ("gr" + tag, "gd" + tag):
            subprocess.run([script, "down", "--prefix", prefix], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


if __name__ == "__main__":
    main()
