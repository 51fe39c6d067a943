#!/usr/bin/env bash
# Checks that the C++ lines a change touches are formatted as .clang-format
# says (clang-format-14 through git clang-format); lines the change does not
# touch are left alone, so the tree is never reformatted as a whole.
#
# Usage: scripts/check_format.sh [BASE]
#   BASE  the commit the change starts from. Default: $FORMAT_BASE, else the
#         merge base with main (origin/main, then main) when HEAD is not on
#         main, else HEAD~1 (the last commit, as on main itself). Uncommitted
#         changes to tracked files count as part of the change.
# Exit status: 0 formatted; 1 with the diff that would format it (apply it
# with `git clang-format BASE`); 2 when the check cannot run.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

binary=$(command -v clang-format-14 || command -v clang-format || true)
if [[ -z $binary ]] || ! command -v git-clang-format >/dev/null 2>&1; then
  echo "check_format.sh: clang-format is not installed (scripts/bootstrap.sh --with-format)" >&2
  exit 2
fi
if ! git rev-parse --verify -q HEAD >/dev/null; then
  echo "check_format.sh: not a git checkout with a commit; there is no change to check" >&2
  exit 2
fi

base=${1:-${FORMAT_BASE:-}}
if [[ -z $base ]]; then
  for main in origin/main main; do
    if git rev-parse --verify -q "$main" >/dev/null; then
      base=$(git merge-base HEAD "$main")
      break
    fi
  done
  if [[ -z $base || $base == $(git rev-parse HEAD) ]]; then
    base=$(git rev-parse --verify -q HEAD~1 || true)
  fi
fi
if [[ -z $base ]]; then
  echo "check_format.sh: no base commit to compare with (a single-commit history); give one" >&2
  exit 2
fi

echo "check_format.sh: C++ lines changed since $(git rev-parse --short "$base")"
# git clang-format 14 exits 0 whether or not it prints a diff.
output=$(git clang-format --binary "$binary" --extensions c,cc,cpp,h,hpp,inc --diff "$base" -- 2>&1) || {
  echo "$output"
  echo "check_format.sh: git clang-format failed" >&2
  exit 2
}
if grep -q '^diff --git' <<<"$output"; then
  echo "$output"
  echo "check_format.sh: the lines above are not formatted; run: git clang-format $(git rev-parse --short "$base")" >&2
  exit 1
fi
echo "check_format.sh: formatted ($output)"
