#!/usr/bin/env bash
# Accuracy of data-parallel training against one rank (issue 4's target):
# fashion_mnist's cnn on 2 ranks with per-rank batch B/2 against 1 rank with
# batch B, same learning rate (no scaling: the global batch is the same), same
# epochs, same seed, for several seeds.
#
# Usage: bench/fashion_mnist_accuracy.sh [--build-dir DIR] [--seeds "42 1 2 3"]
#          [--epochs N] [--model cnn|mlp] [--global-batch B] [--lr X] [--out DIR]
#
# With the same seed both runs start from the same weights and, through
# DistributedSampler's round-robin shards, train on the same global batches;
# they differ only in float32 summation order (and in the threads: 1 rank
# uses 2 threads, each of the 2 ranks 1). Prints both final test accuracies
# per seed, the difference, and the target: |2-rank - 1-rank| <= 0.5 points
# on every seed, MET or MISSED. Logs stay in --out (default
# DIR/bench/results). Exit status: 0 when every run succeeded (target met or
# not), 1 otherwise, 2 on bad arguments.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=$repo/build
seeds="42 1 2 3"
epochs=2
model=cnn
global_batch=128
lr=0.02
out_dir=

die() { echo "fashion_mnist_accuracy.sh: $*" >&2; exit 1; }
usage_error() { echo "fashion_mnist_accuracy.sh: $* (see --help)" >&2; exit 2; }

while [[ $# -gt 0 ]]; do
  case "$1" in
    --build-dir) build_dir=$(realpath -m "${2:?--build-dir needs a value}"); shift 2 ;;
    --seeds) seeds=${2:?--seeds needs a value}; shift 2 ;;
    --epochs) epochs=${2:?--epochs needs a value}; shift 2 ;;
    --model) model=${2:?--model needs a value}; shift 2 ;;
    --global-batch) global_batch=${2:?--global-batch needs a value}; shift 2 ;;
    --lr) lr=${2:?--lr needs a value}; shift 2 ;;
    --out) out_dir=$(realpath -m "${2:?--out needs a value}"); shift 2 ;;
    -h|--help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) usage_error "unknown argument '$1'" ;;
  esac
done
for v in "$epochs" "$global_batch" $seeds; do
  [[ $v =~ ^[0-9]+$ ]] || usage_error "expected a non-negative integer, got '$v'"
done
((global_batch % 2 == 0)) || usage_error "--global-batch must be even (it is split over 2 ranks)"
[[ $model == mlp || $model == cnn ]] || usage_error "--model takes mlp or cnn, got '$model'"
out_dir=${out_dir:-$build_dir/bench/results}

if [[ ! -f $build_dir/build.ninja ]]; then
  cmake -S "$repo" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null \
    || die "cmake configure of $build_dir failed"
fi
cmake --build "$build_dir" --target fashion_mnist cohortrun >/dev/null \
  || die "building fashion_mnist failed (is LibTorch installed? scripts/bootstrap.sh)"
mkdir -p "$out_dir"

accuracy() {  # ranks threads batch seed -> prints the final accuracy
  local log=$out_dir/fashion_mnist_accuracy_${model}_$1ranks_seed$4.log
  "$build_dir/cohort/launcher/cohortrun" -np "$1" "$build_dir/examples/fashion_mnist" --model "$model" \
      --epochs "$epochs" --batch-size "$3" --lr "$lr" --lr-scaling none --threads "$2" --seed "$4" \
      --progress none >"$log" 2>&1 || die "run failed: $1 rank(s), seed $4 (see $log)"
  sed -n 's/.*final test accuracy \([0-9.]*\)%.*/\1/p' "$log" | tail -n1
}

printf '%s %s epochs, global batch %s, lr %s\n' "$model" "$epochs" "$global_batch" "$lr"
printf '%6s %10s %10s %8s\n' seed "1 rank %" "2 ranks %" diff
worst=0
for seed in $seeds; do
  one=$(accuracy 1 2 "$global_batch" "$seed")
  two=$(accuracy 2 1 $((global_batch / 2)) "$seed")
  [[ -n $one && -n $two ]] || die "no final accuracy for seed $seed"
  diff=$(python3 -c "print(f'{$two - $one:+.2f}')")
  worst=$(python3 -c "print(max($worst, abs($two - $one)))")
  printf '%6s %10s %10s %8s\n' "$seed" "$one" "$two" "$diff"
done
if python3 -c "import sys; sys.exit(0 if $worst <= 0.5 else 1)"; then verdict=MET; else verdict=MISSED; fi
printf 'target |2 ranks - 1 rank| <= 0.5 points: %s (worst %.2f)\n' "$verdict" "$worst"
