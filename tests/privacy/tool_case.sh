#!/bin/sh
# One cohort-privacy case for CTest.
#   tool_case.sh value EXPECTED TOLERANCE -- TOOL ARGS...
#     exit 0, one number on stdout within TOLERANCE of EXPECTED
#   tool_case.sh error EXIT_STATUS -- TOOL ARGS...
#     that exit status, nothing on stdout, exactly one line on stderr
set -u
mode=$1
if [ "$mode" = value ]; then
  expected=$2; tolerance=$3; shift 4
  out=$("$@") || { echo "exit status $?, expected 0" >&2; exit 1; }
  echo "printed: $out"
  awk -v x="$out" -v e="$expected" -v t="$tolerance" \
    'BEGIN { d = x - e; if (d < 0) d = -d; if (x !~ /^[-+0-9.eE]+$/ || d > t) { print "off by " d > "/dev/stderr"; exit 1 } }'
elif [ "$mode" = error ]; then
  status=$2; shift 3
  err=$("$@" 2>&1 >/tmp/cohort_privacy_tool_case_out.$$); rc=$?
  out=$(cat /tmp/cohort_privacy_tool_case_out.$$); rm -f /tmp/cohort_privacy_tool_case_out.$$
  echo "stderr: $err"
  [ "$rc" -eq "$status" ] || { echo "exit status $rc, expected $status" >&2; exit 1; }
  [ -z "$out" ] || { echo "unexpected stdout: $out" >&2; exit 1; }
  [ "$(printf '%s\n' "$err" | wc -l)" -eq 1 ] && [ -n "$err" ] || { echo "stderr is not one line" >&2; exit 1; }
else
  echo "tool_case.sh: unknown mode $mode" >&2; exit 2
fi
