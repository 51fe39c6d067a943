#!/usr/bin/env bash
# fit() against the hand-written training loop (bench/fit_overhead.cc): the
# same model, data and gradient exchange, one epoch of each per round,
# alternating, on 1 rank (one_device vs a plain loop) and 2 ranks
# (multi_worker:style=horovod vs a loop over DistributedOptimizer).
# Usage: bench/fit_overhead.sh [--build-dir DIR] [--rounds N] [--models "mlp cnn"]
set -euo pipefail
build_dir=build rounds=7 models="mlp cnn"
while [[ $# -gt 0 ]]; do
  case $1 in
    --build-dir) build_dir=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --models) models=$2; shift 2 ;;
    *) echo "fit_overhead.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1
printf '%-6s %5s %12s %12s %8s\n' model ranks hand_ms fit_ms ratio
for m in $models; do
  for n in 1 2; do
    line=$("$build_dir/cohort/launcher/cohortrun" -np "$n" "$build_dir/bench/fit_overhead" --model "$m" \
             --rounds "$rounds" | grep '"bench":"fit_overhead"' | sed 's/^\[[0-9]*\] //')
    python3 -c 'import json,sys; r=json.loads(sys.argv[1]); print("%-6s %5d %12.3f %12.3f %8.4f" % (r["model"], r["ranks"], r["hand_ms"], r["fit_ms"], r["ratio"]))' "$line"
  done
done
