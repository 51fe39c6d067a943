#!/usr/bin/env bash
# autotune_bench.sh: the engine's autotuner (COHORT_AUTOTUNE) against a full
# sweep of fixed settings, on real training runs (issue 19).
#
# Usage: bench/autotune_bench.sh [--build-dir DIR] [--ranks N] [--reps N] [--models "mlp cnn"] [--out DIR]
#          [--batch-size N] [--steps N] [--confirm N] [--mode horovod|ddp] [--no-build]
#
# --mode: the gradient exchange (default horovod: the engine's two knobs);
# ddp: multi_worker:style=ddp, whose bucket cap (bucket_mb) joins the search
# and the sweep (6 caps x 7 x 4 settings).
# --batch-size: rows per rank (default 64; smaller makes communication a
# larger share of the step); --steps: timed steps of each fixed setting
# (default 10, after 3 warm-up); --no-build uses the programs already in DIR.
#
# For each model (synthetic_benchmark, one thread per rank):
#   - sweep: every fixed (bucket cap under ddp, COHORT_FUSION_THRESHOLD,
#     COHORT_CYCLE_TIME_US) of the autotuner's grid, --reps times,
#     interleaved; the median step time of each setting;
#   - autotune: two COHORT_AUTOTUNE=1 runs of 70 steps per rep (the tuner
#     needs under 50 unless the noise leads it through whole grids),
#     interleaved with the sweep; from COHORT_AUTOTUNE_LOG, the step it
#     converged at and the setting it kept.
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
mode=horovod
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
    --mode) mode=${2:?--mode needs a value}; shift 2 ;;
    --out) out_dir=$(realpath -m "${2:?--out needs a value}"); shift 2 ;;
    --no-build) build=0; shift ;;
    -h|--help) sed -n '2,31p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "autotune_bench.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[[ $mode == horovod || $mode == ddp ]] || { echo "autotune_bench.sh: --mode expects horovod or ddp, got '$mode'" >&2; exit 2; }
[[ $confirm =~ ^[0-9]+$ ]] || { echo "autotune_bench.sh: --confirm expects a count, got '$confirm'" >&2; exit 2; }
for v in "$ranks" "$reps" "$batch" "$steps"; do [[ $v =~ ^[1-9][0-9]*$ ]] || { echo "autotune_bench.sh: expected a positive integer, got '$v'" >&2; exit 2; }; done
out_dir=${out_dir:-$build_dir/bench/results/autotune-$mode}
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
# Bucket caps in MiB (engine/autotune.cc's default_bucket_grid() and DDP's
# 25); 0: not a knob (horovod).
buckets=(0)
[[ $mode == ddp ]] && buckets=(1 4 16 25 64 256)
failed=0

# The strategy flags of a run with bucket cap B MiB (0: the default).
strategy() {
  if [[ $mode == ddp ]]; then
    echo "--strategy multi_worker:style=ddp$( (( $1 > 0 )) && echo ",bucket_mb=$1")"
  else
    echo "--mode horovod"
  fi
}

# One fixed-setting run: fixed_run MODEL BUCKET THRESHOLD CYCLE TAG.
fixed_run() {
  # shellcheck disable=SC2046 # strategy's words are flags
  if ! COHORT_FUSION_THRESHOLD=$3 COHORT_CYCLE_TIME_US=$4 timeout 900 "$run" -np "$ranks" "$synthetic" \
       --model "$1" $(strategy "$2") --steps "$steps" --warmup 3 --threads 1 --batch-size "$batch" --quiet \
       >"$out_dir/$5.log" 2>&1; then
    echo "autotune_bench.sh: $5 failed" >&2
    failed=1
  fi
}

for (( rep = 1; rep <= reps; rep++ )); do
  echo "# rep $rep/$reps: load average $(cut -d' ' -f1-3 /proc/loadavg)"
  for m in $models; do
    jobs=()
    for b in "${buckets[@]}"; do for t in "${thresholds[@]}"; do for c in "${cycles[@]}"; do
      jobs+=("fixed:$b:$t:$c")
    done; done; done
    jobs+=(autotune autotune)
    n=${#jobs[@]}
    for (( k = 0; k < n; k++ )); do
      j=${jobs[$(( (k + rep * 5) % n ))]}
      if [[ $j == autotune ]]; then
        tag=$m.autotune.$rep.$k
        # shellcheck disable=SC2046 # strategy's words are flags
        if ! COHORT_AUTOTUNE=1 COHORT_AUTOTUNE_LOG=$out_dir/$tag.csv COHORT_LOG_LEVEL=info timeout 900 "$run" -np "$ranks" \
             "$synthetic" --model "$m" $(strategy 0) --steps 70 --warmup 0 --threads 1 --batch-size "$batch" --quiet \
             >"$out_dir/$tag.log" 2>&1; then
          echo "autotune_bench.sh: $tag failed" >&2
          failed=1
        fi
      else
        IFS=: read -r _ b t c <<<"$j"
        fixed_run "$m" "$b" "$t" "$c" "$m.fixed.$b.$t.$c.$rep"
      fi
    done
  done
done

analysis() {
python3 - "$out_dir" "$models" <<'PY'
import glob, os, re, statistics, sys
out, models = sys.argv[1], sys.argv[2].split()
# Each setting (bucket MiB, threshold, cycle us) -> its step times over the
# runs of one kind ("fixed", "confirm").
def step_times(m, kind):
    got = {}
    for path in glob.glob(f"{out}/{m}.{kind}.*.log"):
        b, t, c = os.path.basename(path)[:-4].split(".")[2:5]
        hit = re.search(r"median of \d+ steps: ([0-9.]+) ms/step", open(path).read())
        if hit:
            got.setdefault((int(b), int(t), int(c)), []).append(float(hit.group(1)))
    return got
def name(k):
    return (f"bucket {k[0]} MiB, " if k[0] else "") + f"threshold {k[1]}, cycle {k[2]} us"
converged = re.compile(r"autotune converged after (\d+) steps: (?:bucket cap (\d+) B, )?"
                       r"fusion threshold (\d+) B, cycle time (\d+) us")
for m in models:
    sweep = step_times(m, "fixed")
    if not sweep:
        print(f"{m}: no sweep results")
        continue
    med = {k: statistics.median(v) for k, v in sweep.items()}
    best = min(med, key=med.get)
    rows = sorted({k[:2] for k in med})
    cycles = sorted({k[2] for k in med})
    print(f"\n## {m}: median ms/step of each fixed setting (rows: bucket MiB (0: none) and fusion threshold,"
          f" columns: cycle time us)\n")
    print("| bucket | threshold | " + " | ".join(str(c) for c in cycles) + " |")
    print("|---|---|" + "---:|" * len(cycles))
    for b, t in rows:
        print(f"| {b} | {t} | " + " | ".join(f"{med[(b, t, c)]:.1f}" if (b, t, c) in med else "-" for c in cycles) + " |")
    print(f"\nbest fixed: {name(best)}: {med[best]:.1f} ms/step")
    again = {k: statistics.median(v) for k, v in step_times(m, "confirm").items()}
    to_confirm = {best}
    for path in sorted(glob.glob(f"{out}/{m}.autotune.*.csv")):
        trials = [l.strip().split(",") for l in open(path)][1:]
        kept = converged.findall(open(path.replace(".csv", ".log")).read())
        if not trials:
            print(f"  {os.path.basename(path)}: no trials")
            continue
        if not kept:
            print(f"  {os.path.basename(path)}: did not converge ({len(trials)} trials)")
            continue
        steps, cap, t, c = kept[-1]
        k = (int(cap or 0) >> 20, int(t), int(c))
        to_confirm.add(k)
        line = (f"  autotune {os.path.basename(path)}: converged at step {steps}, kept {name(k)}:"
                f" sweep time / best = {med.get(k, float('nan')) / med[best]:.3f}")
        if k in again and best in again:
            line += f"; re-measured: {again[k]:.1f} / {again[best]:.1f} ms = {again[k] / again[best]:.3f}"
        print(line)
    with open(f"{out}/{m}.to_confirm", "w") as f:
        for k in sorted(to_confirm):
            f.write(" ".join(map(str, k)) + "\n")
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
        read -r b t c <<<"$setting"
        fixed_run "$m" "$b" "$t" "$c" "$m.confirm.$b.$t.$c.$r"
      done
    done
  done
  analysis
fi
exit $failed
