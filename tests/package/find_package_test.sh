#!/usr/bin/env bash
# Installs this build into a scratch prefix, checks that every installed
# header includes only installed headers (no public header reaches an
# internal one), builds tests/package/consumer against the install with
# find_package(cohort) and runs it on 2 ranks under the installed cohortrun.
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
# Every "cohort/..." a public header includes must be installed too.
include_dir="$scratch/prefix/include"
[[ -f $include_dir/cohort/cohort.h ]] || { echo "FAIL: cohort/cohort.h is not installed"; exit 1; }
# Without LibTorch (no cohort/torch installed), <cohort/cohort.h>'s block
# under COHORT_HAVE_TORCH is not compiled, so its includes are not checked.
if [[ -d $include_dir/cohort/torch ]]; then
  includes_of() { sed -n 's/^#include [<"]\(cohort\/[^">]*\)[">].*/\1/p' "$1"; }
else
  includes_of() {
    sed '/^#if defined(COHORT_HAVE_TORCH)/,/^#endif/d' "$1" | sed -n 's/^#include [<"]\(cohort\/[^">]*\)[">].*/\1/p'
  }
fi
missing=0
while IFS= read -r header; do
  while IFS= read -r included; do
    if [[ ! -f $include_dir/$included ]]; then
      echo "FAIL: ${header#"$include_dir"/} includes $included, which is not installed (internal)"
      missing=1
    fi
  done < <(includes_of "$header")
done < <(find "$include_dir/cohort" -type f -name '*.h')
[[ $missing == 0 ]] || exit 1
for internal in cohort/comm/shm/segment.h cohort/engine/negotiation.h cohort/rendezvous/wire.h; do
  [[ ! -e $include_dir/$internal ]] || { echo "FAIL: internal header $internal was installed"; exit 1; }
done

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
