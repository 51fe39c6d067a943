#!/usr/bin/env bash
# autotune_bench.sh: the engine's autotuner (COHORT_AUTOTUNE) against a full
# sweep of fixed settings, on real training runs (issue 19).
#
# Usage: bench/autotune_bench.sh [--build-dir DIR] [--ranks N] [--reps N] [--models "mlp cnn"] [--out DIR]
#          [--batch-size N] [--steps N] [--confirm N] [--no-build]
#
# --batch-size: rows per rank (default 64; smaller makes communication a
# larger share of the step); --steps: timed steps of each fixed setting
# (default 10, after 3 warm-up); --no-build uses the programs already in DIR.
#
# For each model (synthetic_benchmark, --mode horovod, one thread per rank):
#   - sweep: every fixed (COHORT_FUSION_THRESHOLD, COHORT_CYCLE_TIME_US) of the
#     autotuner's grid (7 x 4), --reps times, interleaved; the median step time
#     of each setting;
#   - autotune: COHORT_AUTOTUNE=1 runs of 60 steps (the tuner needs under 50),
#     --reps times, interleaved with the sweep; from COHORT_AUTOTUNE_LOG, the
#     step it converged at and the setting it kept.
#   - confirm (--confirm N > 0): the sweep's best is the least of 28 noisy
#     medians, so it is biased low (the winner's curse); the settings the
#     tuner kept and the sweep's best are measured again, N times each,
#     interleaved, and compared on those medians alone.
# Prints the sweep table, the best setting, and for each autotune run the
# kept setting's sweep time over the best's (target: <= 1.05), the steps it
# took (target: < 50) and, with --confirm, the ratio re-measured. Logs in
# --out (default DIR/bench/results/autotune).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=$repo/build
ranks=2
reps=2
models="mlp cnn"
batch=64
steps=10
confirm=0
out_dir=
build=1
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build-dir) build_dir=$(realpath -m "${2:?--build-dir needs a value}"); shift 2 ;;
    --ranks) ranks=${2:?--ranks needs a value}; shift 2 ;;
    --reps) reps=${2:?--reps needs a value}; shift 2 ;;
    --models) models=${2:?--models needs a value}; shift 2 ;;
    --batch-size) batch=${2:?--batch-size needs a value}; shift 2 ;;
    --steps) steps=${2:?--steps needs a value}; shift 2 ;;
    --confirm) confirm=${2:?--confirm needs a value}; shift 2 ;;
    --out) out_dir=$(realpath -m "${2:?--out needs a value}"); shift 2 ;;
    --no-build) build=0; shift ;;
    -h|--help) sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "autotune_bench.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[[ $confirm =~ ^[0-9]+$ ]] || { echo "autotune_bench.sh: --confirm expects a count, got '$confirm'" >&2; exit 2; }
for v in "$ranks" "$reps" "$batch" "$steps"; do [[ $v =~ ^[1-9][0-9]*$ ]] || { echo "autotune_bench.sh: expected a positive integer, got '$v'" >&2; exit 2; }; done
out_dir=${out_dir:-$build_dir/bench/results/autotune}
mkdir -p "$out_dir"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1
if (( build )); then
  cmake --build "$build_dir" -j 2 --target cohortrun synthetic_benchmark >/dev/null ||
    { echo "autotune_bench.sh: build failed in $build_dir (LibTorch needed)" >&2; exit 1; }
fi
run=$build_dir/cohort/launcher/cohortrun
synthetic=$build_dir/examples/synthetic_benchmark
for p in "$run" "$synthetic"; do
  [[ -x $p ]] || { echo "autotune_bench.sh: $p is missing (build it, or drop --no-build)" >&2; exit 1; }
done
thresholds=(0 65536 262144 1048576 4194304 16777216 67108864)
cycles=(0 250 1000 4000)
failed=0

# One fixed-setting run: fixed_run MODEL THRESHOLD CYCLE TAG.
fixed_run() {
  if ! COHORT_FUSION_THRESHOLD=$2 COHORT_CYCLE_TIME_US=$3 timeout 900 "$run" -np "$ranks" "$synthetic" \
       --model "$1" --mode horovod --steps "$steps" --warmup 3 --threads 1 --batch-size "$batch" --quiet \
       >"$out_dir/$4.log" 2>&1; then
    echo "autotune_bench.sh: $4 failed" >&2
    failed=1
  fi
}

for (( rep = 1; rep <= reps; rep++ )); do
  echo "# rep $rep/$reps: load average $(cut -d' ' -f1-3 /proc/loadavg)"
  for m in $models; do
    jobs=()
    for t in "${thresholds[@]}"; do for c in "${cycles[@]}"; do jobs+=("fixed:$t:$c"); done; done
    jobs+=(autotune autotune)
    n=${#jobs[@]}
    for (( k = 0; k < n; k++ )); do
      j=${jobs[$(( (k + rep * 5) % n ))]}
      if [[ $j == autotune ]]; then
        tag=$m.autotune.$rep.$k
        if ! COHORT_AUTOTUNE=1 COHORT_AUTOTUNE_LOG=$out_dir/$tag.csv COHORT_LOG_LEVEL=info timeout 900 "$run" -np "$ranks" "$synthetic" \
             --model "$m" --mode horovod --steps 60 --warmup 0 --threads 1 --batch-size "$batch" --quiet >"$out_dir/$tag.log" 2>&1; then
          echo "autotune_bench.sh: $tag failed" >&2
          failed=1
        fi
      else
        IFS=: read -r _ t c <<<"$j"
        fixed_run "$m" "$t" "$c" "$m.fixed.$t.$c.$rep"
      fi
    done
  done
done

analysis() {
python3 - "$out_dir" "$models" <<'PY'
import glob, os, re, statistics, sys
out, models = sys.argv[1], sys.argv[2].split()
# Each setting's step times over the runs of one kind ("fixed", "confirm").
def step_times(m, kind):
    got = {}
    for path in glob.glob(f"{out}/{m}.{kind}.*.log"):
        _, _, t, c, _ = os.path.basename(path)[:-4].split(".")
        hit = re.search(r"median of \d+ steps: ([0-9.]+) ms/step", open(path).read())
        if hit:
            got.setdefault((int(t), int(c)), []).append(float(hit.group(1)))
    return got
def confirmed(m):
    return {k: statistics.median(v) for k, v in step_times(m, "confirm").items()}
for m in models:
    sweep = step_times(m, "fixed")
    if not sweep:
        print(f"{m}: no sweep results")
        continue
    med = {k: statistics.median(v) for k, v in sweep.items()}
    best = min(med, key=med.get)
    thresholds = sorted({t for t, _ in med})
    cycles = sorted({c for _, c in med})
    print(f"\n## {m}: median ms/step of each fixed setting (rows: fusion threshold, columns: cycle time us)\n")
    print("| threshold | " + " | ".join(str(c) for c in cycles) + " |")
    print("|---|" + "---:|" * len(cycles))
    for t in thresholds:
        print(f"| {t} | " + " | ".join(f"{med[(t, c)]:.1f}" if (t, c) in med else "-" for c in cycles) + " |")
    print(f"\nbest fixed: threshold {best[0]}, cycle {best[1]} us: {med[best]:.1f} ms/step;"
          f" default (262144, 0): {med.get((262144, 0), float('nan')):.1f}")
    again = confirmed(m)
    to_confirm = {best}
    for path in sorted(glob.glob(f"{out}/{m}.autotune.*.csv")):
        rows = [l.strip().split(",") for l in open(path)][1:]
        log = open(path.replace(".csv", ".log")).read()
        kept = re.findall(r"autotune converged after (\d+) steps: fusion threshold (\d+) B, cycle time (\d+) us", log)
        if not rows:
            print(f"  {os.path.basename(path)}: no trials")
            continue
        if not kept:
            print(f"  {os.path.basename(path)}: did not converge ({len(rows)} trials)")
            continue
        steps, t, c = map(int, kept[-1])
        to_confirm.add((t, c))
        ratio = med.get((t, c), float("nan")) / med[best]
        line = (f"  autotune {os.path.basename(path)}: converged at step {steps}, kept threshold {t}, cycle {c} us:"
                f" sweep time / best = {ratio:.3f}")
        if (t, c) in again and best in again:
            line += f"; re-measured: {again[(t, c)]:.1f} / {again[best]:.1f} ms = {again[(t, c)] / again[best]:.3f}"
        print(line)
    with open(f"{out}/{m}.to_confirm", "w") as f:
        for t, c in sorted(to_confirm):
            f.write(f"{t} {c}\n")
PY
}

analysis
if (( confirm > 0 )); then
  echo
  echo "# confirm: the kept settings and the sweep's best, $confirm times each, interleaved"
  for (( r = 1; r <= confirm; r++ )); do
    for m in $models; do
      mapfile -t settings <"$out_dir/$m.to_confirm"
      for setting in "${settings[@]}"; do
        read -r t c <<<"$setting"
        fixed_run "$m" "$t" "$c" "$m.confirm.$t.$c.$r"
      done
    done
  done
  analysis
fi
exit $failed
