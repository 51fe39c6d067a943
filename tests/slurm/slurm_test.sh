#!/usr/bin/env bash
# cohort under Slurm, for real: starts a one-machine Slurm cluster in a
# temporary directory (munged with a fresh key and socket, slurmctld and
# slurmd in the foreground on free ports, a generated slurm.conf without
# cgroups or accounting), runs cohort programs with srun and sbatch, and
# tears it all down, even when a check fails.
#
# Usage: slurm_test.sh --allreduce PROGRAM [--with-mpi] [--with-gloo]
#                      [--fashion-mnist PROGRAM] [--cohortrun PATH]
#                      [--cluster-script scripts/cluster.sh]
#   --allreduce       tests/slurm/slurm_allreduce_program: `srun -n 4` of it
#                     (shm, then gloo, through a store at the step's first
#                     node), `srun --mpi=pmix -n 4` (mpi), and an sbatch
#                     script that calls srun
#   --with-mpi        cohort is built with MPI: --mpi=pmix must pick it
#   --with-gloo       cohort is built with gloo: run with it too
#   --fashion-mnist   examples' fashion_mnist: `srun -n 2`, one epoch of the
#                     mlp on a subset, which must reach 60% test accuracy
#   --cohortrun       cohortrun: run inside an sbatch allocation without a
#                     host list (--check, a launch, -np beyond the tasks),
#                     and from a host name that is not the node's, so that
#                     its ranks start through srun
#   --cluster-script  with --cohortrun: two more Slurm nodes, each a host of
#                     an emulated cluster (a network namespace with its own
#                     address, scripts/cluster.sh) with a slurmd of its
#                     own, in a partition of their own; an sbatch job over
#                     both runs cohortrun --check and a launch there
#
# Exit status: 0 passed, 1 failed, 77 skipped (Slurm not installed, not
# root, or its daemons would not start: the reason is printed).
set -euo pipefail

allreduce=""
fashion_mnist=""
cohortrun=""
cluster_script=""
pmix_backend=shm
with_gloo=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --allreduce) allreduce=$2; shift 2 ;;
    --with-mpi) pmix_backend=mpi; shift ;;
    --with-gloo) with_gloo=1; shift ;;
    --fashion-mnist) fashion_mnist=$2; shift 2 ;;
    --cohortrun) cohortrun=$2; shift 2 ;;
    --cluster-script) cluster_script=$2; shift 2 ;;
    *) echo "slurm_test.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
[[ -x $allreduce ]] || { echo "slurm_test.sh: --allreduce needs the built program, got '$allreduce'" >&2; exit 2; }

skip() {
  echo "SKIPPED: $*"
  exit 77
}
fail() {
  echo "FAILED: $*" >&2
  exit 1
}

for tool in munged munge slurmctld slurmd srun sbatch sinfo squeue scancel; do
  command -v "$tool" >/dev/null ||
    skip "'$tool' not found: Slurm is not installed (scripts/bootstrap.sh --with-slurm installs slurm-wlm and munge)"
done
[[ $(id -u) == 0 ]] || skip "slurmd starts tasks as their users and must run as root; this test runs as $(id -un)"

cluster_prefix=""
dir=$(mktemp -d /tmp/cohort-slurm.XXXXXX)
chmod 755 "$dir"
conf=$dir/slurm.conf
daemon_pids=()
# Job ids start at a number of this run's own, so that the shared-memory
# segments of its jobs (/dev/shm/cohort-slurm-<job>.<step>-*) and their store
# ports (derived from the job id) differ from another run's.
first_job=$(( ($$ % 60000 + 1) * 1000 ))

# Everything this cluster started carries SLURM_CONF=$conf in its
# environment: the daemons are started with it, and so is every Slurm
# command here, which passes it on to the tasks. Nothing else on the machine
# does (this shell sets it for those commands only, never exports it).
cluster_processes() {
  local p
  for p in /proc/[0-9]*; do
    tr '\0' '\n' 2>/dev/null < "$p/environ" | grep -qxF "SLURM_CONF=$conf" && echo "${p#/proc/}"
  done
  return 0
}
slurm() { SLURM_CONF=$conf "$@"; }
# Running, not a zombie waiting for this shell to reap it.
running() {
  local state
  state=$(ps -o stat= -p "$1" 2>/dev/null)
  [[ -n $state && $state != Z* ]]
}

leftover_segments() {
  local id
  for ((id = first_job; id < first_job + 20; id++)); do
    compgen -G "/dev/shm/cohort-slurm-$id.*" || true
  done
}

cleanup() {
  local status=$?
  set +e
  trap - EXIT INT TERM HUP
  # Jobs first, while the controller can still end them cleanly.
  if [[ -f $conf && ${#daemon_pids[@]} -ge 3 ]] && running "${daemon_pids[1]}"; then
    slurm timeout 10 scancel --quiet --user="$(id -un)" >/dev/null 2>&1
  fi
  # The daemons (SIGTERM, then SIGKILL), then whatever they left: steps,
  # tasks, or an srun of ours.
  for pid in "${daemon_pids[@]}"; do kill "$pid" 2>/dev/null; done
  for _ in $(seq 50); do
    alive=0
    for pid in "${daemon_pids[@]}"; do running "$pid" && alive=1; done
    [[ $alive == 0 ]] && break
    sleep 0.1
  done
  for pid in "${daemon_pids[@]}" $(cluster_processes); do kill -9 "$pid" 2>/dev/null; done
  wait 2>/dev/null
  local segments
  segments=$(leftover_segments)
  [[ -n $segments ]] && rm -f $segments
  [[ -n $cluster_prefix ]] && "$cluster_script" down --prefix "$cluster_prefix" >/dev/null 2>&1
  if [[ $status != 0 && $status != 77 ]]; then
    for log in "$dir"/slurmctld.log "$dir"/slurmd.*.log "$dir"/munged.log; do
      [[ -s $log ]] && { echo "--- last lines of ${log##*/}:"; tail -n 15 "$log"; }
    done
  fi
  rm -rf "$dir"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

# Two free TCP ports for slurmctld and slurmd.
read -r ctld_port slurmd_port < <(python3 -c '
import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*[x.getsockname()[1] for x in s])')

# The node is this host, by its name, as on a real cluster: cohort's store
# address under srun is the step's first node name. slurmctld must run on the
# host that SlurmctldHost names.
host=$(hostname -s)
node=$host
getent hosts "$node" >/dev/null || node=localhost

# The emulated hosts: Slurm nodes cohortn0 and cohortn1, each a network
# namespace with its own address on a bridge, whose address (in this
# namespace) is the controller's, so that every slurmd reaches it.
ctl_addr=127.0.0.1
emulated_nodes=()
if [[ -n $cohortrun && -n $cluster_script ]]; then
  info=$("$cluster_script" up --hosts 2 --owner $$) || skip "scripts/cluster.sh could not make two emulated hosts"
  cluster_prefix=$(sed -n 's/^prefix=//p' <<<"$info")
  ctl_addr=$(sed -n 's/^bridge=[^ ]* //p' <<<"$info")
  mapfile -t emulated_hosts < <(sed -n 's/^host=//p' <<<"$info")  # "namespace address"
  for i in "${!emulated_hosts[@]}"; do emulated_nodes+=("cohortn$i"); done
fi

mkdir -m 700 "$dir/munge"
mkdir -m 755 "$dir/munge-run" "$dir/spool" "$dir/state"
for n in "$node" "${emulated_nodes[@]}"; do mkdir -m 755 "$dir/spool/$n"; done
head -c 1024 /dev/urandom > "$dir/munge/munge.key"
chmod 400 "$dir/munge/munge.key"

cat > "$conf" <<EOF
ClusterName=cohorttest
SlurmctldHost=$host($ctl_addr)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge-run/socket
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.%n.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SwitchType=switch/none
MpiDefault=none
SchedulerType=sched/builtin
SchedulerParameters=batch_sched_delay=0
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
FirstJobId=$first_job
ReturnToService=2
InactiveLimit=0
KillWait=2
MinJobAge=2
NodeName=$node NodeAddr=127.0.0.1 CPUs=$(nproc) State=UNKNOWN
PartitionName=test Nodes=$node Default=YES MaxTime=10 State=UP OverSubscribe=YES
EOF
for i in "${!emulated_nodes[@]}"; do
  read -r _ address <<<"${emulated_hosts[$i]}"
  echo "NodeName=${emulated_nodes[$i]} NodeAddr=$address CPUs=$(nproc) State=UNKNOWN" >>"$conf"
done
if (( ${#emulated_nodes[@]} )); then
  echo "PartitionName=hosts Nodes=cohortn[0-$(( ${#emulated_nodes[@]} - 1 ))] MaxTime=10 State=UP OverSubscribe=YES" >>"$conf"
fi

SLURM_CONF=$conf munged --foreground --force --key-file="$dir/munge/munge.key" \
  --socket="$dir/munge-run/socket" --pid-file="$dir/munge-run/munged.pid" \
  --seed-file="$dir/munge/seed" --log-file="$dir/munged.log" >/dev/null 2>&1 &
daemon_pids+=($!)
SLURM_CONF=$conf slurmctld -D -f "$conf" >/dev/null 2>&1 &
daemon_pids+=($!)
SLURM_CONF=$conf slurmd -D -f "$conf" -N "$node" >/dev/null 2>&1 &
daemon_pids+=($!)
for i in "${!emulated_nodes[@]}"; do
  read -r namespace _ <<<"${emulated_hosts[$i]}"
  # nsenter, not `ip netns exec`: that mounts a sysfs of the namespace's
  # own, without the cgroup file system that slurmd initialises.
  SLURM_CONF=$conf nsenter --net="/run/netns/$namespace" slurmd -D -f "$conf" -N "${emulated_nodes[$i]}" \
    >/dev/null 2>&1 &
  daemon_pids+=($!)
done

started=$SECONDS
all_nodes=$(IFS=,; echo "$node${emulated_nodes[*]:+,${emulated_nodes[*]}}")
until [[ $(slurm sinfo -h -N -n "$all_nodes" -o %t 2>/dev/null | sort -u) == idle ]]; do
  for pid in "${daemon_pids[@]}"; do
    if ! running "$pid"; then
      tail -n 15 "$dir"/*.log 2>/dev/null
      skip "a Slurm daemon (pid $pid) exited during start-up; its log is above"
    fi
  done
  (( SECONDS - started < 60 )) || { tail -n 15 "$dir"/*.log; skip "the nodes did not become idle within 60 s"; }
  sleep 0.1
done
echo "slurm: cluster up in $((SECONDS - started)) s (nodes $all_nodes, controller port $ctld_port)"

# Tasks must not inherit a launcher of the caller's (ctest may run under
# cohortrun or torchrun variables).
for v in $(compgen -e | grep -E '^(COHORT_(RANK|SIZE|LOCAL_RANK|LOCAL_SIZE|STORE_ADDR|JOB_ID|SECRET|BACKEND)|RANK|WORLD_SIZE|LOCAL_RANK|LOCAL_WORLD_SIZE|MASTER_ADDR|MASTER_PORT|OMPI_.*|PMIX_.*)$'); do
  unset "$v"
done
# A hang fails within a minute instead of holding the test to its timeout.
export COHORT_TIMEOUT_S=60

# runs NAME COMMAND...: runs it with its output in $dir/NAME.out/.err, and
# fails the test (showing both) when it does not exit 0.
run() {
  local name=$1
  shift
  # In the background, so that a signal to this script runs its trap (and
  # the clean-up) at once rather than after the command.
  slurm timeout 300 "$@" >"$dir/$name.out" 2>"$dir/$name.err" &
  if ! wait $!; then
    echo "--- $name: $*" >&2
    cat "$dir/$name.out" "$dir/$name.err" >&2
    fail "$name exited with a non-zero status"
  fi
}

expect() {  # expect NAME TEXT: NAME's stdout or stderr holds TEXT
  grep -qF -- "$2" "$dir/$1.out" "$dir/$1.err" ||
    { cat "$dir/$1.out" "$dir/$1.err" >&2; fail "$1: '$2' not in its output"; }
}

srun_flags=(--overcommit --kill-on-bad-exit=1 --time=5)

# 1. Plain srun (this cluster's MpiDefault=none: no PMIx for MPI): auto
# picks shm for one host; the store is served by task 0 on the step's first
# node, at a port derived from the job id, with no address configured, and
# on loopback, since every task runs on that node (discovery.h).
run srun_auto srun "${srun_flags[@]}" -n 4 "$allreduce"
expect srun_auto "slurm allreduce ok: backend=shm size=4 source=Slurm"
expect srun_auto "cohort: backend shm, 4 ranks on 1 host, store 127.0.0.1:"
sed -n 's/^\(slurm allreduce ok.*\)/srun -n 4: \1/p' "$dir/srun_auto.out"

# 2. The same store for TCP: gloo.
if [[ $with_gloo == 1 ]]; then
  run srun_gloo env COHORT_BACKEND=gloo srun "${srun_flags[@]}" -n 4 "$allreduce"
  expect srun_gloo "slurm allreduce ok: backend=gloo size=4 source=Slurm"
  sed -n 's/^\(slurm allreduce ok.*\)/srun -n 4 (COHORT_BACKEND=gloo): \1/p' "$dir/srun_gloo.out"
fi

# 3. srun --mpi=pmix: with MPI built in, auto picks it.
run srun_pmix srun "${srun_flags[@]}" --mpi=pmix -n 4 "$allreduce"
expect srun_pmix "slurm allreduce ok: backend=$pmix_backend size=4 source=Slurm"
sed -n 's/^\(slurm allreduce ok.*\)/srun --mpi=pmix -n 4: \1/p' "$dir/srun_pmix.out"

# 4. A batch job whose script calls srun, as README.md shows.
cat > "$dir/job.sbatch" <<EOF
#!/bin/bash
#SBATCH --ntasks=3
#SBATCH --overcommit
#SBATCH --time=5
srun --kill-on-bad-exit=1 "$allreduce"
EOF
run sbatch sbatch --wait --output="$dir/job.log" "$dir/job.sbatch"
cat "$dir/job.log" >> "$dir/sbatch.out"
expect sbatch "slurm allreduce ok:"
expect sbatch "size=3 source=Slurm"
echo "sbatch with srun -n 3: $(grep -F 'slurm allreduce ok' "$dir/job.log")"

# 5. The Fashion-MNIST example on 2 tasks: one epoch of the mlp on a subset.
if [[ -n $fashion_mnist ]]; then
  run fashion_mnist srun "${srun_flags[@]}" -n 2 "$fashion_mnist" --epochs 1 --model mlp \
    --limit-train 12000 --limit-test 2000 --progress lines --target-accuracy 60
  expect fashion_mnist "2 ranks on 1 host"
  grep -iE 'accuracy' "$dir/fashion_mnist.out" | tail -n 2 | sed 's/^/srun -n 2 fashion_mnist: /'
else
  echo "fashion_mnist: not built (LibTorch off): srun -n 2 of it not run"
fi

# The batch scripts of cases 6 and 7 mark each step of theirs: "== NAME",
# its output, "== exit STATUS". $log is the script's output.
step_output() { sed -n "/^== $1\$/,/^== exit/p" "$log"; }
step_status() { step_output "$1" | sed -n 's/^== exit //p'; }
expect_step() {  # expect_step NAME STATUS TEXT...: the step exited STATUS and printed every TEXT
  local name=$1 status=$2 text
  shift 2
  [[ $(step_status "$name") == "$status" ]] ||
    { cat "$log" >&2; fail "cohortrun in an allocation, $name: exit $(step_status "$name"), expected $status"; }
  for text in "$@"; do
    step_output "$name" | grep -qF -- "$text" ||
      { cat "$log" >&2; fail "cohortrun in an allocation, $name: '$text' not in its output"; }
  done
}

# 6. cohortrun inside an allocation, with no host list: the allocation's node
# and its tasks are the hosts and -np (slurm_allocation.h). Then the same node
# as another machine, from a cohortrun whose host name (a UTS namespace of
# its own) is not the node's: its ranks start through srun, each a step of
# the job (SLURM_STEP_ID set, the node's host name), and --check probes the
# node through srun too.
if [[ -n $cohortrun ]]; then
  cat > "$dir/cohortrun.sbatch" <<EOF
#!/bin/bash
#SBATCH --ntasks=2
#SBATCH --overcommit
#SBATCH --time=5
set -u
step() { echo "== \$1"; shift; "\$@"; echo "== exit \$?"; }
as_other() { unshare --uts sh -c 'hostname cohort-elsewhere && exec "\$@"' sh "\$@"; }
step check "$cohortrun" --check
step launch "$cohortrun" "$allreduce"
step too-many "$cohortrun" -np 3 "$allreduce"
EOF
  # A node named localhost (this machine's name resolves nowhere) is this
  # machine from any host name: no rank of it starts through srun.
  if [[ $node != localhost ]]; then
    cat >> "$dir/cohortrun.sbatch" <<EOF
step srun-check as_other "$cohortrun" --check
step srun-launch as_other "$cohortrun" -v sh -c 'echo "rank \$COHORT_RANK of \$COHORT_SIZE: step \${SLURM_STEP_ID:-none} on \$(hostname)"'
step srun-allreduce as_other "$cohortrun" "$allreduce"
EOF
  fi
  run cohortrun_sbatch sbatch --wait --output="$dir/cohortrun.log" "$dir/cohortrun.sbatch"
  log=$dir/cohortrun.log
  expect_step check 0 "check: a launch of 2 ranks on 1 host would work"
  expect_step launch 0 "slurm allreduce ok: backend=shm size=2 source=cohortrun"
  expect_step too-many 2 "-np 3 is more than the 2 slot(s) of the Slurm allocation of job" "($node:2)"
  echo "cohortrun in sbatch -n 2: $(step_output launch | grep -F 'slurm allreduce ok')"
  if [[ $node != localhost ]]; then
    expect_step srun-check 0 "check: a launch of 2 ranks on 1 host would work"
    expect_step srun-launch 0 "rank 0 of 2: step " "rank 1 of 2: step " "on $host"
    if step_output srun-launch | grep -q "step none"; then
      cat "$log" >&2
      fail "a rank on the allocation's node did not start through srun"
    fi
    expect_step srun-allreduce 0 "slurm allreduce ok: backend=shm size=2 source=cohortrun"
    echo "cohortrun through srun: $(step_output srun-launch | grep -F 'rank 0 of 2')"
  else
    echo "cohortrun through srun on the node: not run (the node is localhost; case 7's nodes start theirs through srun)"
  fi
else
  echo "cohortrun: not given: cohortrun inside an allocation not run"
fi

# 7. Two Slurm nodes that are two hosts (the emulated cluster): cohortrun in
# an sbatch job over both places 2 ranks on each, starting every rank with
# srun on its node; --check probes both nodes the same way. The node names
# resolve nowhere (as names without DNS would not), so the store address is
# given: the address of the first node, where the batch script runs.
if (( ${#emulated_nodes[@]} )); then
  read -r _ first_address <<<"${emulated_hosts[0]}"
  cat > "$dir/hosts.sbatch" <<EOF
#!/bin/bash
#SBATCH --partition=hosts
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=2
#SBATCH --overcommit
#SBATCH --time=5
set -u
step() { echo "== \$1"; shift; "\$@"; echo "== exit \$?"; }
echo "nodes \$SLURM_JOB_NODELIST, tasks \$SLURM_TASKS_PER_NODE"
step check "$cohortrun" --check --check-topology "$dir/hosts.topology.json" --store-addr $first_address
step launch "$cohortrun" --store-addr $first_address "$allreduce"
step where "$cohortrun" --store-addr $first_address sh -c 'echo "rank \$COHORT_RANK on \$SLURMD_NODENAME (COHORT_HOST=\$COHORT_HOST)"'
EOF
  run hosts_sbatch sbatch --wait --output="$dir/hosts.log" "$dir/hosts.sbatch"
  log=$dir/hosts.log
  grep -qF "nodes cohortn[0-1], tasks 2(x2)" "$log" || { cat "$log" >&2; fail "the two-node job's allocation is not cohortn[0-1] with 2(x2) tasks"; }
  expect_step check 0 "check: a launch of 4 ranks on 2 hosts would work"
  grep -q '"hosts": *2' "$dir/hosts.topology.json" ||
    fail "--check-topology wrote no topology of 2 hosts: $(cat "$dir/hosts.topology.json" 2>&1)"
  expect_step launch 0 "slurm allreduce ok: backend=hierarchical size=4 source=cohortrun"
  expect_step where 0 "rank 0 on cohortn0 (COHORT_HOST=cohortn0)" "rank 1 on cohortn0 (COHORT_HOST=cohortn0)" \
    "rank 2 on cohortn1 (COHORT_HOST=cohortn1)" "rank 3 on cohortn1 (COHORT_HOST=cohortn1)"
  echo "cohortrun in sbatch -N 2 --ntasks-per-node=2: $(step_output launch | grep -F 'slurm allreduce ok')"
  echo "cohortrun --check there:"
  step_output check | sed -n -e '/^host /,/^needed/p' -e '/^  from /,/^$/p' -e '/^cohortrun: check:/p'
fi

# Nothing of the jobs may outlive them: no job, no task, no shared memory.
for _ in $(seq 100); do
  [[ -z $(slurm squeue -h -o %i 2>/dev/null) ]] && break
  sleep 0.1
done
left=$(slurm squeue -h -o '%i %T' 2>/dev/null)
[[ -z $left ]] || fail "jobs still there 10 s after they ended: $left"
# (slurmctld's own helper, slurmscriptd, belongs to the daemons.)
strays=$(for pid in $(cluster_processes); do
  [[ " ${daemon_pids[*]} " == *" $pid "* || $(cat /proc/$pid/comm 2>/dev/null) == slurmscriptd ]] || echo "$pid"
done)
[[ -z $strays ]] || fail "processes of the jobs outlived them: $(ps -o pid=,args= -p "$(echo $strays | tr ' ' ,)")"
segments=$(leftover_segments)
[[ -z $segments ]] || fail "the jobs left shared-memory segments: $segments"
echo "PASSED"
