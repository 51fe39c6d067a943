#!/usr/bin/env bash
# The line rank 0 prints when init_world() has made the world: once per job,
# from rank 0 only, naming the backend, ranks, hosts, the store cohortrun
# serves and the launcher; none with COHORT_BANNER=0; a single process says
# it has no launcher.
#
# Usage: banner_test.sh COHORTRUN RANK_PROGRAM (shm_rank_program)
set -euo pipefail
cohortrun=$1
program=$2
out=$(mktemp -d /tmp/cohort_banner_test.XXXXXX)
trap 'rm -rf "$out"' EXIT

fail() {
  echo "FAILED: $*" >&2
  for f in "$out"/*; do echo "--- $f"; cat "$f"; done >&2
  exit 1
}

"$cohortrun" -np 3 --verbose "$program" collectives >"$out/on.out" 2>"$out/on.err" || fail "the job failed"
store=$(sed -n 's/.*, store at \([0-9.]*:[0-9]*\) .*/\1/p' "$out/on.err")
[[ -n $store ]] || fail "cohortrun --verbose named no store"
expected="[0] cohort: backend shm, 3 ranks on 1 host, store $store, started by cohortrun"
[[ $(grep -c 'cohort: backend' "$out/on.err" "$out/on.out" | awk -F: '{s += $2} END {print s}') == 1 ]] ||
  fail "not exactly one banner"
grep -qxF "$expected" "$out/on.err" || fail "no line '$expected' on stderr"

COHORT_BANNER=0 "$cohortrun" -np 3 "$program" collectives >"$out/off.out" 2>"$out/off.err" ||
  fail "the job failed with COHORT_BANNER=0"
! grep -q 'cohort: backend' "$out/off.out" "$out/off.err" || fail "COHORT_BANNER=0 did not silence it"

env -u COHORT_RANK -u RANK -u OMPI_COMM_WORLD_RANK -u SLURM_PROCID "$program" collectives \
  >"$out/alone.out" 2>"$out/alone.err" || fail "the single process failed"
grep -qxF "cohort: backend shm, 1 rank on 1 host, no store, started by single process (no launcher: cohortrun -np N runs N ranks)" \
  "$out/alone.err" || fail "a single process does not say it runs alone"
echo "PASSED: $expected"
