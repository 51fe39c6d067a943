#!/usr/bin/env bash
# elastic.sh: recovery from a rank's SIGKILL, cohort against torchrun
# (issue 18), side by side in one run, interleaved and repeated.
#
# Usage: bench/elastic.sh [--build-dir DIR] [--reps N] [--kill-step K] [--rows R] [--batch B]
#
# Both train the synthetic mlp (784-4096-4096-10, 20M parameters) on 3
# ranks of this machine, SGD with momentum, --rows random rows per epoch
# in global batches of --batch rows per rank, 3 epochs, one thread per rank;
# rank 1 kills itself with SIGKILL at step --kill-step (mid second epoch by
# default), before its gradients' allreduce:
#   cohort   cohortrun -np 3 --min-np 2 --max-restarts 3
#            tests/torch/elastic_program --model mlp (ElasticState,
#            run_elastic: commit after every step, in memory)
#   torchrun torchrun --nnodes=1:1 --nproc_per_node=3 --max_restarts=3 (1.13 spells
#            its flags with underscores; 2.x also takes --nproc-per-node)
#            bench/elastic_torchrun_peer.py (DDP over gloo, a checkpoint
#            every epoch and resume from it, as PyTorch's docs recommend)
# Reported per side, medians over --reps: recovery (from the killed rank's
# "kill at T" to rank 0's next completed step), completed steps lost (steps
# rank 0 finished before the kill that ran again after it), and the job's
# wall time; then torchrun's recovery over cohort's.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=$repo/build
reps=3
kill_step=15
rows=960
batch=32
usage_error() { echo "elastic.sh: $* (see the header of $0)" >&2; exit 2; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build-dir) build_dir=$(realpath -m "${2:?--build-dir needs a value}"); shift 2 ;;
    --reps) reps=${2:?--reps needs a value}; shift 2 ;;
    --kill-step) kill_step=${2:?--kill-step needs a value}; shift 2 ;;
    --rows) rows=${2:?--rows needs a value}; shift 2 ;;
    --batch) batch=${2:?--batch needs a value}; shift 2 ;;
    -h|--help) sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) usage_error "unknown argument '$1'" ;;
  esac
done
for v in "$reps" "$kill_step" "$rows" "$batch"; do
  [[ $v =~ ^[0-9]+$ ]] || usage_error "expected a non-negative integer, got '$v'"
done
run=$build_dir/cohort/launcher/cohortrun
program=$build_dir/tests/torch/elastic_program
for p in "$run" "$program" /usr/bin/torchrun; do [[ -x $p ]] || { echo "elastic.sh: $p is missing" >&2; exit 1; }; done
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
[[ -n ${KEEP_LOGS:-} ]] && trap - EXIT && echo "elastic.sh: logs in $out"
for (( r = 1; r <= reps; r++ )); do
  for side in cohort torchrun; do
    # Alternate which side goes first.
    (( r % 2 == 0 )) && side=$([[ $side == cohort ]] && echo torchrun || echo cohort)
    log=$out/$side.$r.log
    start=$(date +%s.%N)
    if [[ $side == cohort ]]; then
      "$run" -np 3 --min-np 2 --max-restarts 3 "$program" --model mlp --rows "$rows" --batch "$batch" \
        --epochs 3 --kill "1:$kill_step:before" >"$log" 2>&1 || echo "elastic.sh: cohort run $r failed" >&2
    else
      port=$(( 29500 + RANDOM % 1000 ))
      /usr/bin/torchrun --nnodes=1:1 --nproc_per_node=3 --max_restarts=3 --master_port "$port" \
        --redirects 2 --tee 1 --log_dir "$out/tlog.$r" \
        "$repo/bench/elastic_torchrun_peer.py" --checkpoint "$out/ckpt.$r.pt" --rows "$rows" --batch "$batch" \
        --epochs 3 --kill-rank 1 --kill-step "$kill_step" >"$log" 2>&1 || echo "elastic.sh: torchrun run $r failed" >&2
    fi
    echo "$side $r $(echo "$(date +%s.%N) - $start" | bc)" >>"$out/wall.txt"
  done
done

/usr/bin/python3 - "$out" "$reps" <<'PY'
import re, statistics, sys
out, reps = sys.argv[1], int(sys.argv[2])
wall = {}
for line in open(f"{out}/wall.txt"):
    side, r, s = line.split()
    wall.setdefault(side, []).append(float(s))
rows = {}
for side in ("cohort", "torchrun"):
    rec, lost = [], []
    for r in range(1, reps + 1):
        text = open(f"{out}/{side}.{r}.log").read()
        kill = [float(t) for t in re.findall(r"kill at ([0-9.]+)", text)]
        steps = [(int(k), float(t)) for k, t in re.findall(r"step (\d+) world \d+ at ([0-9.]+)", text)]
        if not kill or not steps:
            print(f"{side} rep {r}: no kill or no steps in the log")
            continue
        before = [k for k, t in steps if t < kill[0]]
        after = [(k, t) for k, t in steps if t > kill[0]]
        rec.append(after[0][1] - kill[0])
        done = max(before) if before else -1
        lost.append(len({k for k, _ in after if k <= done}))
    rows[side] = (rec, lost)
    if rec:
        print(f"{side:9s} recovery median {statistics.median(rec):8.3f} s (runs: {', '.join(f'{x:.3f}' for x in rec)}); "
              f"completed steps lost median {statistics.median(lost)}; wall median {statistics.median(wall[side]):.1f} s")
if rows.get("cohort", ([],))[0] and rows.get("torchrun", ([],))[0]:
    print(f"torchrun / cohort recovery: {statistics.median(rows['torchrun'][0]) / statistics.median(rows['cohort'][0]):.1f}x")
PY
