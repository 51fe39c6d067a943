#!/usr/bin/env bash
# elastic.sh: recovery from a rank's SIGKILL, cohort against torchrun
# (issue 18), side by side in one run, interleaved and repeated.
#
# Usage: bench/elastic.sh [--build-dir DIR] [--reps N] [--kill-step K] [--rows R] [--batch B]
#                         [--model mlp|cnn] [--hosts 1|2] [--kill-rank R] [--strategy S] [--cut-link]
#
# Both train --model (the synthetic mlp, 784-4096-4096-10, 20M parameters,
# or the Fashion-MNIST example's cnn, 206k) on 3 ranks of this machine,
# SGD with momentum, --rows random rows per epoch in global batches of
# --batch rows per rank, 3 epochs, one thread per rank; rank --kill-rank (1)
# kills itself with SIGKILL at step --kill-step (mid second epoch by
# default), before its gradients' allreduce:
#   cohort   cohortrun -np 3 --min-np 2 --max-restarts 3
#            tests/torch/elastic_program --model M (ElasticState,
#            run_elastic: commit after every step, in memory); with
#            --hosts 2, across 2 emulated hosts (scripts/cluster.sh, 1 Gbit/s
#            links: ranks 0-1 on h0, rank 2 on h1, hierarchical backend)
#            and without the torchrun side (its comparison is one host's);
#            with --strategy S, Model::fit under strategy S instead
#            (elastic_program --fit: global batches of 3 x --batch rows, a
#            commit every step; zero:stage=1 commits each rank's blocks and
#            a copy of another's, checkpoint/elastic_shards.h), the rank
#            killed at its batch's start, before the step's collectives;
#            with --strategy parameter_server:..., 3 workers and the
#            servers (-np 3 + S, --min-np 2 + S; S from servers=, 1 unless
#            given), and --kill-rank 3 and up names a server's slot, killed
#            by worker 0 at that step's start (no torchrun side then);
#            with --cut-link (needs --hosts 2), nothing is killed: once rank
#            0 finished step --kill-step, h1's link is cut (its bridge port
#            goes down: rank 2 silent, no connection closes) and the clock
#            starts then; the launcher kills rank 2 after
#            COHORT_ELASTIC_HEARTBEAT_TIMEOUT_S (10 s unless set) without a
#            heartbeat, and the survivors abandon their collective with it
#   torchrun torchrun --nnodes=1:1 --nproc_per_node=3 --max_restarts=3 (1.13 spells
#            its flags with underscores; 2.x also takes --nproc-per-node)
#            bench/elastic_torchrun_peer.py (DDP over gloo, a checkpoint
#            every epoch and resume from it, as PyTorch's docs recommend)
# Reported per side, medians over --reps: recovery (from the killed rank's
# "kill at T" to rank 0's first step completed in a world formed after the
# kill: a later membership epoch, or torchrun's restart), completed steps
# lost (steps rank 0 finished before the kill that ran again after it), and
# the job's wall time; then torchrun's recovery over cohort's.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=$repo/build
reps=3
kill_step=15
rows=960
batch=32
model=mlp
hosts=1
kill_rank=1
strategy=
cut_link=0
usage_error() { echo "elastic.sh: $* (see the header of $0)" >&2; exit 2; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build-dir) build_dir=$(realpath -m "${2:?--build-dir needs a value}"); shift 2 ;;
    --reps) reps=${2:?--reps needs a value}; shift 2 ;;
    --kill-step) kill_step=${2:?--kill-step needs a value}; shift 2 ;;
    --rows) rows=${2:?--rows needs a value}; shift 2 ;;
    --batch) batch=${2:?--batch needs a value}; shift 2 ;;
    --model) model=${2:?--model needs a value}; shift 2 ;;
    --hosts) hosts=${2:?--hosts needs a value}; shift 2 ;;
    --kill-rank) kill_rank=${2:?--kill-rank needs a value}; shift 2 ;;
    --strategy) strategy=${2:?--strategy needs a value}; shift 2 ;;
    --cut-link) cut_link=1; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
    *) usage_error "unknown argument '$1'" ;;
  esac
done
for v in "$reps" "$kill_step" "$rows" "$batch" "$kill_rank"; do
  [[ $v =~ ^[0-9]+$ ]] || usage_error "expected a non-negative integer, got '$v'"
done
[[ $model == mlp || $model == cnn ]] || usage_error "--model must be mlp or cnn, got '$model'"
[[ $hosts == 1 || $hosts == 2 ]] || usage_error "--hosts must be 1 or 2, got '$hosts'"
(( cut_link == 0 || hosts == 2 )) || usage_error "--cut-link needs --hosts 2"
# Parameter servers: the last slots serve, beside the 3 workers.
servers=0
if [[ $strategy == parameter_server* ]]; then
  servers=1
  [[ $strategy =~ servers=([0-9]+) ]] && servers=${BASH_REMATCH[1]}
  (( cut_link == 0 && hosts == 1 )) || usage_error "--strategy parameter_server runs on one host, without --cut-link"
fi
(( kill_rank < 3 + servers )) || usage_error "--kill-rank must be below $(( 3 + servers )), got '$kill_rank'"
run=$build_dir/cohort/launcher/cohortrun
program=$build_dir/tests/torch/elastic_program
for p in "$run" "$program" /usr/bin/torchrun; do [[ -x $p ]] || { echo "elastic.sh: $p is missing" >&2; exit 1; }; done
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1

out=$(mktemp -d)
prefix=
cleanup() {
  [[ -z $prefix ]] || "$repo/scripts/cluster.sh" down --prefix "$prefix" >/dev/null 2>&1 || true
  [[ -n ${KEEP_LOGS:-} ]] || rm -rf "$out"
}
trap cleanup EXIT
[[ -n ${KEEP_LOGS:-} ]] && echo "elastic.sh: logs in $out"
placement=(-np $(( 3 + servers )))
sides=(cohort torchrun)
(( kill_rank >= 3 )) && sides=(cohort)  # a server's loss: torchrun has none
if [[ $hosts == 2 ]]; then
  info=$("$repo/scripts/cluster.sh" up --hosts 2 --link 1gbit --owner $$)
  prefix=$(sed -n 's/^prefix=//p' <<<"$info")
  bridge=$(sed -n 's/^bridge=[^ ]* //p' <<<"$info")
  placement=(-H "$prefix-h0:2,$prefix-h1:1" --launch-template 'ip netns exec {host}' --store-addr "$bridge")
  sides=(cohort)
fi
for (( r = 1; r <= reps; r++ )); do
  for side in "${sides[@]}"; do
    # Alternate which side goes first.
    (( r % 2 == 0 && ${#sides[@]} == 2 )) && side=$([[ $side == cohort ]] && echo torchrun || echo cohort)
    log=$out/$side.$r.log
    start=$(date +%s.%N)
    if [[ $side == cohort ]]; then
      training=(--batch "$batch") stop=(--kill "$kill_rank:$kill_step:before") restarts=3 cutter=
      if [[ -n $strategy ]] || (( cut_link )); then
        training=(--fit --strategy "${strategy:-multi_worker:style=ddp}" --batch $(( 3 * batch )))
        stop=(--kill "$kill_rank:$kill_step:begin")
        # A server runs no steps: worker 0 kills it.
        (( kill_rank >= 3 )) && stop=(--kill "$kill_rank:$kill_step:begin:0")
      fi
      if (( cut_link )); then
        # Rank 0 writes a marker after the step; the link goes down as soon
        # as it appears ("kill at" is then the cut's time). No replacement:
        # h1 stays unreachable.
        stop=(--write "$kill_step:$out/cut.$r:x") restarts=0
        ( while [[ ! -e $out/cut.$r ]]; do sleep 0.01; done
          ip link set dev "$prefix-v1" down
          echo "kill at $(date +%s.%N)" >"$out/cut.$r.time" ) &
        cutter=$!
      fi
      "$run" "${placement[@]}" --min-np $(( 2 + servers )) --max-restarts "$restarts" "$program" --model "$model" \
        --rows "$rows" \
        --epochs 3 "${training[@]}" "${stop[@]}" >"$log" 2>&1 ||
        echo "elastic.sh: cohort run $r failed" >&2
      if [[ -n $cutter ]]; then
        kill "$cutter" 2>/dev/null || true
        ip link set dev "$prefix-v1" up
        cat "$out/cut.$r.time" >>"$log" 2>/dev/null || true
      fi
    else
      port=$(( 29500 + RANDOM % 1000 ))
      /usr/bin/torchrun --nnodes=1:1 --nproc_per_node=3 --max_restarts=3 --master_port "$port" \
        --redirects 2 --tee 1 --log_dir "$out/tlog.$r" \
        "$repo/bench/elastic_torchrun_peer.py" --checkpoint "$out/ckpt.$r.pt" --rows "$rows" --batch "$batch" \
        --epochs 3 --kill-rank "$kill_rank" --kill-step "$kill_step" --model "$model" >"$log" 2>&1 ||
        echo "elastic.sh: torchrun run $r failed" >&2
    fi
    echo "$side $r $(echo "$(date +%s.%N) - $start" | bc)" >>"$out/wall.txt"
  done
done

/usr/bin/python3 - "$out" "$reps" "${sides[@]}" <<'PY'
import re, statistics, sys
out, reps, sides = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
wall = {}
for line in open(f"{out}/wall.txt"):
    side, r, s = line.split()
    wall.setdefault(side, []).append(float(s))
rows = {}
for side in sides:
    rec, lost = [], []
    for r in range(1, reps + 1):
        text = open(f"{out}/{side}.{r}.log").read()
        kill = [float(t) for t in re.findall(r"kill at ([0-9.]+)", text)]
        steps = [(int(k), int(e), float(t))
                 for k, e, t in re.findall(r"step (\d+) world \d+ epoch (\d+) at ([0-9.]+)", text)]
        if not kill or not steps:
            print(f"{side} rep {r}: no kill or no steps in the log")
            continue
        before = [(k, e) for k, e, t in steps if t < kill[0]]
        # Steps the world of the kill finished after it are not recovery.
        epoch = before[-1][1] if before else 0
        after = [(k, t) for k, e, t in steps if t > kill[0] and e > epoch]
        rec.append(after[0][1] - kill[0])
        done = max(k for k, _ in before) if before else -1
        lost.append(len({k for k, _ in after if k <= done}))
    rows[side] = (rec, lost)
    if rec:
        print(f"{side:9s} recovery median {statistics.median(rec):8.3f} s (runs: {', '.join(f'{x:.3f}' for x in rec)}); "
              f"completed steps lost median {statistics.median(lost)}; wall median {statistics.median(wall[side]):.1f} s")
if rows.get("cohort", ([],))[0] and rows.get("torchrun", ([],))[0]:
    print(f"torchrun / cohort recovery: {statistics.median(rows['torchrun'][0]) / statistics.median(rows['cohort'][0]):.1f}x")
PY
