#!/usr/bin/env python3
"""Samples the other programs' load on a shared machine while a benchmark
runs: every 2 s, one line "<unix time> <other> <ours>" with the number of
runnable threads (state R) outside and inside the process tree of ROOT
(this sampler excluded). bench/sim_validation.sh gives cohort-sim the median
of <other> as cpu.background_threads. Stops when ROOT exits.

Usage: bench/sim/other_load.py ROOT_PID OUT_FILE
"""
import os
import sys
import time


def parents():
    got = {}
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                s = open(f"/proc/{p}/stat").read()
                got[int(p)] = int(s[s.rindex(")") + 2:].split()[1])
            except (OSError, ValueError, IndexError):
                pass  # the process ended while we read it
    return got


def runnable(pid):
    n = 0
    try:
        for t in os.listdir(f"/proc/{pid}/task"):
            s = open(f"/proc/{pid}/task/{t}/stat").read()
            n += s[s.rindex(")") + 2] == "R"
    except (OSError, IndexError):
        pass
    return n


def main():
    if len(sys.argv) != 3 or not sys.argv[1].isdigit():
        sys.exit(__doc__)
    root, out, me = int(sys.argv[1]), sys.argv[2], os.getpid()
    with open(out, "a") as f:
        while os.path.exists(f"/proc/{root}"):
            pp = parents()
            other = ours = 0
            for p in pp:
                if p == me:
                    continue
                q, hops = p, 0
                while q > 1 and q != root and hops < 64:
                    q, hops = pp.get(q, 1), hops + 1
                if q == root:
                    ours += runnable(p)
                else:
                    other += runnable(p)
            f.write(f"{time.time():.0f} {other} {ours}\n")
            f.flush()
            time.sleep(2)


if __name__ == "__main__":
    main()
