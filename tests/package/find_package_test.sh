#!/usr/bin/env bash
# Installs this build into a scratch prefix, checks that every installed
# program runs from there, builds tests/package/consumer against the install
# with find_package(cohort) and runs it on 2 ranks under the installed
# cohortrun.
# The sum of rank + 1 over 2 ranks must be 3, and the torch consumer's loader
# must read all 10 rows across the ranks.
# Usage: find_package_test.sh BUILD_DIR WITH_TORCH(0|1) [GENERATOR [CXX_FLAGS [EXE_LINKER_FLAGS]]]
# (the build's own flags, given to the consumer: a sanitizer build's
# libraries need the sanitizer's runtime in the program)
set -euo pipefail
build=$1 with_torch=$2 generator=${3:-Unix Makefiles} cxx_flags=${4:-} linker_flags=${5:-}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

cmake --install "$build" --prefix "$scratch/prefix" >"$scratch/install.log" 2>&1 \
  || { cat "$scratch/install.log"; exit 1; }
# Which headers and docs are installed, and that no public header includes
# an internal one, is tests/layering's check (Layering.headers, .docs).
[[ -f $scratch/prefix/include/cohort/cohort.h ]] || { echo "FAIL: cohort/cohort.h is not installed"; exit 1; }
# Every installed program starts from the install (its libraries are there
# too) and answers --help.
for tool in cohortrun cohort-bench cohort-data cohort-privacy cohort-sim; do
  [[ -x $scratch/prefix/bin/$tool ]] || { echo "FAIL: $tool is not installed in bin/"; exit 1; }
  "$scratch/prefix/bin/$tool" --help >"$scratch/help.txt" 2>&1 \
    || { cat "$scratch/help.txt"; echo "FAIL: installed $tool --help failed"; exit 1; }
done
# cohortrun --check finds the probe installed beside it, of the same build.
[[ $("$scratch/prefix/bin/cohort-probe" --build-id) =~ ^[0-9a-f]{16}$ ]] \
  || { echo "FAIL: installed cohort-probe --build-id"; exit 1; }
out=$("$scratch/prefix/bin/cohortrun" --check -np 2 2>&1) || { echo "$out"; echo "FAIL: installed cohortrun --check"; exit 1; }
[[ $out == *"probe $scratch/prefix/bin/cohort-probe,"* && $out == *"would work"* ]] \
  || { echo "$out"; echo "FAIL: installed cohortrun --check did not use the installed probe"; exit 1; }

cmake -S "$here/consumer" -B "$scratch/consumer" -G "$generator" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$scratch/prefix" "-DCMAKE_CXX_FLAGS=$cxx_flags" "-DCMAKE_EXE_LINKER_FLAGS=$linker_flags" \
  >"$scratch/configure.log" 2>&1 \
  || { cat "$scratch/configure.log"; exit 1; }
cmake --build "$scratch/consumer" -j2 >"$scratch/build.log" 2>&1 || { cat "$scratch/build.log"; exit 1; }

expect_sums() {  # program; leaves its output in out_<program without _consumer>
  local out
  out=$("$scratch/prefix/bin/cohortrun" -np 2 "$scratch/consumer/$1" 2>&1) || { echo "$out"; exit 1; }
  echo "$out"
  printf -v "out_${1%_consumer}" '%s' "$out"
  for r in 0 1; do
    grep -q "rank $r of 2: sum 3\$" <<<"$out" || { echo "FAIL: $1 rank $r did not print sum 3"; exit 1; }
  done
}
expect_sums core_consumer
if [[ $with_torch == 1 ]]; then
  [[ -x $scratch/consumer/torch_consumer ]] || { echo "FAIL: cohort::torch was not found in the install"; exit 1; }
  expect_sums torch_consumer
  grep -q "rows 10 of 10" <<<"$out_torch" || { echo "FAIL: the torch::data loader did not read all rows"; exit 1; }
fi
echo "PASS"
