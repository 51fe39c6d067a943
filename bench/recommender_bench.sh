#!/usr/bin/env bash
# Sparse push/pull on parameter servers against a dense allreduce of the whole
# embedding table (issue 16), with examples/recommender on the same synthetic
# clicks, table size, batch and steps; runs interleaved and repeated:
#
#   sparse  cohortrun -np 4 recommender --strategy parameter_server:servers=2,optimizer=adagrad,lr=0.05
#           (2 workers pull and push only the distinct rows their batch touches; 2 servers)
#   dense   cohortrun -np 2 recommender --strategy allreduce
#           (2 workers, each holding the table; its gradient allreduced every step)
#
# Prints per side the median over repetitions of worker 0's median step time,
# bytes moved per step (sent + received: the transport's counters for the
# servers, the ring allreduce's 2 x 2(n-1)/n of the table for allreduce),
# peak memory of a worker, and the final held-out AUC; then the ratios.
#
# Usage: bench/recommender_bench.sh [--build-dir DIR] [--reps N] [--rows N] [--steps N] [--batch N]
set -euo pipefail
build_dir=build reps=3 rows=1000000 steps=60 batch=1024
while [[ $# -gt 0 ]]; do
  case $1 in
    --build-dir) build_dir=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --rows) rows=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --batch) batch=$2; shift 2 ;;
    *) echo "recommender_bench.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
program=$build_dir/examples/recommender cohortrun=$build_dir/cohort/launcher/cohortrun
for f in "$program" "$cohortrun"; do
  [[ -x $f ]] || { echo "recommender_bench.sh: $f is not built" >&2; exit 2; }
done
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1 COHORT_BANNER=0
sides=(sparse dense)
nps=(4 2)
specs=(parameter_server:servers=2,optimizer=adagrad,lr=0.05 allreduce)
results=$(mktemp)
log=$(mktemp)
trap 'rm -f "$results" "$log"' EXIT
common=(--rows "$rows" --steps "$steps" --batch "$batch" --eval-every "$steps" --log-every "$steps" --threads 1)
for ((r = 0; r < reps; r++)); do
  for i in "${!sides[@]}"; do
    # Alternate which side runs first, so neither always runs on a warm cache.
    j=$(( (i + r) % ${#sides[@]} ))
    if ! "$cohortrun" -np "${nps[$j]}" "$program" --strategy "${specs[$j]}" "${common[@]}" >"$log" 2>&1; then
      echo "recommender_bench.sh: ${sides[$j]} failed:" >&2
      cat "$log" >&2
      exit 1
    fi
    # "[0] worker 0: 60 steps in 9.1 s, median 150.20 ms/step, 1.31 MB moved per step, ..., peak memory N MiB"
    line=$(grep -m1 'worker 0: ' "$log")
    ms=$(sed -n 's/.*median \([0-9.]*\) ms\/step.*/\1/p' <<<"$line")
    mb=$(sed -n 's/.* \([0-9.]*\) MB moved per step.*/\1/p' <<<"$line")
    mem=$(sed -n 's/.*peak memory \([0-9.]*\) MiB.*/\1/p' <<<"$line")
    auc=$(grep 'held-out loss' "$log" | tail -1 | sed -n 's/.*held-out loss [0-9.]*  AUC \([0-9.]*\).*/\1/p')
    echo "$r ${sides[$j]} $ms $mb $mem $auc" >>"$results"
  done
done
/usr/bin/python3 - "$results" "$rows" "$steps" "$batch" "$reps" <<'PY'
import statistics, sys
path, rows, steps, batch, reps = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
runs = {}
for line in open(path):
    r, side, *values = line.split()
    runs.setdefault(side, []).append([float(v) for v in values])
med = {side: [statistics.median(v[k] for v in runs[side]) for k in range(4)] for side in runs}
print(f"{rows:,} x 64 table ({rows * 64 * 4 / 1e9:.2f} GB float32), batch {batch} per worker, {steps} steps, "
      f"2 workers; medians of {reps}\n")
print("| side | ms/step | MB moved per step | worker peak MiB | held-out AUC |")
print("|---|---:|---:|---:|---:|")
for side, label in (("sparse", "sparse push/pull, 2 workers + 2 servers"), ("dense", "allreduce of the table, 2 workers")):
    ms, mb, mem, auc = med[side]
    print(f"| {label} | {ms:.1f} | {mb:.2f} | {mem:.0f} | {auc:.4f} |")
s, d = med["sparse"], med["dense"]
print(f"\nsparse against dense: {d[1] / s[1]:.0f}x fewer bytes per step, {d[0] / s[0]:.1f}x faster per step")
PY
