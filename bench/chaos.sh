#!/usr/bin/env bash
# Chaos soak (issue 12): ROUNDS real training jobs, each with one random
# fault, each asserting the outcome cohort documents for that fault.
#
# A round runs `cohortrun -np RANKS fashion_mnist --strategy multi_worker` on
# Fashion-MNIST (10 epochs of --limit-train examples, the mlp by default, so
# that the fault lands mid-training; a checkpoint every few steps on a tmpfs
# of its own in a private mount namespace), waits until the first checkpoint
# exists, then injects one fault at a random moment:
#
#   kill          SIGKILL of a random rank. Outcome: cohortrun fails and its
#                 report names that rank and SIGKILL.
#   stop          SIGSTOP of a random rank (a straggler that never returns).
#                 Outcome: the job ends within its bound (below) with an
#                 error naming that rank.
#   store         strangers on the store's port: random bytes, an HTTP
#                 request, a greeting with a wrong proof, idle connections.
#                 Outcome: the job is not disturbed: it finishes, exit 0.
#   disk          the checkpoint file system fills up. Outcome: rank 0 fails
#                 with "No space left on device", the job ends, and the
#                 checkpoint in place is the last good one.
#   link          a cut cable. This round runs on an emulated cluster
#                 (scripts/cluster.sh up --hosts RANKS: one rank per host,
#                 `cohortrun -H h0,h1,.. --launch-template 'ip netns exec
#                 {host}' --backend gloo`), and the bridge port of a random
#                 rank's host goes down: its packets vanish both ways, no
#                 connection is reset, and its store is out of reach too.
#                 Outcome: the job ends within its bound with an error
#                 naming that rank as the one that never answered, no
#                 process is left in any host's namespace, and the cluster
#                 is removed (scripts/cluster.sh down: no namespace, bridge
#                 or record left).
#
# The bound of `stop` and `link`, where a peer falls silent and only a
# timeout can tell: the collective in flight times out COHORT_TIMEOUT_S
# after it began, the failing ranks wait 1 s for their peers' failure
# reports, and cohortrun gives the silent rank --grace-s 2 between SIGTERM
# and SIGKILL; 10 s more for a loaded machine. A wait bounded only by a
# second timeout (2 x COHORT_TIMEOUT_S) exceeds it.
#
# Every round also asserts: no /dev/shm/cohort-<job>-* segment and no
# process of the job is left, and the checkpoint at the path verifies (its
# header, both CRC-32s, and the LibTorch archive inside, a zip whose member
# CRCs check, holding model, optimizer and training_state); after a full
# disk, no partial checkpoint file is left either.
# Detection time: from the fault to cohortrun's exit (store: job duration).
#
# Usage: bench/chaos.sh [ROUNDS] [--build-dir DIR] [--ranks N] [--faults LIST]
#          [--seed S] [--limit-train N] [--model mlp|cnn] [--timeout-s S]
#          [--logs DIR]
#   ROUNDS        rounds to run (default 20)
#   --faults      comma-separated subset of kill,stop,store,disk,link
#                 (default all)
#   --ranks       ranks per job (default 3; for link, also hosts)
#   --seed        seeds the fault choice, rank and moment (default: $RANDOM)
#   --timeout-s   COHORT_TIMEOUT_S of the jobs, the base of the bound (20)
#   --logs        where the rounds run, emptied first (default BUILD/chaos)
# Needs root (a tmpfs in `unshare -m`; network namespaces for link),
# cohortrun and fashion_mnist built in the build dir (default build/), the
# Fashion-MNIST IDX files, and Debian's PyTorch (python3-torch: bootstrap.sh
# --with-torch), which loads every checkpoint left behind.
# Prints one line per round and, at the end, rounds run and passed and the
# detection times (median, max) per fault. Logs of failed rounds stay in
# the --logs directory. Exit status: 0 when every round passed, 1 otherwise, 2 on bad
# arguments.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=$repo/build
work=
rounds=20
ranks=3
faults=kill,stop,store,disk,link
seed=$RANDOM
limit_train=3000
model=mlp
timeout_s=20
grace_s=2          # cohortrun --grace-s: SIGTERM to SIGKILL after a failure
report_grace_s=1   # gloo's FailureReport grace (comm/gloo/communicator.h)

usage_error() { echo "chaos.sh: $* (see the header of bench/chaos.sh)" >&2; exit 2; }

while [[ $# -gt 0 ]]; do
  case "$1" in
    --build-dir) build_dir=$(realpath -m "${2:?--build-dir needs a value}"); shift 2 ;;
    --ranks) ranks=${2:?--ranks needs a value}; shift 2 ;;
    --faults) faults=${2:?--faults needs a value}; shift 2 ;;
    --seed) seed=${2:?--seed needs a value}; shift 2 ;;
    --limit-train) limit_train=${2:?--limit-train needs a value}; shift 2 ;;
    --model) model=${2:?--model needs a value}; shift 2 ;;
    --timeout-s) timeout_s=${2:?--timeout-s needs a value}; shift 2 ;;
    --logs) work=$(realpath -m "${2:?--logs needs a value}"); shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) usage_error "unknown argument '$1'" ;;
    *) rounds=$1; shift ;;
  esac
done
[[ $rounds =~ ^[1-9][0-9]*$ ]] || usage_error "ROUNDS must be a positive integer, not '$rounds'"
[[ $ranks =~ ^[2-8]$ ]] || usage_error "--ranks must be 2..8, not '$ranks'"
[[ $seed =~ ^[0-9]+$ ]] || usage_error "--seed must be a number, not '$seed'"
[[ $timeout_s =~ ^[1-9][0-9]*$ ]] || usage_error "--timeout-s must be a positive integer, not '$timeout_s'"
IFS=, read -r -a fault_list <<< "$faults"
for f in "${fault_list[@]}"; do
  [[ $f =~ ^(kill|stop|store|disk|link)$ ]] || usage_error "unknown fault '$f' (kill, stop, store, disk, link)"
done
[[ $(id -u) == 0 ]] || usage_error "needs root (a tmpfs in a private mount namespace, network namespaces)"
# See the header: the bound of the faults only a timeout detects.
silent_bound_s=$((timeout_s + report_grace_s + grace_s + 10))

cohortrun=$build_dir/cohort/launcher/cohortrun
trainer=$build_dir/examples/fashion_mnist
for f in "$cohortrun" "$trainer"; do
  [[ -x $f ]] || usage_error "$f is not built (cmake --build $build_dir --target cohortrun fashion_mnist)"
done
# Known before the first round, not as a failed checkpoint check in each.
/usr/bin/python3 -c 'import torch' 2>/dev/null ||
  usage_error "Debian's PyTorch does not load in /usr/bin/python3 (scripts/bootstrap.sh --with-torch installs python3-torch)"

work=${work:-$build_dir/chaos}
rm -rf "$work"
mkdir -p "$work"
RANDOM=$seed

cluster=$repo/scripts/cluster.sh
cluster_prefix=""
# shellcheck disable=SC2317  # called by the EXIT trap
remove_cluster() {
  [[ -z $cluster_prefix ]] || "$cluster" down --prefix "$cluster_prefix" >/dev/null 2>&1 || true
}
trap remove_cluster EXIT
trap 'exit 130' INT TERM HUP

# An emulated cluster of $1 hosts; sets cluster_prefix, bridge, hosts.
cluster_up() {
  local info
  info=$("$cluster" up --hosts "$1" --owner $$) || return 1
  cluster_prefix=$(sed -n 's/^prefix=//p' <<< "$info")
  bridge=$(sed -n 's/^bridge=[^ ]* //p' <<< "$info")
  mapfile -t hosts < <(sed -n 's/^host=\([^ ]*\) .*/\1/p' <<< "$info")
}

# Removes the cluster; prints what outlived the job or the removal.
cluster_down() {
  local h pids
  for h in "${hosts[@]}"; do
    pids=$(ip netns pids "$h" 2>/dev/null | tr '\n' ' ')
    [[ -z $pids ]] || echo "processes left in $h: $pids"
  done
  "$cluster" down --prefix "$cluster_prefix" > /dev/null || echo "scripts/cluster.sh down failed"
  ip netns list | grep -q "^$cluster_prefix-" && echo "namespaces of $cluster_prefix left"
  ip link show "$cluster_prefix-br" > /dev/null 2>&1 && echo "bridge $cluster_prefix-br left"
  [[ ! -e /run/cohort-cluster/$cluster_prefix.env ]] || echo "the record of $cluster_prefix left"
}

now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }

# The pids of the job's ranks, "rank pid" per line.
rank_pids() {
  local job=$1 p
  for p in $(pgrep -x fashion_mnist || true); do
    if tr '\0' '\n' 2>/dev/null < "/proc/$p/environ" | grep -qx "COHORT_JOB_ID=$job"; then
      echo "$(tr '\0' '\n' 2>/dev/null < "/proc/$p/environ" | sed -n 's/^COHORT_RANK=//p') $p"
    fi
  done
}

store_port() {
  local pid=$1
  tr '\0' '\n' < "/proc/$pid/environ" | sed -n 's/^COHORT_STORE_ADDR=.*://p'
}

# Strangers on the store's port for a few seconds.
store_strangers() {
  python3 - "$1" <<'EOF'
import os, socket, struct, sys, time
port = int(sys.argv[1])
idle = []
def send(data, linger=0.05):
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=2)
        s.sendall(data)
        time.sleep(linger)
        s.close()
    except OSError:
        pass
for i in range(20):
    send(os.urandom(1 + i * 37))
    send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    body = b"cohort-store/2" + os.urandom(64)
    send(struct.pack("<I", len(body)) + body)
    send(struct.pack("<I", 1 << 30) + b"x" * 16)
    try:
        idle.append(socket.create_connection(("127.0.0.1", port), timeout=2))
    except OSError:
        pass
time.sleep(3)
for s in idle:
    s.close()
EOF
}

# Verifies a checkpoint as load_checkpoint() does before loading (header,
# CRCs), then loads the LibTorch archive inside with Debian's PyTorch
# (torch.jit.load): its member CRCs, the model and optimizer modules, and a
# training_state record of format 1.
verify_checkpoint() {
  /usr/bin/python3 - "$1" <<'EOF'
import io, struct, sys, zipfile, zlib
import torch
data = open(sys.argv[1], "rb").read()
assert len(data) >= 32, "shorter than the header"
assert data[:8] == b"COHORTCK", "bad magic"
version, flags, size, crc, head_crc = struct.unpack("<IIQII", data[8:32])
assert head_crc == zlib.crc32(data[:28]), "header checksum"
assert version == 1 and size == len(data) - 32, "version or size"
payload = data[32:]
assert crc == zlib.crc32(payload), "payload checksum"
assert zipfile.ZipFile(io.BytesIO(payload)).testzip() is None, "archive member checksum"
archive = torch.jit.load(io.BytesIO(payload))
children = dict(archive.named_children())
assert "model" in children and "optimizer" in children, "no model or optimizer record"
assert int(archive.training_state[0]) == 1, "training_state of another format"
EOF
}

declare -A detect
passed=0
ran=0
for ((round = 1; round <= rounds; ++round)); do
  fault=${fault_list[RANDOM % ${#fault_list[@]}]}
  victim=$((RANDOM % ranks))
  delay_ms=$((RANDOM % 1500))
  job=chaos$$r$round
  dir=$work/round-$round
  ckdir=$dir/checkpoints
  mkdir -p "$ckdir"
  problems=()
  # Where the ranks run: this machine's shm, or one emulated host per rank.
  placement=(-np "$ranks")
  if [[ $fault == link ]]; then
    if cluster_up "$ranks"; then
      placement=(-H "$(IFS=,; echo "${hosts[*]}")" --launch-template 'ip netns exec {host}'
                 --store-addr "$bridge" --backend gloo)
    else
      problems+=("scripts/cluster.sh up failed")
    fi
  fi
  start=$(now)
  # The job in a private mount namespace with a tmpfs under the checkpoint;
  # the wrapper copies the checkpoints out when the job has ended.
  COHORT_TIMEOUT_S=$timeout_s COHORT_STALL_WARNING_S=2 COHORT_BANNER=0 \
    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1 \
    unshare -m bash -c '
      ck=$1; out=$2; shift 2
      mount -t tmpfs -o size=8m chaos "$ck" || exit 90
      "$@"; rc=$?
      mkdir -p "$out" && cp -a "$ck"/ckpt.bin* "$out"/ 2>/dev/null
      exit $rc' _ "$ckdir" "$dir/after" \
      "$cohortrun" "${placement[@]}" --job-id "$job" --output pipe --grace-s "$grace_s" \
      "$trainer" --strategy multi_worker --model "$model" --epochs 10 --limit-train "$limit_train" \
      --limit-test 500 --batch-size 64 --threads 1 --progress none --checkpoint "$ckdir/ckpt.bin" \
      --checkpoint-every 4 --metrics "$dir/metrics.jsonl" > "$dir/stdout" 2> "$dir/stderr" &
  wrapper=$!
  # The first checkpoint, seen through the job's mount namespace.
  pids=""
  for ((t = 0; t < 1200; ++t)); do
    cr=$(pgrep -P "$wrapper" -x cohortrun || true)
    if [[ -n $cr && -f /proc/$cr/root$ckdir/ckpt.bin ]]; then pids=$(rank_pids "$job"); break; fi
    kill -0 "$wrapper" 2>/dev/null || break
    sleep 0.1
  done
  t_fault=""
  if [[ -z $pids ]]; then
    problems+=("the job never wrote its first checkpoint")
  else
    sleep "$(awk -v m="$delay_ms" 'BEGIN { print m / 1000 }')"
    victim_pid=$(awk -v r="$victim" '$1 == r { print $2 }' <<< "$(rank_pids "$job")")
    t_fault=$(now)
    case $fault in
      kill) [[ -n $victim_pid ]] && kill -KILL "$victim_pid" ;;
      stop) [[ -n $victim_pid ]] && kill -STOP "$victim_pid" ;;
      store) store_strangers "$(store_port "$victim_pid")" ;;
      disk) nsenter -t "$cr" -m dd if=/dev/zero of="$ckdir/filler" bs=64k status=none 2>/dev/null || true ;;
      link) ip link set "$cluster_prefix-v$victim" down ;;
    esac
    [[ -n $victim_pid || $fault == disk ]] || problems+=("rank $victim had ended before the fault")
  fi
  rc=0
  wait "$wrapper" || rc=$?
  t_end=$(now)
  [[ -n $t_fault ]] || t_fault=$start
  took=$(elapsed "$t_fault" "$t_end")
  [[ $fault == store ]] && took=$(elapsed "$start" "$t_end")
  err=$(cat "$dir/stderr")

  case $fault in
    kill)
      [[ $rc != 0 ]] || problems+=("cohortrun exited 0")
      grep -q "rank $victim was killed by signal 9 (SIGKILL)" <<< "$err" ||
        problems+=("the report does not say 'rank $victim was killed by signal 9 (SIGKILL)'") ;;
    stop|link)
      [[ $rc != 0 ]] || problems+=("cohortrun exited 0")
      # The shm communicator's timeout names the rank that never arrived,
      # gloo's the one that reported no failure or became unreachable.
      grep -Eq "(waiting for rank $victim |have not arrived: ([0-9]+, )*$victim(,|$| )|rank $victim \(pid [0-9]+ on [^)]*\) never finished|reported no failure \(not in this call yet, or hung\): ([0-9]+, )*$victim(,|;|$)|rank $victim died or became unreachable)" \
        <<< "$err" || problems+=("no error names rank $victim as the one that never answered")
      awk -v t="$took" -v b="$silent_bound_s" 'BEGIN { exit !(t <= b) }' ||
        problems+=("took ${took}s, beyond the bound of ${silent_bound_s}s") ;;
    store)
      [[ $rc == 0 ]] || problems+=("the job failed (exit $rc)")
      grep -q "final test accuracy" "$dir/stdout" || problems+=("no final accuracy line") ;;
    disk)
      [[ $rc != 0 ]] || problems+=("cohortrun exited 0")
      grep -q "No space left on device" <<< "$err" || problems+=("no 'No space left on device' error") ;;
  esac
  leftover_segments=$(ls /dev/shm | grep -c "^cohort-$job-" || true)
  [[ $leftover_segments == 0 ]] || problems+=("$leftover_segments /dev/shm segments left")
  [[ -z $(rank_pids "$job") ]] || problems+=("processes of the job left: $(rank_pids "$job" | tr '\n' ' ')")
  if [[ -n $cluster_prefix ]]; then
    while read -r line; do problems+=("$line"); done < <(cluster_down)
    cluster_prefix=""
  fi
  if [[ -f $dir/after/ckpt.bin ]]; then
    verify_checkpoint "$dir/after/ckpt.bin" 2> "$dir/verify" || problems+=("checkpoint: $(tail -1 "$dir/verify")")
    # A failed save removes its partial file (a SIGKILL during a save cannot).
    [[ $fault != disk ]] || ! ls "$dir/after" | grep -q '\.tmp\.' || problems+=("a partial checkpoint (.tmp) was left")
  else
    problems+=("no checkpoint at the path")
  fi

  ran=$((ran + 1))
  if [[ ${#problems[@]} == 0 ]]; then
    passed=$((passed + 1))
    detect[$fault]+="$took "
    printf 'round %d: %-5s rank %d: passed in %ss (exit %d)\n' "$round" "$fault" "$victim" "$took" "$rc"
    rm -rf "$dir"
  else
    printf 'round %d: %-5s rank %d: FAILED (exit %d): %s; logs in %s\n' "$round" "$fault" "$victim" "$rc" \
      "$(IFS=';'; echo "${problems[*]}")" "$dir"
  fi
  # A stopped rank that survived its job must not outlive the round.
  for p in $(rank_pids "$job" | awk '{ print $2 }'); do kill -KILL "$p" 2>/dev/null || true; done
done

echo "chaos: $ran rounds, $passed passed (seed $seed, $ranks ranks, $model, --limit-train $limit_train)"
for f in kill stop store disk link; do
  [[ -n ${detect[$f]:-} ]] || continue
  tr ' ' '\n' <<< "${detect[$f]}" | sed '/^$/d' | sort -g |
    awk -v f="$f" '{ v[NR] = $1 } END {
      m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
      label = (f == "store") ? "job time" : "detection"
      printf "chaos: %-5s %d passed, %s median %.2fs, max %.2fs\n", f, NR, label, m, v[NR] }'
done
[[ $passed == "$ran" ]]
