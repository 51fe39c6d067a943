#!/usr/bin/env bash
# cohort's torch.distributed backend against gloo, from Python (issue 36's
# targets): PyTorch's own DistributedDataParallel on the synthetic mlp and
# cnn (bench/pytorch_ddp_synthetic.py --backend all: the models of
# examples/synthetic_benchmark, a gloo group and a cohort group in the same
# processes, a model on each, plus a third model whose DDP communicates
# nothing (a comm hook that returns the bucket as it is: the step with free
# communication, the other process computing beside it), their steps taking
# turns, so that all three meet the same machine), at 1 process (the
# compute alone) and 2, one thread each; then
# all_reduce's latency and bandwidth from 8 B to 64 MiB
# (bench/python_allreduce.py, both backends in the same processes, beside
# the memory bound: both processes copying the tensor at once); then how
# long survivors take to raise after a rank is killed
# (bench/python_dead_rank.py).
#
# Usage: bench/python_ddp.sh [--build-dir DIR] [--reps N] [--steps N]
#          [--models "mlp cnn"] [--batches "64 8"] [--out DIR]
#
# Builds the package (target cohort_python) in the build dir (default
# build/). A DDP run reports the median over --steps (default 20) steps of
# the slowest rank's step time; a configuration's figure is the median of
# its --reps (default 3) runs, per model and batch per process (--batches:
# 64, where this machine's compute dominates the mlp's step, and 8, where its
# 80 MB allreduce does). Prints per model and batch the step of each backend,
# cohort / gloo (target: <= 0.8 on the mlp, <= 1.0 on the cnn), the bound
# (none / gloo: no backend can go below it), and the communication's cost
# (a backend's 2-process step less none's), the allreduce table, the
# detection times and the load average. JSON lines go
# to --out (default BUILD/bench/results/python_ddp.jsonl).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build="$repo/build"
reps=3
steps=20
models="mlp cnn"
batches="64 8"
out=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build-dir) build=$(cd "$2" && pwd); shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --models) models=$2; shift 2 ;;
    --batches) batches=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h|--help) sed -n '2,30p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "python_ddp.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
out=${out:-$build/bench/results}
mkdir -p "$out"
results="$out/python_ddp.jsonl"
: >"$results"

cmake --build "$build" --target cohort_python >/dev/null
export PYTHONPATH="$build/python" OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1
py=/usr/bin/python3

for rep in $(seq 1 "$reps"); do
  for model in $models; do
    for batch in $batches; do
      for ranks in 1 2; do
        $py "$repo/bench/pytorch_ddp_synthetic.py" --model "$model" --ranks "$ranks" --threads 1 --steps "$steps" \
          --batch-size "$batch" --backend all | grep '^{' >>"$results"
      done
    done
  done
done
$py "$repo/bench/python_allreduce.py" --ranks 2 --reps 5 | grep '^{' >>"$results"
for backend in cohort gloo; do
  $py "$repo/bench/python_dead_rank.py" --backend "$backend" --timeout-s 30 | grep '^{' >>"$results"
done

$py - "$results" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
ddp = [r for r in rows if r["bench"] == "pytorch_ddp_synthetic"]
print("DDP, 1 thread per process, gloo, cohort and none (no communication) interleaved step by step in the same")
print("processes: median step (ms) over the runs' medians; bound = none / gloo, the ratio free communication would")
print("give; communication = the step less none's (gloo, cohort, and their ratio)")
backends = ("gloo", "cohort", "none")
for model, batch in dict.fromkeys((r["model"], r["batch_per_rank"]) for r in ddp):
    step = {(b, n): statistics.median(r["step_ms"] for r in ddp if r["model"] == model and r["backend"] == b
                                       and r["ranks"] == n and r["batch_per_rank"] == batch)
            for b in backends for n in (1, 2)}
    comm = {b: step[(b, 2)] - step[("none", 2)] for b in ("gloo", "cohort")}
    print(f"  {model:4s} batch {batch:3d} 1 process: " + " ".join(f"{b} {step[(b, 1)]:6.1f}" for b in backends) +
          " | 2 processes: " + " ".join(f"{b} {step[(b, 2)]:6.1f}" for b in backends) +
          f" | cohort/gloo {step[('cohort', 2)] / step[('gloo', 2)]:.2f} bound {step[('none', 2)] / step[('gloo', 2)]:.2f}"
          f" | communication gloo {comm['gloo']:6.1f} cohort {comm['cohort']:6.1f} cohort/gloo "
          f"{comm['cohort'] / comm['gloo'] if comm['gloo'] > 0 else float('nan'):.2f}")
print("all_reduce from Python, 2 processes, float32: time per call (us), bandwidth (GB/s); copy: both processes")
print("copying their tensor at once (the memory bound)")
for r in (r for r in rows if r["bench"] == "python_allreduce"):
    print(f"  {r['bytes']:>9d} B  gloo {r['gloo_us']:10.1f} us {r['gloo_GBps']:6.2f} GB/s   "
          f"cohort {r['cohort_us']:10.1f} us {r['cohort_GBps']:6.2f} GB/s   cohort/gloo {r['cohort_over_gloo']:.2f}   "
          f"copy {r['copy_us']:9.1f} us   cohort/copy {r['cohort_over_copy']:.2f}")
print("a rank killed mid-all_reduce (3 processes): seconds until each survivor raised")
for r in (r for r in rows if r["bench"] == "python_dead_rank"):
    print(f"  {r['backend']:6s} rank {r['rank']}: {r['detected_s']} s  {r['error']}: {r.get('message', '')[:110]}")
PY
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
