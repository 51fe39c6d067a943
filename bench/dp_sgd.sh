#!/usr/bin/env bash
# A DP-SGD step against the non-private step of the same model and batch, and
# against micro-batches of one (bench/dp_sgd.cc: the three interleaved in one
# process, rotating order, medians over rounds). Issue 15's targets: private
# step <= 2x the plain one, >= 10x faster than micro-batches; issue 33's:
# private step <= 2x the plain one on residual_cnn, a model of one's own
# with its layers in cohort::PerSample.
# Usage: bench/dp_sgd.sh [--build-dir DIR] [--rounds N] [--models "mlp cnn tanh_cnn residual_cnn"] [--batch B]
set -euo pipefail
build_dir=build rounds=5 models="mlp cnn tanh_cnn residual_cnn" batch=256
while [[ $# -gt 0 ]]; do
  case $1 in
    --build-dir) build_dir=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --models) models=$2; shift 2 ;;
    --batch) batch=$2; shift 2 ;;
    *) echo "dp_sgd.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
# The benchmarks are not in the default build.
cmake --build "$build_dir" -j 2 --target dp_sgd >/dev/null ||
  { echo "dp_sgd.sh: building dp_sgd in $build_dir failed (run: cmake --build $build_dir --target dp_sgd)" >&2; exit 1; }
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1
# glibc serves blocks above its mmap threshold (128 KiB, raised only after
# such a block is freed) with fresh pages: each per-sample gradient of the
# micro-batch side, and the kernels' large temporaries, then page-faults on
# every step, and which side pays depends on the order of earlier frees (the
# mlp's micro-batch step measured 79 or 388 ms from one run to the next).
# Pinned thresholds serve all three sides from the heap, as a long training
# run (or jemalloc/tcmalloc) would.
export MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=268435456
printf '%-12s %6s %10s %14s %12s %14s %14s %12s\n' model batch plain_ms dp_kernels_ms dp_micro_ms kernels/plain micro/kernels micro/plain
for m in $models; do
  line=$("$build_dir/bench/dp_sgd" --model "$m" --batch "$batch" --rounds "$rounds" | grep '"bench":"dp_sgd"')
  python3 -c 'import json,sys; r=json.loads(sys.argv[1]); print("%-12s %6d %10.2f %14.2f %12.2f %14.3f %14.1f %12.1f" % (r["model"], r["batch"], r["plain_ms"], r["dp_kernels_ms"], r["dp_micro_ms"], r["kernels_over_plain"], r["micro_over_kernels"], r["micro_over_plain"]))' "$line"
done
