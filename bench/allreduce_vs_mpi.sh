#!/usr/bin/env bash
# cohort's shm allreduce against OpenMPI's MPI_Allreduce, side by side.
#
# Usage: bench/allreduce_vs_mpi.sh [--build-dir DIR] [--ranks "2 4"] [--reps N]
#          [--min-bytes B] [--max-bytes B] [--seconds S] [--out DIR]
#
# Builds cohort-bench and cohortrun (CMake, in the build dir, default build/)
# and bench/mpi_allreduce_bench.c (mpicc, into DIR/bench/), then for each world
# size runs `cohortrun -np N cohort-bench allreduce` and
# `mpirun -np N mpi_allreduce_bench` alternately, --reps times each (default
# 2), float32 sum over the same sweep with the same method (see the header of
# mpi_allreduce_bench.c). Per size the best (lowest) time of the reps counts,
# for both programs alike. Prints one table per world size: time in µs and
# busbw in GB/s of each, and ratio = cohort busbw / MPI busbw (> 1: cohort
# faster), then the targets of issue 2. The raw CSV of every run is kept in
# --out (default DIR/bench/results). Exit status: 0 when every run succeeded
# and checked correct (whether or not targets are met), 1 otherwise, 2 on bad
# arguments.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=$repo/build
ranks="2 4"
reps=2
min_bytes=8
max_bytes=256M
seconds=0.15
out_dir=

die() { echo "allreduce_vs_mpi.sh: $*" >&2; exit 1; }
usage_error() { echo "allreduce_vs_mpi.sh: $* (see --help)" >&2; exit 2; }

while [[ $# -gt 0 ]]; do
  case "$1" in
    --build-dir) build_dir=$(realpath -m "${2:?--build-dir needs a value}"); shift 2 ;;
    --ranks) ranks=${2:?--ranks needs a value}; shift 2 ;;
    --reps) reps=${2:?--reps needs a value}; shift 2 ;;
    --min-bytes) min_bytes=${2:?--min-bytes needs a value}; shift 2 ;;
    --max-bytes) max_bytes=${2:?--max-bytes needs a value}; shift 2 ;;
    --seconds) seconds=${2:?--seconds needs a value}; shift 2 ;;
    --out) out_dir=$(realpath -m "${2:?--out needs a value}"); shift 2 ;;
    -h|--help) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) usage_error "unknown argument '$1'" ;;
  esac
done
[[ $reps =~ ^[1-9][0-9]*$ ]] || usage_error "--reps expects a positive integer, got '$reps'"
for n in $ranks; do
  [[ $n =~ ^[1-9][0-9]*$ ]] || usage_error "--ranks expects positive integers, got '$n'"
done
out_dir=${out_dir:-$build_dir/bench/results}

for tool in cmake ninja mpicc mpirun python3; do
  command -v "$tool" >/dev/null 2>&1 || die "$tool not found; run scripts/bootstrap.sh first"
done

# --- build ------------------------------------------------------------------
if [[ ! -f $build_dir/build.ninja ]]; then
  cmake -S "$repo" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null \
    || die "cmake configure of $build_dir failed"
fi
cmake --build "$build_dir" -j 2 --target cohort-bench cohortrun >/dev/null \
  || die "building cohort-bench and cohortrun in $build_dir failed (run: cmake --build $build_dir --target cohort-bench cohortrun)"
cohortrun=$build_dir/cohort/launcher/cohortrun
cohort_bench=$build_dir/tools/cohort-bench
[[ -x $cohortrun ]] || die "$cohortrun was not built"
[[ -x $cohort_bench ]] || die "$cohort_bench was not built"

mkdir -p "$build_dir/bench" "$out_dir"
mpi_bench=$build_dir/bench/mpi_allreduce_bench
if [[ ! -x $mpi_bench || $repo/bench/mpi_allreduce_bench.c -nt $mpi_bench ]]; then
  mpicc -O2 -std=c11 -D_POSIX_C_SOURCE=200809L -D_ISOC11_SOURCE -Wall -Wextra \
    -o "$mpi_bench" "$repo/bench/mpi_allreduce_bench.c" || die "mpicc failed on bench/mpi_allreduce_bench.c"
fi

# --- run --------------------------------------------------------------------
# OpenMPI refuses root without --allow-run-as-root, and more ranks than
# cores without --oversubscribe; no binding, as cohortrun does not bind.
mpirun_flags=(--oversubscribe --bind-to none)
[[ $(id -u) -eq 0 ]] && mpirun_flags+=(--allow-run-as-root)
sweep=(--min-bytes "$min_bytes" --max-bytes "$max_bytes" --seconds "$seconds" --csv)

# run NAME LOG CMD...: the command's stdout goes to $out_dir/NAME.csv, its
# stderr to LOG; on failure both are shown.
run() {
  local name=$1; shift
  local csv=$out_dir/$name.csv log=$out_dir/$name.log
  if ! "$@" >"$csv" 2>"$log"; then
    echo "allreduce_vs_mpi.sh: $name failed: $*" >&2
    tail -n 20 "$csv" "$log" >&2
    exit 1
  fi
}

echo "# allreduce, float32 sum: cohort (cohortrun + cohort-bench, shm) vs OpenMPI $(mpirun --version 2>/dev/null | head -n1 | grep -o '[0-9][0-9.]*' || echo '?') (mpirun + MPI_Allreduce)"
echo "# $(nproc) cores, $(date -u '+%Y-%m-%d %H:%M UTC'), sizes $min_bytes..$max_bytes, best of $reps alternating runs each"
for n in $ranks; do
  for ((rep = 1; rep <= reps; ++rep)); do
    echo "# np $n, rep $rep/$reps ..." >&2
    # Alternate which goes first so neither always runs on a warmer machine.
    if (( rep % 2 == 1 )); then
      run "cohort_np${n}_rep${rep}" "$cohortrun" -np "$n" "$cohort_bench" allreduce --dtype f32 --op sum "${sweep[@]}"
      run "mpi_np${n}_rep${rep}" mpirun "${mpirun_flags[@]}" -np "$n" "$mpi_bench" "${sweep[@]}"
    else
      run "mpi_np${n}_rep${rep}" mpirun "${mpirun_flags[@]}" -np "$n" "$mpi_bench" "${sweep[@]}"
      run "cohort_np${n}_rep${rep}" "$cohortrun" -np "$n" "$cohort_bench" allreduce --dtype f32 --op sum "${sweep[@]}"
    fi
  done
done

# --- report -----------------------------------------------------------------
python3 - "$out_dir" "$reps" $ranks <<'EOF'
import csv, re, sys

out_dir, reps, ranks = sys.argv[1], int(sys.argv[2]), [int(n) for n in sys.argv[3:]]
prefix = re.compile(r"^\[\d+\]\s?")  # cohortrun's "[rank] " line prefix

def load(path):
    """size -> (time_us, busbw, wrong) from one run's CSV, prefixes stripped."""
    rows = {}
    with open(path) as f:
        lines = [prefix.sub("", line) for line in f]
    lines = [l for l in lines if l.startswith("collective,") or l.startswith("allreduce,")]
    for r in csv.DictReader(lines):
        rows[int(r["size_bytes"])] = (float(r["time_us"]), float(r["busbw_gbps"]), int(r["wrong"] or 0))
    if not rows:
        sys.exit(f"allreduce_vs_mpi.sh: no results in {path}")
    return rows

def best(tool, n):
    """Per size, the rep with the lowest time; wrong elements summed over reps."""
    merged = {}
    for rep in range(1, reps + 1):
        for size, (t, bw, wrong) in load(f"{out_dir}/{tool}_np{n}_rep{rep}.csv").items():
            if size not in merged:
                merged[size] = (t, bw, wrong)
            else:
                pt, pbw, pw = merged[size]
                merged[size] = (t, bw, pw + wrong) if t < pt else (pt, pbw, pw + wrong)
    return merged

def human(size):
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if size >= 1 << shift and size % (1 << shift) == 0:
            return f"{size >> shift} {unit}"
    return f"{size} B"

results = {}
any_wrong = False
for n in ranks:
    cohort, mpi = best("cohort", n), best("mpi", n)
    results[n] = (cohort, mpi)
    print(f"\n## {n} ranks")
    print(f"| {'size':>9} | {'cohort µs':>11} | {'MPI µs':>11} | {'cohort busbw':>12} | {'MPI busbw':>10} | {'ratio':>6} |")
    print(f"|{'-'*11}|{'-'*13}|{'-'*13}|{'-'*14}|{'-'*12}|{'-'*8}|")
    for size in sorted(set(cohort) & set(mpi)):
        ct, cbw, cw = cohort[size]
        mt, mbw, mw = mpi[size]
        any_wrong |= bool(cw or mw)
        # At one rank busbw is 0 by definition; compare times instead.
        ratio = cbw / mbw if mbw > 0 else (mt / ct if ct > 0 else float("nan"))
        flag = "" if not (cw or mw) else f"  WRONG cohort {cw} mpi {mw}"
        print(f"| {human(size):>9} | {ct:11.2f} | {mt:11.2f} | {cbw:12.3f} | {mbw:10.3f} | {ratio:6.2f} |{flag}")

def target(desc, n, size, ok_fn, show):
    if n not in results or size not in results[n][0] or size not in results[n][1]:
        print(f"- {desc}: not measured")
        return
    c, m = results[n][0][size], results[n][1][size]
    print(f"- {desc}: {show(c, m)} -> {'MET' if ok_fn(c, m) else 'MISSED'}")

print("\n## Targets (issue 2)")
target("64 MiB, 2 ranks, cohort busbw >= 3x MPI", 2, 64 << 20,
       lambda c, m: c[1] >= 3 * m[1], lambda c, m: f"{c[1]:.3f} vs {m[1]:.3f} GB/s = {c[1] / m[1]:.2f}x")
target("1 MiB, 2 ranks, cohort busbw >= 1x MPI", 2, 1 << 20,
       lambda c, m: c[1] >= m[1], lambda c, m: f"{c[1]:.3f} vs {m[1]:.3f} GB/s = {c[1] / m[1]:.2f}x")
target("8 B, 4 ranks, cohort latency <= MPI", 4, 8,
       lambda c, m: c[0] <= m[0], lambda c, m: f"{c[0]:.2f} vs {m[0]:.2f} µs = {c[0] / m[0]:.2f}x")
target("8 B, 2 ranks, cohort latency <= 5x MPI", 2, 8,
       lambda c, m: c[0] <= 5 * m[0], lambda c, m: f"{c[0]:.2f} vs {m[0]:.2f} µs = {c[0] / m[0]:.2f}x")
if any_wrong:
    sys.exit("allreduce_vs_mpi.sh: some results were wrong (see WRONG above)")
EOF
echo "# raw CSV and logs: $out_dir"
