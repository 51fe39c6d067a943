#!/usr/bin/env bash
# check_topology.sh: does the topology `cohortrun --check --check-topology`
# writes predict the allreduce measured on the same links? (issue 35)
#
# Usage: sudo bench/check_topology.sh [--build-dir DIR] [--links "1gbit:0.1ms 100mbit:1ms"]
#
# For each link setting (RATE:DELAY, scripts/cluster.sh's --link and
# --delay) it runs tests/cluster's check_accuracy: a fresh 2-host emulated
# cluster, 2 ranks per
# host; `cohortrun --check --check-topology` on it; then cohort-bench
# allreduce (64K..4M, the launch's default backend, hierarchical) on the
# same cluster; cohort-sim's allreduce cost on the written topology against
# each measured size. Prints one line per size and setting:
#   link delay bytes predicted_s measured_s predicted/measured
# and exits 1 when a prediction from 1 MiB up is off by more than 15%
# (below, the cost model's small-message paths are not that close) or a
# setting printed no comparison; 2 without root (the emulated hosts need it).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=$repo/build
links="1gbit:0.1ms 100mbit:1ms"
while (( $# )); do
  case $1 in
    --build-dir) build_dir=$(realpath -m "${2:?--build-dir needs a value}"); shift 2 ;;
    --links) links=$2; shift 2 ;;
    *) echo "check_topology.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
# check_accuracy skips (and exits 0) without root: refuse instead.
[[ $(id -u) == 0 ]] || { echo "check_topology.sh: emulated hosts need root" >&2; exit 2; }
cmake --build "$build_dir" -j 2 --target check_accuracy cohortrun cohort-probe cohort-bench >/dev/null
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1
status=0
printf '%-8s %-6s %9s %12s %12s %8s\n' link delay bytes predicted_s measured_s ratio
for setting in $links; do
  out=$(COHORT_CHECK_LINK=${setting%%:*} COHORT_CHECK_DELAY=${setting#*:} \
        "$build_dir/tests/cluster/check_accuracy" 2>&1) || status=1
  grep '^check-accuracy ' <<<"$out" | sed -E 's/[a-z_]+=//g' |
    awk '{printf "%-8s %-6s %9d %12.6f %12.6f %8.3f\n", $2, $3, $4, $5, $6, $7}'
  if ! grep -q '^check-accuracy ' <<<"$out"; then
    echo "$out" | tail -20 >&2
    status=1
  fi
done
exit $status
