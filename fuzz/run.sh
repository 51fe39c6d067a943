#!/usr/bin/env bash
# Runs every fuzzer of a COHORT_FUZZ build for SECONDS each, one after the
# other (niced), and prints executions, new corpus inputs and findings per
# harness. Exit 1 when any harness found a crash, a leak, a timeout or ran
# out of memory; the inputs are in BUILD/fuzz/findings/<name>/.
#
#   fuzz/run.sh BUILD SECONDS [NAME...]     (make fuzz FUZZ_SECONDS=N)
#
# Each fuzzer starts from its seed corpus (fuzz/corpus/<name>, never written
# to) and from BUILD/fuzz/work/<name>, where the inputs it finds accumulate
# across runs.
set -euo pipefail

build=${1:?usage: fuzz/run.sh BUILD SECONDS [NAME...]}
seconds=${2:?usage: fuzz/run.sh BUILD SECONDS [NAME...]}
shift 2
here=$(cd "$(dirname "$0")" && pwd)

names=("$@")
if [ ${#names[@]} -eq 0 ]; then
  for bin in "$build"/fuzz/fuzz_*; do
    [ -x "$bin" ] || continue
    case "$bin" in *_replay) continue ;; esac
    names+=("$(basename "$bin" | sed 's/^fuzz_//')")
  done
fi
if [ ${#names[@]} -eq 0 ]; then
  echo "fuzz/run.sh: no fuzzers in $build/fuzz (configure with -DCOHORT_FUZZ=ON and build cohort_fuzzers)" >&2
  exit 2
fi

status=0
printf '%-18s %14s %10s %10s %9s\n' harness executions exec/s "new inputs" findings
for name in "${names[@]}"; do
  work="$build/fuzz/work/$name"
  findings="$build/fuzz/findings/$name"
  log="$build/fuzz/$name.log"
  mkdir -p "$work" "$findings"
  before=$(find "$work" -type f | wc -l)
  rc=0
  # -timeout: one input taking 10 s is a hang; -rss_limit_mb bounds memory.
  nice -n 10 "$build/fuzz/fuzz_$name" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$findings/" "$work" "$here/corpus/$name" >"$log" 2>&1 || rc=$?
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  after=$(find "$work" -type f | wc -l)
  found=$(find "$findings" -type f | wc -l)
  printf '%-18s %14s %10s %10s %9s\n' "$name" "${runs:-?}" "${rate:-?}" "$((after - before))" "$found"
  if [ "$rc" -ne 0 ] || [ "$found" -ne 0 ]; then
    status=1
    echo "  $name: exit $rc; see $log and $findings/" >&2
  fi
done
exit $status
