#!/usr/bin/env bash
# Synchronous parameter servers against allreduce DDP on the same training
# ranks: synthetic_benchmark's dense mlp, 2 workers (+ 1 server for the
# parameter servers), batch 32 per worker, one thread per process, runs
# interleaved and repeated; prints each row's median step time and its
# median ratio to DDP within the same repetition.
#
#   multi_worker (DDP)            cohortrun -np 2 synthetic_benchmark --strategy multi_worker
#   parameter_server (sum)        cohortrun -np 3 ... --strategy parameter_server:servers=1
#   parameter_server (server SGD) cohortrun -np 3 ... parameter_server:servers=1,optimizer=sgd,momentum=0.9
#
# Usage: bench/ps_vs_ddp.sh [--build-dir DIR] [--reps N] [--steps N] [--model mlp|cnn]
set -euo pipefail
build_dir=build reps=3 steps=40 model=mlp
while [[ $# -gt 0 ]]; do
  case $1 in
    --build-dir) build_dir=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --model) model=$2; shift 2 ;;
    *) echo "ps_vs_ddp.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
program=$build_dir/examples/synthetic_benchmark cohortrun=$build_dir/cohort/launcher/cohortrun
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1 COHORT_BANNER=0
labels=("multi_worker (DDP), 2 ranks" "parameter_server, optimizer=program, 2+1 ranks"
        "parameter_server, optimizer=sgd on the server, 2+1 ranks")
nps=(2 3 3)
specs=(multi_worker parameter_server:servers=1 parameter_server:servers=1,optimizer=sgd,lr=0.01,momentum=0.9)
results=$(mktemp)
trap 'rm -f "$results"' EXIT
for ((r = 0; r < reps; r++)); do
  for i in "${!specs[@]}"; do
    json=$("$cohortrun" -np "${nps[$i]}" --output pipe "$program" --model "$model" --strategy "${specs[$i]}" \
             --batch-size 32 --steps "$steps" --warmup 5 --threads 1 --quiet | grep -o '{"bench".*}')
    ms=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["step_ms"])' "$json")
    echo "$r $i $ms" >> "$results"
  done
done
python3 - "$results" "$reps" "$model" "${labels[@]}" <<'PY'
import sys, statistics
path, reps, model, labels = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]
ms = {}
for line in open(path):
    r, i, v = line.split(); ms[(int(r), int(i))] = float(v)
print(f"| {model}, batch 32 per worker | step (ms, median of {reps}) | ratio to DDP (median) |")
print("|---|---|---|")
for i, label in enumerate(labels):
    steps = [ms[(r, i)] for r in range(reps)]
    ratios = [ms[(r, i)] / ms[(r, 0)] for r in range(reps)]
    print(f"| {label} | {statistics.median(steps):.2f} | {statistics.median(ratios):.2f} |")
PY
