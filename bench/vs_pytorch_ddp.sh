#!/usr/bin/env bash
# The race of issue 6: cohort's DistributedDataParallel (and its Horovod-style
# DistributedOptimizer) against PyTorch DDP (gloo), same models, same
# synthetic batches, same per-rank batch, 1 thread per rank, SGD momentum 0.9.
#
# Usage: bench/vs_pytorch_ddp.sh [--build-dir DIR] [--models "mlp cnn"]
#          [--ranks "1 2"] [--impls "pytorch ddp horovod single"] [--steps N]
#          [--warmup N] [--reps N] [--batch-size N] [--bucket-view 0|1]
#          [--python PY] [--out DIR]
#
# Builds synthetic_benchmark and cohortrun (in the build dir, default build/),
# then for every rep, model and rank count runs each implementation once:
#   pytorch  bench/pytorch_ddp_synthetic.py (PyTorch DDP, gloo backend)
#   ddp      cohortrun -np N build/examples/synthetic_benchmark --mode ddp
#   horovod  cohortrun -np N build/examples/synthetic_benchmark --mode horovod
#   single   the same with --mode single: N ranks that train alone, without
#            communication; their efficiency is what the machine allows any
#            implementation (cores that share caches, memory bandwidth)
# interleaved, in alternating order from rep to rep, so that every
# implementation meets the same machine state. A run reports the median over
# --steps (default 20) measured steps, after --warmup (default 5), of the
# slowest rank's step time; a configuration's figure is the median of its
# --reps runs (default 3). --bucket-view (default 1) sets
# gradient_as_bucket_view for both DDPs (cohort's and PyTorch's). One thread
# per rank means OMP_NUM_THREADS, OPENBLAS_NUM_THREADS and MKL_NUM_THREADS = 1
# for every run: Debian's OpenBLAS keeps its own pool, which
# torch.set_num_threads does not size (every result line records blas_threads).
# Prints per model, ranks and implementation:
#   step ms       median step time (slowest rank)
#   samples/s     ranks x batch / step time
#   scaling eff   samples/s at N / (N x samples/s at 1 rank), same impl
#   vs PyTorch    step time / PyTorch DDP's step time (< 1: cohort faster)
# then the issue's targets at 2 ranks (mlp: <= 0.5x PyTorch and >= 80%
# efficiency; cnn: <= 1.0x and >= 95%) as met / missed, and the load average
# (a loaded machine inflates everything). JSON lines and logs go to --out
# (default BUILD/bench/results). Exit status: 0 when every run succeeded,
# 1 otherwise, 2 on bad arguments.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=$repo/build
models="mlp cnn"
ranks="1 2"
impls="pytorch ddp horovod single"
steps=20
warmup=5
reps=3
batch=64
bucket_view=1
python=/usr/bin/python3
out_dir=

die() { echo "vs_pytorch_ddp.sh: $*" >&2; exit 1; }
usage_error() { echo "vs_pytorch_ddp.sh: $* (see --help)" >&2; exit 2; }

while [[ $# -gt 0 ]]; do
  case "$1" in
    --build-dir) build_dir=$(realpath -m "${2:?--build-dir needs a value}"); shift 2 ;;
    --models) models=${2:?--models needs a value}; shift 2 ;;
    --ranks) ranks=${2:?--ranks needs a value}; shift 2 ;;
    --impls) impls=${2:?--impls needs a value}; shift 2 ;;
    --steps) steps=${2:?--steps needs a value}; shift 2 ;;
    --warmup) warmup=${2:?--warmup needs a value}; shift 2 ;;
    --reps) reps=${2:?--reps needs a value}; shift 2 ;;
    --batch-size) batch=${2:?--batch-size needs a value}; shift 2 ;;
    --bucket-view) bucket_view=${2:?--bucket-view needs a value}; shift 2 ;;
    --python) python=${2:?--python needs a value}; shift 2 ;;
    --out) out_dir=$(realpath -m "${2:?--out needs a value}"); shift 2 ;;
    -h|--help) sed -n '2,30p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) usage_error "unknown argument '$1'" ;;
  esac
done
for v in "$steps" "$reps" "$batch" $ranks; do
  [[ $v =~ ^[1-9][0-9]*$ ]] || usage_error "expected a positive integer, got '$v'"
done
[[ $bucket_view == 0 || $bucket_view == 1 ]] || usage_error "--bucket-view takes 0 or 1, got '$bucket_view'"
[[ $warmup =~ ^[0-9]+$ ]] || usage_error "--warmup expects a non-negative integer, got '$warmup'"
for m in $models; do
  [[ $m == mlp || $m == cnn || $m == resnet ]] || usage_error "--models takes mlp, cnn, resnet; got '$m'"
done
for i in $impls; do
  [[ $i == pytorch || $i == ddp || $i == horovod || $i == single ]] \
    || usage_error "--impls takes pytorch, ddp, horovod, single; got '$i'"
done
out_dir=${out_dir:-$build_dir/bench/results}

for tool in cmake ninja; do
  command -v "$tool" >/dev/null 2>&1 || die "$tool not found; run scripts/bootstrap.sh first"
done
if [[ " $impls " == *" pytorch "* ]]; then
  "$python" -c 'import torch' >/dev/null 2>&1 \
    || die "$python cannot import torch (install Debian's python3-torch, or pass --impls \"ddp horovod\")"
fi
if [[ ! -f $build_dir/build.ninja ]]; then
  cmake -S "$repo" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCOHORT_WITH_TORCH=ON >/dev/null \
    || die "cmake configure of $build_dir failed"
fi
cmake --build "$build_dir" --target synthetic_benchmark cohortrun -- -j2 >/dev/null \
  || die "building synthetic_benchmark failed (is LibTorch installed? scripts/bootstrap.sh --with-torch)"

mkdir -p "$out_dir"
results=$out_dir/vs_pytorch_ddp.jsonl
: > "$results"
cores=$(nproc)  # before the export below: nproc honours OMP_NUM_THREADS
echo "vs_pytorch_ddp.sh: load average at start: $(cut -d' ' -f1-3 /proc/loadavg), $cores cores" >&2
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1

run_one() {  # impl model ranks rep
  local impl=$1 model=$2 n=$3 rep=$4 log=$out_dir/vs_pytorch_ddp_$1_$2_$3_$4.log line
  local common=(--model "$model" --batch-size "$batch" --steps "$steps" --warmup "$warmup" --bucket-view "$bucket_view")
  if [[ $impl == pytorch ]]; then
    timeout 900 "$python" "$repo/bench/pytorch_ddp_synthetic.py" --ranks "$n" --threads 1 "${common[@]}" \
      >"$log" 2>&1 || die "run failed: $impl $model on $n rank(s) (see $log)"
    line=$(grep '"bench": "pytorch_ddp_synthetic"' "$log" || true)
  else
    timeout 900 "$build_dir/cohort/launcher/cohortrun" -np "$n" \
      "$build_dir/examples/synthetic_benchmark" --mode "$impl" --threads 1 --quiet "${common[@]}" \
      >"$log" 2>&1 || die "run failed: $impl $model on $n rank(s) (see $log)"
    line=$(sed -n 's/^\(\[0\] \)\{0,1\}\({"bench":"synthetic_benchmark".*\)$/\2/p' "$log")
  fi
  [[ -n $line ]] || die "no result line in $log"
  echo "$line" | "$python" -c 'import json,sys; r=json.loads(sys.stdin.read()); r["impl"]=sys.argv[1]; print(json.dumps(r))' \
    "$impl" >> "$results"
  echo "rep $rep: $impl $model on $n rank(s): $(echo "$line" | sed 's/.*"step_ms": \{0,1\}\([0-9.]*\).*/\1/') ms/step" >&2
}

read -r -a impl_list <<<"$impls"
for ((rep = 1; rep <= reps; rep++)); do
  for model in $models; do
    for n in $ranks; do
      # Alternate who goes first, so no implementation always meets a warmer machine.
      order=("${impl_list[@]}")
      if ((rep % 2 == 0)); then
        order=(); for ((k = ${#impl_list[@]} - 1; k >= 0; k--)); do order+=("${impl_list[k]}"); done
      fi
      for impl in "${order[@]}"; do run_one "$impl" "$model" "$n" "$rep"; done
    done
  done
done

"$python" - "$results" "$cores" "$(cut -d' ' -f1-3 /proc/loadavg)" "$reps" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
cores, load, reps = sys.argv[2], sys.argv[3], sys.argv[4]
runs = {}
for r in rows:
    runs.setdefault((r["model"], r["ranks"], r["impl"]), []).append(r["step_ms"])
step = {k: statistics.median(v) for k, v in runs.items()}
batch = rows[0]["batch_per_rank"]
torch_version = next((r["torch"] for r in rows if "torch" in r), "?")
print(f"\nvs_pytorch_ddp: batch {batch} per rank, 1 thread per rank, {cores} cores, median of {reps} run(s) "
      f"of the median step; PyTorch {torch_version} DDP (gloo); load average at end {load}")
print(f"{'model':6} {'ranks':>5} {'impl':8} {'step ms':>9} {'samples/s':>10} {'scaling eff':>12} {'vs PyTorch':>11}")
order = {"pytorch": 0, "ddp": 1, "horovod": 2, "single": 3}
for (model, n, impl) in sorted(step, key=lambda k: (k[0], k[1], order[k[2]])):
    ms = step[(model, n, impl)]
    sps = 1e3 * batch * n / ms
    one = step.get((model, 1, impl))
    eff = f"{sps / (n * 1e3 * batch / one):12.0%}" if one else f"{'-':>12}"
    peer = step.get((model, n, "pytorch"))
    ratio = f"{ms / peer:10.2f}x" if peer and impl not in ("pytorch", "single") else f"{'-':>11}"
    print(f"{model:6} {n:>5} {impl:8} {ms:9.1f} {sps:10.1f} {eff} {ratio}")
targets = {"mlp": (0.5, 0.80), "cnn": (1.0, 0.95)}
print("\ntargets at 2 ranks (issue 6): step <= R x PyTorch DDP and scaling efficiency >= E")
for model, (r_max, e_min) in targets.items():
    for impl in ("ddp", "horovod"):
        k2, k1, p2 = (model, 2, impl), (model, 1, impl), (model, 2, "pytorch")
        if k2 not in step or k1 not in step:
            continue
        eff = step[k1] / step[k2]  # samples/s(2) / (2 x samples/s(1)) with equal per-rank batches
        ratio = step[k2] / step[p2] if p2 in step else float("nan")
        ok = ratio <= r_max and eff >= e_min
        print(f"  {model} {impl:8} {ratio:5.2f}x (<= {r_max}), efficiency {eff:5.1%} (>= {e_min:.0%}): "
              f"{'met' if ok else 'missed'}")
    s1, s2 = step.get((model, 1, "single")), step.get((model, 2, "single"))
    if s1 and s2:
        print(f"  {model} ranks without communication (single): efficiency {s1 / s2:4.0%}, the machine's ceiling")
blas = sorted({r.get("blas_threads", "?") for r in rows}, key=str)
print(f"BLAS threads per rank seen: {', '.join(map(str, blas))} (-1: not OpenBLAS)")
PY
