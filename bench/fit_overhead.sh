#!/usr/bin/env bash
# fit() against the hand-written training loop (bench/fit_overhead.cc): the
# same model, data and gradient exchange, one epoch of each per round,
# alternating, on 1 rank (one_device vs a plain loop) and 2 ranks
# (multi_worker:style=horovod vs a loop over DistributedOptimizer); and fit()
# bare (COHORT_TELEMETRY=0) against fit() observed (step accounting and its
# publisher on, a TensorBoard callback with update_freq 100): the column
# "observed" is the paired median of observed / bare.
# Usage: bench/fit_overhead.sh [--build-dir DIR] [--rounds N] [--models "mlp cnn"] [--rows N]
#   --rows   rows per epoch (default 8192, 64 steps; 60000 is a Fashion-MNIST
#            epoch, over which fit()'s per-epoch collectives spread as in use)
set -euo pipefail
build_dir=build rounds=7 models="mlp cnn" rows=8192
while [[ $# -gt 0 ]]; do
  case $1 in
    --build-dir) build_dir=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --models) models=$2; shift 2 ;;
    --rows) rows=$2; shift 2 ;;
    *) echo "fit_overhead.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
# The benchmarks are not in the default build.
cmake --build "$build_dir" -j 2 --target fit_overhead cohortrun >/dev/null ||
  { echo "fit_overhead.sh: building fit_overhead in $build_dir failed (run: cmake --build $build_dir --target fit_overhead cohortrun)" >&2; exit 1; }
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1 COHORT_BANNER=0
# glibc moves its mmap threshold with the history of frees, so whether a
# step's 400 KB input buffer comes from fresh pages (page faults and zeroing:
# 15% of the mlp's profile) depended on which loop ran before: +-8% on one
# process with the same ops on both sides. Pinned, both see one allocator.
export MALLOC_MMAP_THRESHOLD_=268435456 MALLOC_TRIM_THRESHOLD_=1073741824
printf '%-6s %5s %12s %12s %12s %8s %8s %9s\n' model ranks hand_ms fit_ms observed_ms ratio paired observed
for m in $models; do
  for n in 1 2; do
    line=$("$build_dir/cohort/launcher/cohortrun" -np "$n" "$build_dir/bench/fit_overhead" --model "$m" \
             --rounds "$rounds" --rows "$rows" | grep '"bench":"fit_overhead"' | sed 's/^\[[0-9]*\] //')
    python3 -c 'import json,sys; r=json.loads(sys.argv[1]); print("%-6s %5d %12.3f %12.3f %12.3f %8.4f %8.4f %9.4f" % (r["model"], r["ranks"], r["hand_ms"], r["fit_ms"], r["observed_ms"], r["ratio"], r["paired_ratio"], r["observed_paired_ratio"]))' "$line"
  done
done
