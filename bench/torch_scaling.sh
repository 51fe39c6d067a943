#!/usr/bin/env bash
# Training throughput of cohort's DistributedOptimizer at several world sizes
# (issue 4): the fashion_mnist models (mlp, cnn) on synthetic batches.
#
# Usage: bench/torch_scaling.sh [--build-dir DIR] [--ranks "1 2 4"]
#          [--models "mlp cnn"] [--reps N] [--seconds S] [--batch-size N]
#          [--threads N] [--peer auto|none|PYTHON] [--out DIR]
#
# Builds torch_scaling and cohortrun (in the build dir, default build/), then
# runs `cohortrun -np N torch_scaling --model M` for every model and world
# size, --reps times (default 2) in interleaved order so that every
# configuration sees the same machine state; the best run of each counts.
# Each run measures the same steps two ways, alternating 3 rounds of about
# --seconds each (default 1; see torch_scaling.cc): without communication
# (the machine's ceiling at that rank count) and through
# DistributedOptimizer. Prints per model and world size:
#   samples/s       the job's training throughput through cohort
#   ceiling         the same steps without communication
#   comm eff        samples/s / ceiling: what communication costs
#   scaling eff     samples/s(N) / (N x samples/s(1)): against ideal scaling
#   DDP samples/s   the peer: PyTorch DistributedDataParallel (gloo) on the
#                   same models and batches (torch_ddp_peer.py), run right
#                   after (or before, alternating) each cohort run
#   cohort/DDP      > 1: cohort is faster
# and the number of cores: ranks x threads beyond it cannot scale. The peer
# needs a Python with torch (--peer auto: /usr/bin/python3 when Debian's
# python3-torch is installed, scripts/bootstrap.sh --with-torch). The JSON
# line of every run is kept in --out (default DIR/bench/results). Exit
# status: 0 when every run succeeded, 1 otherwise, 2 on bad arguments.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=$repo/build
ranks="1 2 4"
models="mlp cnn"
reps=2
seconds=1
batch=64
threads=1
peer=auto
out_dir=

die() { echo "torch_scaling.sh: $*" >&2; exit 1; }
usage_error() { echo "torch_scaling.sh: $* (see --help)" >&2; exit 2; }

while [[ $# -gt 0 ]]; do
  case "$1" in
    --build-dir) build_dir=$(realpath -m "${2:?--build-dir needs a value}"); shift 2 ;;
    --ranks) ranks=${2:?--ranks needs a value}; shift 2 ;;
    --models) models=${2:?--models needs a value}; shift 2 ;;
    --reps) reps=${2:?--reps needs a value}; shift 2 ;;
    --seconds) seconds=${2:?--seconds needs a value}; shift 2 ;;
    --batch-size) batch=${2:?--batch-size needs a value}; shift 2 ;;
    --threads) threads=${2:?--threads needs a value}; shift 2 ;;
    --peer) peer=${2:?--peer needs a value}; shift 2 ;;
    --out) out_dir=$(realpath -m "${2:?--out needs a value}"); shift 2 ;;
    -h|--help) sed -n '2,29p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) usage_error "unknown argument '$1'" ;;
  esac
done
[[ $seconds =~ ^[0-9]+(\.[0-9]+)?$ ]] || usage_error "--seconds expects a number, got '$seconds'"
for v in "$reps" "$batch" "$threads" $ranks; do
  [[ $v =~ ^[1-9][0-9]*$ ]] || usage_error "expected a positive integer, got '$v'"
done
for m in $models; do
  [[ $m == mlp || $m == cnn ]] || usage_error "--models takes mlp and/or cnn, got '$m'"
done
out_dir=${out_dir:-$build_dir/bench/results}

for tool in cmake ninja python3; do
  command -v "$tool" >/dev/null 2>&1 || die "$tool not found; run scripts/bootstrap.sh first"
done
if [[ ! -f $build_dir/build.ninja ]]; then
  cmake -S "$repo" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null \
    || die "cmake configure of $build_dir failed"
fi
cmake --build "$build_dir" --target torch_scaling cohortrun >/dev/null \
  || die "building torch_scaling failed (is LibTorch installed? scripts/bootstrap.sh)"

case "$peer" in
  auto) if /usr/bin/python3 -c 'import torch' >/dev/null 2>&1; then peer=/usr/bin/python3; else peer=none; fi ;;
  none) ;;
  *) "$peer" -c 'import torch' >/dev/null 2>&1 || die "--peer $peer cannot import torch" ;;
esac
[[ $peer == none ]] && echo "torch_scaling.sh: no Python with torch: the DDP peer is skipped" >&2

mkdir -p "$out_dir"
results=$out_dir/torch_scaling.jsonl
: > "$results"
samples_per_s() { python3 -c 'import json,sys; print("%.0f samples/s" % json.loads(sys.argv[1])["samples_per_s"])' "$1"; }
run_cohort() {  # model ranks rep
  local log=$out_dir/torch_scaling_$1_$2_$3.log line
  timeout 600 "$build_dir/cohort/launcher/cohortrun" -np "$2" "$build_dir/bench/torch_scaling" --model "$1" \
      --seconds "$seconds" --batch-size "$batch" --threads "$threads" >"$log" 2>&1 \
    || die "run failed: cohort, $1 on $2 ranks (see $log)"
  line=$(sed -n 's/^\[0\] \({"bench":"torch_scaling".*\)$/\1/p' "$log")
  [[ -n $line ]] || die "no result line in $log"
  echo "$line" >> "$results"
  echo "rep $3: cohort $1 on $2 rank(s): $(samples_per_s "$line")" >&2
}
run_peer() {  # model ranks rep
  local log=$out_dir/torch_ddp_peer_$1_$2_$3.log line
  timeout 600 "$peer" "$repo/bench/torch_ddp_peer.py" --ranks "$2" --model "$1" --seconds "$seconds" --batch-size "$batch" \
      --threads "$threads" >"$log" 2>&1 || die "run failed: DDP peer, $1 on $2 ranks (see $log)"
  line=$(grep '"bench": "torch_ddp_peer"' "$log" || true)
  [[ -n $line ]] || die "no result line in $log"
  echo "$line" >> "$results"
  echo "rep $3: DDP    $1 on $2 rank(s): $(samples_per_s "$line")" >&2
}
for ((rep = 1; rep <= reps; rep++)); do
  for model in $models; do
    for n in $ranks; do
      # Who goes first alternates, so neither always meets a warmer machine.
      if [[ $peer == none ]]; then
        run_cohort "$model" "$n" "$rep"
      elif ((rep % 2)); then
        run_cohort "$model" "$n" "$rep"; run_peer "$model" "$n" "$rep"
      else
        run_peer "$model" "$n" "$rep"; run_cohort "$model" "$n" "$rep"
      fi
    done
  done
done

python3 - "$results" "$(nproc)" "$threads" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
cores, threads = int(sys.argv[2]), int(sys.argv[3])
best = {}
for r in rows:
    k = (r["bench"], r["model"], r["ranks"])
    if k not in best or r["samples_per_s"] > best[k]["samples_per_s"]:
        best[k] = r
cohort = {k[1:]: v for k, v in best.items() if k[0] == "torch_scaling"}
ddp = {k[1:]: v for k, v in best.items() if k[0] == "torch_ddp_peer"}
runs = sum(1 for r in rows if r["bench"] == "torch_scaling") // max(1, len(cohort))
peer = next(iter(ddp.values()), None)
print(f"\ntorch_scaling: batch {rows[0]['batch_per_rank']} per rank, {threads} thread(s) per rank, "
      f"{cores} cores; best of {runs} runs" + (f"; peer: PyTorch {peer['torch']} DDP (gloo)" if peer else ""))
print(f"{'model':6} {'ranks':>5} {'samples/s':>10} {'ceiling':>10} {'comm eff':>9} {'scaling eff':>12}"
      f" {'DDP samples/s':>14} {'cohort/DDP':>11}")
for (model, n) in sorted(cohort, key=lambda k: (k[0] != "mlp", k[1])):
    r = cohort[(model, n)]
    one = cohort.get((model, 1))
    scaling = r["samples_per_s"] / (n * one["samples_per_s"]) if one else float("nan")
    d = ddp.get((model, n))
    peer_cols = f" {d['samples_per_s']:>14.0f} {r['samples_per_s'] / d['samples_per_s']:>11.2f}" if d else ""
    note = "  (oversubscribed: ranks x threads > cores)" if n * threads > cores else ""
    print(f"{model:6} {n:>5} {r['samples_per_s']:>10.0f} {r['local_samples_per_s']:>10.0f} "
          f"{r['samples_per_s'] / r['local_samples_per_s']:>9.2f} {scaling:>12.2f}{peer_cols}{note}")
PY
