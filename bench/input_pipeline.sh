#!/usr/bin/env bash
# The input-pipeline race of issue 14: cohort's pipeline (cohort/data)
# against PyTorch's DataLoader doing the same decode + augment + batch over
# the same Fashion-MNIST TFRecord shards, at the same core count.
#
# Usage: bench/input_pipeline.sh [--build-dir DIR] [--reps N] [--batches N]
#          [--batch-size N] [--shards N] [--python PY] [--out DIR]
#
# 1. Builds cohort-data and input_pipeline_bench; converts Debian's
#    Fashion-MNIST training set (dataset-fashion-mnist) into --shards
#    (default 8) TFRecord files with indexes, once, in BUILD/bench/; makes
#    the peer's protobuf classes with protoc from cohort/data/example.proto.
# 2. For every rep (default 3), runs each configuration once, in an order
#    that rotates from rep to rep:
#      cohort auto   input_pipeline_bench --workers 0 (autotuned, at most the
#                    machine's cores)
#      cohort w=1, cohort w=2
#      torch nw=0, nw=1, nw=2   input_pipeline_peer.py (DataLoader num_workers)
#    each over --batches batches (default 0: one epoch, 938 batches of 64).
#    Every side runs one BLAS/OpenMP thread per process (OMP_NUM_THREADS,
#    OPENBLAS_NUM_THREADS, MKL_NUM_THREADS = 1; torch.set_num_threads(1)).
# 3. Memory: cohort with a consumer slower than the pipeline (3 ms per
#    batch, 300 batches) and a prefetch depth of 200 batches, under a 2 MiB
#    and a 64 MiB bound: peak resident memory (VmHWM) against the bound.
# Prints the medians over reps (samples/s, time to first batch, peak RSS),
# cohort's best over PyTorch's best configuration as a ratio with the
# issue's goal (>= 2x) MET or MISSED, the memory rows, and the load average.
# JSON lines go to --out (default BUILD/bench/results/input_pipeline).
# Exit status: 0 when every run succeeded, 1 otherwise, 2 on bad arguments.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=$repo/build
reps=3
batches=0
batch=64
shards=8
python=/usr/bin/python3
out_dir=

usage_error() { echo "input_pipeline.sh: $* (see --help)" >&2; exit 2; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build-dir) build_dir=$(realpath -m "${2:?--build-dir needs a value}"); shift 2 ;;
    --reps) reps=${2:?--reps needs a value}; shift 2 ;;
    --batches) batches=${2:?--batches needs a value}; shift 2 ;;
    --batch-size) batch=${2:?--batch-size needs a value}; shift 2 ;;
    --shards) shards=${2:?--shards needs a value}; shift 2 ;;
    --python) python=${2:?--python needs a value}; shift 2 ;;
    --out) out_dir=$(realpath -m "${2:?--out needs a value}"); shift 2 ;;
    -h|--help) sed -n '2,31p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) usage_error "unknown argument '$1'" ;;
  esac
done
for v in "$reps" "$batch" "$shards"; do
  [[ $v =~ ^[1-9][0-9]*$ ]] || usage_error "expected a positive integer, got '$v'"
done
[[ $batches =~ ^[0-9]+$ ]] || usage_error "--batches expects a non-negative integer, got '$batches'"
out_dir=${out_dir:-$build_dir/bench/results/input_pipeline}
fashion=/usr/share/datasets/fashion-mnist
[[ -f $fashion/train-images-idx3-ubyte.gz ]] || { echo "input_pipeline.sh: $fashion missing (install dataset-fashion-mnist)" >&2; exit 1; }
"$python" -c "import torch, google.protobuf" 2>/dev/null ||
  { echo "input_pipeline.sh: $python lacks torch or protobuf (bootstrap.sh --with-torch installs python3-torch, python3-protobuf)" >&2; exit 1; }

cmake --build "$build_dir" --target cohort-data input_pipeline_bench >/dev/null
data=$build_dir/bench/fashion_tfrecord_$shards
if [[ ! -f $data/train-$(printf '%05d-of-%05d' $((shards - 1)) "$shards").tfrecord.index ]]; then
  "$build_dir/tools/cohort-data" convert idx --images $fashion/train-images-idx3-ubyte.gz \
    --labels $fashion/train-labels-idx1-ubyte.gz --out "$data" --shards "$shards" --prefix train >/dev/null
fi
proto=$build_dir/bench/proto_py
mkdir -p "$proto"
protoc --proto_path="$repo" --python_out="$proto" "$repo/cohort/data/example.proto"
touch "$proto/cohort/__init__.py" "$proto/cohort/data/__init__.py"
mkdir -p "$out_dir"
results=$out_dir/results.jsonl
: > "$results"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1

configs=("cohort 0" "cohort 1" "cohort 2" "torch 0" "torch 1" "torch 2")
failed=0
run_one() {  # impl workers -> appends a JSON line tagged with the config
  local impl=$1 w=$2 line
  if [[ $impl == cohort ]]; then
    line=$("$build_dir/bench/input_pipeline_bench" --data "$data" --batch "$batch" --batches "$batches" \
      --workers "$w" 2>>"$out_dir/stderr.log") || { failed=1; return; }
  else
    line=$("$python" "$repo/bench/input_pipeline_peer.py" --data "$data" --proto-dir "$proto" --batch "$batch" \
      --batches "$batches" --num-workers "$w" 2>>"$out_dir/stderr.log") || { failed=1; return; }
  fi
  echo "{\"config\":\"$impl $w\",${line#\{}" >> "$results"
}
for ((rep = 0; rep < reps; rep++)); do
  n=${#configs[@]}
  for ((i = 0; i < n; i++)); do
    run_one ${configs[$(((i + rep) % n))]}
  done
done
# Memory under the bound: a slow consumer, a deep prefetch request.
for bound in 2 64; do
  line=$("$build_dir/bench/input_pipeline_bench" --data "$data" --batch "$batch" --batches 300 --workers 2 \
    --prefetch 200 --consumer-us 3000 --memory-mb $bound 2>>"$out_dir/stderr.log") || failed=1
  echo "{\"config\":\"memory $bound\",${line#\{}" >> "$results"
done

"$python" - "$results" <<'PY'
import json, statistics, sys, os
rows = [json.loads(l) for l in open(sys.argv[1])]
by = {}
for r in rows:
    by.setdefault(r["config"], []).append(r)
def med(c, k):
    return statistics.median(r[k] for r in by[c])
def label(c):  # "cohort 0" is the autotuned pipeline; otherwise the worker count
    return {"cohort 0": "cohort auto"}.get(c, c.replace(" ", " w=" if c.startswith("cohort") else " nw="))
print("%-12s %12s %14s %12s %5s" % ("config", "samples/s", "first batch ms", "peak RSS MB", "runs"))
for c in ["cohort 0", "cohort 1", "cohort 2", "torch 0", "torch 1", "torch 2"]:
    if c in by:
        print("%-12s %12.0f %14.1f %12.1f %5d" % (label(c), med(c, "samples_per_s"), 1e3 * med(c, "first_batch_s"),
                                                 med(c, "peak_rss_mb"), len(by[c])))
cohort = [c for c in by if c.startswith("cohort")]
torch = [c for c in by if c.startswith("torch")]
if cohort and torch:
    best_c = max(cohort, key=lambda c: med(c, "samples_per_s"))
    best_t = max(torch, key=lambda c: med(c, "samples_per_s"))
    ratio = med(best_c, "samples_per_s") / med(best_t, "samples_per_s")
    ttfb = med(best_t, "first_batch_s") / med(best_c, "first_batch_s")
    print("best cohort (%s) / best PyTorch (%s): %.1fx samples/s, time to first batch %.1fx shorter; goal >= 2x: %s"
          % (label(best_c), label(best_t), ratio, ttfb, "MET" if ratio >= 2 else "MISSED"))
for c in ["memory 2", "memory 64"]:
    if c in by:
        r = by[c][0]
        print("memory: bound %4.0f MiB, slow consumer: peak ready %.1f MiB, peak RSS %.1f MB (baseline %.1f MB, +%.1f)"
              % (r["memory_bound_mb"], r["peak_ready_mb"], r["peak_rss_mb"], r["baseline_rss_mb"],
                 r["peak_rss_mb"] - r["baseline_rss_mb"]))
print("load average: %s" % " ".join(open("/proc/loadavg").read().split()[:3]))
PY
exit $failed
