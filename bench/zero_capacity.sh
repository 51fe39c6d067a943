#!/usr/bin/env bash
# The largest synthetic mlp (width searched, --depth hidden layers) that
# trains under a fixed per-process memory limit (ulimit -v, virtual
# memory, set for every rank), under DDP and under zero:stage=3 (issue 17's
# target: stage 3 >= 3x DDP's parameter count). A width "trains" when two
# steps after one warm-up step finish; the search is a bisection over
# multiples of 128 between --min and --max.
# Usage: bench/zero_capacity.sh [--build-dir DIR] [--ranks N] [--limit-mb MB] [--depth D] [--min W] [--max W]
#                               [--strategies "..."] [--timeout S]
set -euo pipefail
build_dir=build ranks=4 limit_mb=2048 depth=8 min=128 max=16384 time_limit=300
strategies="multi_worker:style=ddp zero:stage=3"
while [[ $# -gt 0 ]]; do
  case $1 in
    --build-dir) build_dir=$2; shift 2 ;;
    --ranks) ranks=$2; shift 2 ;;
    --limit-mb) limit_mb=$2; shift 2 ;;
    --depth) depth=$2; shift 2 ;;
    --min) min=$2; shift 2 ;;
    --max) max=$2; shift 2 ;;
    --strategies) strategies=$2; shift 2 ;;
    --timeout) time_limit=$2; shift 2 ;;
    *) echo "zero_capacity.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1
# A width that does not finish in --timeout seconds does not train either:
# near the limit OpenBLAS retries a failed buffer allocation forever
# instead of failing.
trains() {  # strategy width -> status 0 when it trains under the limit
  (ulimit -v $((limit_mb * 1024))
   timeout --kill-after=10 "$time_limit" \
   "$build_dir/cohort/launcher/cohortrun" -np "$ranks" "$build_dir/examples/synthetic_benchmark" --model mlp \
     --width "$2" --depth "$depth" --strategy "$1" --steps 2 --warmup 1 --quiet --batch-size 16 >/dev/null 2>&1)
}
params() { echo $((784 * $1 + $1 + (depth - 1) * ($1 * $1 + $1) + 10 * $1 + 10)); }
echo "zero_capacity.sh: $ranks ranks, ulimit -v ${limit_mb} MiB per process, mlp depth $depth"
printf '%-24s %10s %14s\n' strategy width parameters
declare -A best
for s in $strategies; do
  lo=$((min / 128)) hi=$((max / 128))  # in units of 128: lo trains (or is the floor), hi+1 does not
  trains "$s" $((lo * 128)) || { printf '%-24s %10s\n' "$s" "none"; continue; }
  while ((lo < hi)); do
    mid=$(((lo + hi + 1) / 2))
    if trains "$s" $((mid * 128)); then lo=$mid; else hi=$((mid - 1)); fi
  done
  best[$s]=$(params $((lo * 128)))
  printf '%-24s %10d %14d\n' "$s" $((lo * 128)) "${best[$s]}"
done
first=${strategies%% *}
for s in $strategies; do
  [[ $s == "$first" || -z ${best[$s]:-} || -z ${best[$first]:-} ]] && continue
  python3 -c "import sys; a = sys.argv; print('%s: %.2fx the parameters of %s' % (a[1], int(a[2]) / int(a[3]), a[4]))" \
    "$s" "${best[$s]}" "${best[$first]}" "$first"
done
