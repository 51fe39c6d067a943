#!/usr/bin/env bash
# Training throughput of the char_lm example (issue 7) on every dp x pp x tp
# mesh of 4 ranks, and on 1 rank, with the loss each reaches.
#
# Usage: bench/char_lm_bench.sh [--build-dir DIR] [--steps N] [--reps N]
#          [--threads N] [--schedule gpipe|1f1b] [--out DIR] [-- char_lm flags...]
#
# Builds char_lm and cohortrun (in the build dir, default build/), then runs
#   cohortrun -np 4 char_lm --dp D --pp P --tp T --steps N ...
# for (D,P,T) in (4,1,1) (2,2,1) (2,1,2) (1,2,2) (1,4,1) (1,1,4), and
# char_lm alone (1 rank), --reps times (default 1) in interleaved order; the
# best tokens/s of each counts. Every run has the same seed and global batch
# (char_lm's --batch-size is global), so each mesh trains the same model and
# its losses should match the 1-rank run's up to float32 rounding. Flags after
# `--` go to every char_lm run (e.g. -- --d-model 128 --layers 8).
# Prints per mesh: tokens/s (steps 2..N), the ratio to 1 rank, the loss at
# step 1 and step N and the difference from the 1-rank run's step-N loss.
# Each run's output is kept in --out (default DIR/bench/results/char_lm).
# Exit status: 0 when every run succeeded, 1 otherwise, 2 on bad arguments.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=$repo/build
steps=60
reps=1
threads=1
schedule=1f1b
out_dir=
extra=()

die() { echo "char_lm_bench.sh: $*" >&2; exit 1; }
usage_error() { echo "char_lm_bench.sh: $* (see --help)" >&2; exit 2; }

while [[ $# -gt 0 ]]; do
  case "$1" in
    --build-dir) build_dir=$(realpath -m "${2:?--build-dir needs a value}"); shift 2 ;;
    --steps) steps=${2:?--steps needs a value}; shift 2 ;;
    --reps) reps=${2:?--reps needs a value}; shift 2 ;;
    --threads) threads=${2:?--threads needs a value}; shift 2 ;;
    --schedule) schedule=${2:?--schedule needs a value}; shift 2 ;;
    --out) out_dir=$(realpath -m "${2:?--out needs a value}"); shift 2 ;;
    --) shift; extra=("$@"); break ;;
    -h|--help) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) usage_error "unknown argument '$1'" ;;
  esac
done
for v in "$steps" "$reps" "$threads"; do
  [[ $v =~ ^[1-9][0-9]*$ ]] || usage_error "expected a positive integer, got '$v'"
done
[[ $schedule == gpipe || $schedule == 1f1b ]] || usage_error "--schedule takes gpipe or 1f1b, got '$schedule'"
out_dir=${out_dir:-$build_dir/bench/results/char_lm}
mkdir -p "$out_dir"

for tool in cmake ninja; do
  command -v "$tool" >/dev/null 2>&1 || die "$tool not found; run scripts/bootstrap.sh first"
done
if [[ ! -f $build_dir/build.ninja ]]; then
  cmake -S "$repo" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCOHORT_WITH_TORCH=ON >/dev/null \
    || die "cmake configure of $build_dir failed"
fi
cmake --build "$build_dir" --target char_lm cohortrun -- -j2 >/dev/null \
  || die "building char_lm failed (is LibTorch installed? scripts/bootstrap.sh)"
program=$build_dir/examples/char_lm
cohortrun=$build_dir/cohort/launcher/cohortrun

meshes=("1 1 1" "4 1 1" "2 2 1" "2 1 2" "1 2 2" "1 4 1" "1 1 4")
declare -A best first last
status=0
for ((rep = 1; rep <= reps; ++rep)); do
  for mesh in "${meshes[@]}"; do
    read -r dp pp tp <<<"$mesh"
    key="$dp $pp $tp"
    log=$out_dir/dp${dp}_pp${pp}_tp${tp}_rep${rep}.log
    flags=(--dp "$dp" --pp "$pp" --tp "$tp" --steps "$steps" --schedule "$schedule" --threads "$threads"
           --log-every "$steps" "${extra[@]}")
    if [[ $key == "1 1 1" ]]; then
      cmd=("$program" "${flags[@]}")
    else
      cmd=("$cohortrun" -np 4 "$program" "${flags[@]}")
    fi
    if ! OMP_NUM_THREADS=$threads "${cmd[@]}" >"$log" 2>&1; then
      echo "char_lm_bench.sh: dp $dp x pp $pp x tp $tp failed (see $log)" >&2
      status=1
      continue
    fi
    summary=$(grep -o 'loss [0-9.]* -> [0-9.]*, [0-9]* tokens/s' "$log" | tail -1)
    [[ -n $summary ]] || { echo "char_lm_bench.sh: no summary in $log" >&2; status=1; continue; }
    read -r _ l0 _ l1 rate _ <<<"${summary//,/}"
    first[$key]=$l0
    last[$key]=$l1
    if [[ -z ${best[$key]:-} ]] || ((rate > best[$key])); then best[$key]=$rate; fi
  done
done

cores=$(nproc)
echo "char_lm: $steps steps, schedule $schedule, $threads thread(s) per rank, $cores cores; best of $reps"
row() { printf '| %-19s | %10s | %9s | %11s | %12s | %14s |\n' "$@"; }
row "mesh (dp x pp x tp)" "tokens/s" "vs 1 rank" "loss step 1" "loss step $steps" "vs 1-rank loss"
row "---" "---" "---" "---" "---" "---"
base=${best["1 1 1"]:-}
for mesh in "${meshes[@]}"; do
  read -r dp pp tp <<<"$mesh"
  key="$dp $pp $tp"
  [[ -n ${best[$key]:-} ]] || { row "$dp x $pp x $tp" "failed" "" "" "" ""; continue; }
  ratio=$(awk -v a="${best[$key]}" -v b="${base:-0}" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }')
  diff=$(awk -v a="${last[$key]}" -v b="${last["1 1 1"]:-}" 'BEGIN { if (b != "") printf "%+.6f", a - b; else print "-" }')
  row "$dp x $pp x $tp" "${best[$key]}" "$ratio" "${first[$key]}" "${last[$key]}" "$diff"
done
exit $status
