#!/usr/bin/env bash
# Installs this build into a scratch prefix, builds tests/package/consumer
# against it with find_package(cohort) and runs it on 2 ranks under the
# installed cohortrun. The sum of rank + 1 over 2 ranks must be 3.
# Usage: find_package_test.sh BUILD_DIR WITH_TORCH(0|1) [GENERATOR]
set -euo pipefail
build=$1 with_torch=$2 generator=${3:-Unix Makefiles}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

cmake --install "$build" --prefix "$scratch/prefix" >"$scratch/install.log" 2>&1 \
  || { cat "$scratch/install.log"; exit 1; }
cmake -S "$here/consumer" -B "$scratch/consumer" -G "$generator" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$scratch/prefix" >"$scratch/configure.log" 2>&1 \
  || { cat "$scratch/configure.log"; exit 1; }
cmake --build "$scratch/consumer" -j2 >"$scratch/build.log" 2>&1 || { cat "$scratch/build.log"; exit 1; }

expect_sums() {  # program
  local out
  out=$("$scratch/prefix/bin/cohortrun" -np 2 "$scratch/consumer/$1" 2>&1) || { echo "$out"; exit 1; }
  echo "$out"
  for r in 0 1; do
    grep -q "rank $r of 2: sum 3\$" <<<"$out" || { echo "FAIL: $1 rank $r did not print sum 3"; exit 1; }
  done
}
expect_sums core_consumer
if [[ $with_torch == 1 ]]; then
  [[ -x $scratch/consumer/torch_consumer ]] || { echo "FAIL: cohort::torch was not found in the install"; exit 1; }
  expect_sums torch_consumer
fi
echo "PASS"
