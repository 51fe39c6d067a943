#!/usr/bin/env bash
# The shm multi-process tests, many times, under CPU contention.
#
# Races between ranks show up only when the scheduler delays a process at the
# wrong moment, which a quiet machine rarely does (issue 12's: a rank that
# finished the last collective and exited was taken for a failure by a slower
# rank, once in 1043 tests). This runs shm_test's process tests (real
# processes over a TCP store: collectives on 2, 3, 4 and 8 ranks; killed,
# stopped and departing ranks) --iterations times while a busy loop runs on
# every core, and prints runs, passes and failures, per test and in all.
# Not part of ctest: it takes many minutes and loads every core.
#
# Usage: bench/shm_stress.sh [--build-dir DIR] [--iterations N] [--filter F]
#          [--hogs N] [--timeout S]
#   --iterations  runs of the test program (default 300)
#   --filter      gtest filter (default 'Shm/Processes.*:ProcessFailures.*')
#   --hogs        busy loops (default: one per online CPU)
#   --timeout     seconds one run may take before it counts as hung (300)
#
# Builds shm_test and shm_rank_program (CMake, in the build dir,
# default build/). The log of every failed run stays in DIR/shm_stress/.
# Exit status: 0 when every run passed, 1 otherwise, 2 on bad arguments.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=$repo/build
iterations=300
filter='Shm/Processes.*:ProcessFailures.*'
hogs=$(getconf _NPROCESSORS_ONLN)
run_timeout=300

usage_error() { echo "shm_stress.sh: $* (see the header of bench/shm_stress.sh)" >&2; exit 2; }

while [[ $# -gt 0 ]]; do
  case "$1" in
    --build-dir) build_dir=$(realpath -m "${2:?--build-dir needs a value}"); shift 2 ;;
    --iterations) iterations=${2:?--iterations needs a value}; shift 2 ;;
    --filter) filter=${2:?--filter needs a value}; shift 2 ;;
    --hogs) hogs=${2:?--hogs needs a value}; shift 2 ;;
    --timeout) run_timeout=${2:?--timeout needs a value}; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) usage_error "unknown argument '$1'" ;;
  esac
done
[[ $iterations =~ ^[1-9][0-9]*$ ]] || usage_error "--iterations must be a positive integer, not '$iterations'"
[[ $hogs =~ ^[0-9]+$ ]] || usage_error "--hogs must be a number, not '$hogs'"
[[ $run_timeout =~ ^[1-9][0-9]*$ ]] || usage_error "--timeout must be a positive integer, not '$run_timeout'"

cmake --build "$build_dir" --target shm_test shm_rank_program >/dev/null
program=$build_dir/tests/comm/shm_test
logs=$build_dir/shm_stress
rm -rf "$logs"
mkdir -p "$logs"

hog_pids=()
stop_hogs() { [[ ${#hog_pids[@]} -eq 0 ]] || kill "${hog_pids[@]}" 2>/dev/null || true; }
trap stop_hogs EXIT
trap 'exit 130' INT TERM
for ((h = 0; h < hogs; ++h)); do
  (while :; do :; done) &
  hog_pids+=($!)
done

declare -A passed failed
runs=0 clean=0 bad=0
start=$SECONDS
for ((i = 1; i <= iterations; ++i)); do
  log=$logs/run$i.log
  status=0
  timeout --kill-after=10 "$run_timeout" "$program" --gtest_filter="$filter" --gtest_color=no >"$log" 2>&1 || status=$?
  runs=$((runs + 1))
  while read -r verdict name; do
    if [[ $verdict == OK ]]; then
      passed[$name]=$(( ${passed[$name]:-0} + 1 ))
    else
      failed[$name]=$(( ${failed[$name]:-0} + 1 ))
    fi
  done < <(sed -nE 's/^\[ +(OK|FAILED) +\] ([^ ]+) \([0-9]+ ms\)$/\1 \2/p' "$log")
  if [[ $status -eq 0 ]]; then
    clean=$((clean + 1))
    rm -f "$log"
  else
    bad=$((bad + 1))
    [[ $status -eq 124 || $status -eq 137 ]] && echo "run $i hung (killed after ${run_timeout} s)" >>"$log"
    echo "run $i failed (status $status): $log" >&2
  fi
  if ((i % 10 == 0)); then echo "shm_stress: $i/$iterations runs, $bad failed, $((SECONDS - start)) s" >&2; fi
done
stop_hogs
hog_pids=()

echo
echo "shm_stress: $runs runs of shm_test --gtest_filter='$filter' beside $hogs busy loops on $(getconf _NPROCESSORS_ONLN) CPUs, $((SECONDS - start)) s"
printf '%-60s %7s %7s\n' test passed failed
for name in $(printf '%s\n' "${!passed[@]}" "${!failed[@]}" | sort -u); do
  printf '%-60s %7d %7d\n' "$name" "${passed[$name]:-0}" "${failed[$name]:-0}"
done
echo "runs: $runs, passed: $clean, failed: $bad"
[[ $bad -eq 0 ]]
