#!/usr/bin/env bash
# The same fashion_mnist source under every strategy and launcher, on the real
# Fashion-MNIST data (Debian's dataset-fashion-mnist): 2 epochs of the cnn,
# global batch 128, and nothing changed between runs but the --strategy flag
# and the launcher. Prints a table of final test accuracy and wall time.
#
#   one_device                 fashion_mnist --strategy one_device
#   mirrored:replicas=2        fashion_mnist --strategy mirrored:replicas=2
#   multi_worker, cohortrun    cohortrun -np 2 fashion_mnist --strategy multi_worker
#   multi_worker, mpirun       mpirun -np 2 fashion_mnist --strategy multi_worker
#   multi_worker, 2 hosts      cohortrun -H <h0>:1,<h1>:1 (scripts/cluster.sh, network namespaces)
#
# Usage: bench/fit_strategies.sh [--build-dir DIR] [--epochs N] [--skip-hosts]
# Needs root for the emulated hosts (--skip-hosts leaves that row out).
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=build epochs=2 skip_hosts=0
while [[ $# -gt 0 ]]; do
  case $1 in
    --build-dir) build_dir=$2; shift 2 ;;
    --epochs) epochs=$2; shift 2 ;;
    --skip-hosts) skip_hosts=1; shift ;;
    *) echo "fit_strategies.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
build_dir=$(cd "$build_dir" && pwd)
program=$build_dir/examples/fashion_mnist cohortrun=$build_dir/cohort/launcher/cohortrun
# One thread per process and two processes (or two replicas) per run: the
# 2-core machine's cores, split the same way for every row.
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1
flags=(--epochs "$epochs" --model cnn --batch-size 128 --progress none)
out=$(mktemp -d)
prefix=
cleanup() { [[ -z $prefix ]] || "$repo/scripts/cluster.sh" down --prefix "$prefix" >/dev/null 2>&1 || true; rm -rf "$out"; }
trap cleanup EXIT

row() {  # label command...
  local label=$1; shift
  local start end acc
  start=$(date +%s.%N)
  "$@" >"$out/log" 2>&1 || { echo "fit_strategies.sh: '$label' failed:"; cat "$out/log"; exit 1; }
  end=$(date +%s.%N)
  acc=$(sed -n 's/.*final test accuracy \([0-9.]*\)%.*/\1/p' "$out/log" | head -1)
  printf '%-34s %8s%% %8.1f s\n' "$label" "$acc" "$(echo "$end - $start" | bc)"
}

printf '%-34s %9s %10s\n' "strategy, launcher" accuracy wall
row "one_device" "$program" --strategy one_device --threads 2 "${flags[@]}"
row "mirrored:replicas=2" "$program" --strategy mirrored:replicas=2 "${flags[@]}"
row "multi_worker, cohortrun -np 2" "$cohortrun" -np 2 "$program" --strategy multi_worker "${flags[@]}"
row "multi_worker, mpirun -np 2" mpirun --allow-run-as-root --oversubscribe -np 2 \
  -x OMP_NUM_THREADS -x OPENBLAS_NUM_THREADS -x MKL_NUM_THREADS "$program" --strategy multi_worker "${flags[@]}"
if [[ $skip_hosts == 0 ]]; then
  info=$("$repo/scripts/cluster.sh" up --hosts 2 --link 1gbit --owner $$)
  prefix=$(sed -n 's/^prefix=//p' <<<"$info")
  bridge=$(sed -n 's/^bridge=[^ ]* //p' <<<"$info")
  row "multi_worker, 2 emulated hosts" "$cohortrun" -H "$prefix-h0:1,$prefix-h1:1" \
    --launch-template 'ip netns exec {host}' --store-addr "$bridge" "$program" --strategy multi_worker "${flags[@]}"
fi
