#!/usr/bin/env bash
# ZeRO's stages against DDP (issue 17): the same synthetic mlp, ranks and
# batch under multi_worker (DDP) and zero:stage=1, 2 and 3, run in
# rotating order for --rounds rounds. Per strategy, the medians over rounds
# of: the step time (synthetic_benchmark's median of the slowest rank), its
# ratio to DDP's, the bytes rank 0 holds for parameters, gradients and
# optimizer state (zero's counters; DDP's by the same formula: 3 x the
# parameters for SGD with momentum), and the largest peak RSS of the ranks
# (/usr/bin/time) with its ratio to DDP's.
# Usage: bench/zero.sh [--build-dir DIR] [--ranks N] [--width W] [--depth D] [--rounds R] [--steps S]
#                      [--batch B] [--strategies "..."]
set -euo pipefail
build_dir=build ranks=4 width=1024 depth=8 rounds=3 steps=10 batch=32
strategies="multi_worker:style=ddp zero:stage=1 zero:stage=2 zero:stage=3"
while [[ $# -gt 0 ]]; do
  case $1 in
    --build-dir) build_dir=$2; shift 2 ;;
    --ranks) ranks=$2; shift 2 ;;
    --width) width=$2; shift 2 ;;
    --depth) depth=$2; shift 2 ;;
    --strategies) strategies=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --batch) batch=$2; shift 2 ;;
    *) echo "zero.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1
read -r -a strategies <<<"$strategies"
results=$(mktemp)
trap 'rm -f "$results"' EXIT
for ((r = 0; r < rounds; r++)); do
  for ((k = 0; k < ${#strategies[@]}; k++)); do
    s=${strategies[$(((k + r) % ${#strategies[@]}))]}
    out=$("$build_dir/cohort/launcher/cohortrun" -np "$ranks" /usr/bin/time -f "maxrss_kb %M" \
      "$build_dir/examples/synthetic_benchmark" --model mlp --width "$width" --depth "$depth" --strategy "$s" \
      --steps "$steps" --warmup 2 --quiet --batch-size "$batch" 2>&1)
    step=$(grep -o '"step_ms":[0-9.]*' <<<"$out" | cut -d: -f2)
    rss=$(grep -o 'maxrss_kb [0-9]*' <<<"$out" | awk '{print $2}' | sort -n | tail -1)
    mem=$(grep -o 'memory rank 0: .*' <<<"$out" | grep -o 'total [0-9.]*' | awk '{print $2}' || true)
    params=$(grep -o '([0-9]* parameters)' <<<"$out" | grep -o '[0-9]*')
    echo "$s $step $rss ${mem:--} $params" >>"$results"
  done
done
echo "zero.sh: mlp width $width depth $depth, $ranks ranks, batch $batch per rank, $rounds rounds," \
  "load $(cut -d' ' -f1 /proc/loadavg)"
python3 - "$results" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
by = {}
for s, step, rss, mem, params in rows:
    by.setdefault(s, []).append((float(step), int(rss), mem, int(params)))
ddp = statistics.median(v[0] for v in by.get("multi_worker:style=ddp", next(iter(by.values()))))
ddp_rss = statistics.median(v[1] for v in by.get("multi_worker:style=ddp", next(iter(by.values()))))
print("%-24s %10s %9s %16s %14s %12s" % ("strategy", "step ms", "vs ddp", "model state MiB", "peak RSS MiB",
                                        "RSS vs ddp"))
for s, v in by.items():
    step = statistics.median(x[0] for x in v)
    rss = statistics.median(x[1] for x in v) / 1024
    mem = v[0][2] if v[0][2] != "-" else "%.1f" % (3 * 4 * v[0][3] / 1048576)  # DDP: params, grads, momentum
    print("%-24s %10.2f %9.2f %16s %14.1f %12.2f" % (s, step, step / ddp, mem, rss, rss * 1024 / ddp_rss))
PY
