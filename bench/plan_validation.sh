#!/usr/bin/env bash
# plan_validation.sh: does cohort-plan choose the plan that is fastest when
# measured, and predict it? (issue 35)
#
# Usage: sudo bench/plan_validation.sh [--build-dir DIR] [--reps N] [--steps N] [--out DIR]
#          [--settings "10gbit:0.05ms 1gbit:0.1ms 100mbit:1ms"] [--models "mlp cnn"]
#          [--global-batch B] [--no-memory] [--no-build]
#
# For each link setting RATE:DELAY (scripts/cluster.sh's --link and
# --delay) an emulated cluster of two hosts is made, and:
# 1. `cohortrun --check -np 4 -H h0:2,h1:2 --check-topology` measures it and
#    writes the topology the planner reads (the links' latency and
#    bandwidth, this machine's cores, which the emulated hosts share);
# 2. for each model (synthetic_benchmark mlp of width 1024, 7.4 MB of
#    gradients, and cnn, 6.9 MB: communication- and compute-heavy),
#    profiled on one rank at the batch of a rank of 4 and of a rank alone
#    (a timeline each, `cohort-sim workload`; the profile's compute_at),
#    with each strategy family's own step measured on one rank at both
#    batches (the profile's families: horovod, ddp, zero at stage 1,
#    one_device), and two copies of the one-rank run at once at both
#    batches, for a few seconds each (one copy's timeline: the profile's
#    shared step, what two ranks on this machine's 2 cores cost each
#    other, and their jitter), `cohort-plan --topology` (time objective, free machines)
#    ranks every plan of up to 2 machines of up to 2 ranks, and chooses
#    one (its plan file);
# 3. a grid of the plans it ranked (every machines x ranks per machine x
#    strategy family x backend once, with the planner's best knobs of its
#    kind; 8 or more; the chosen plan, plan 1, is its first row) is
#    measured on the cluster, interleaved and repeated
#    (--reps, medians): synthetic_benchmark with the plan's --strategy
#    (the chosen one through --strategy plan:FILE, as a user runs it), the
#    plan's --backend and tunables, at the global batch's share per rank;
# 4. reported per setting and model: measured time of the chosen plan over
#    the best measured (goal <= 1.10), predicted over measured for the
#    chosen plan (goal within +-15%), and Spearman's rank correlation of
#    predicted and measured over the grid (goal >= 0.8);
# 5. the same three figures again from profiles taken beside the grid: every
#    rep first profiles each model again (all of step 2's runs), and
#    cohort-plan ranks the plans from each rep's profile, so that a
#    prediction and the runs it predicts see the same machine (this shared
#    machine's speed moves by 2x within minutes); each plan's prediction
#    is its median over the reps, and the last column is the measured
#    time, over the best, of the grid plan those predictions rank first;
# 6. the same three figures from each plan's fastest rep (other tenants of
#    this machine only ever add time: the least time is the run they
#    touched least), predicted from the fastest rep's one-rank profile and
#    the measured topology as it is;
# 7. each plan on one machine (shm, one_device), which crosses no emulated
#    link, with its runs of every setting pooled: its median time and
#    prediction, and its time over the best such plan's.
# Unless --no-memory: the memory-limited case, at the first setting: the
# mlp made deep (width 2048, depth 16: 260 MB of parameters in layers of
# 17 MB, so that ZeRO-3's units stay small) and every rank
# limited to the address space a ZeRO-3 rank needs (ulimit -v: a rank's
# baseline measured with a tiny model, plus 1.1 times the least memory the
# planner computes for ZeRO-3 on 4 ranks, which must be below every other
# plan's), so that only ZeRO-3 fits; the planner is told the same limit
# (--memory-bytes-per-rank) and must choose ZeRO-3; every
# grid plan is run, and the ones the planner says do not fit should fail
# (their memory is refused) while its chosen plan runs.
#
# The machine is shared and has 2 cores: 4 ranks oversubscribe it, as the
# topology says (the simulator shares the cores among the ranks). Outputs
# (logs, topologies, profiles, plans, the tables) stay in --out (default
# DIR/bench/results/plan_validation). Exit status 0 when every run
# succeeded (a missed goal is reported, not an error), 1 otherwise, 2 on
# bad arguments.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=$repo/build
reps=3
steps=12
warmup=3
out_dir=
settings="10gbit:0.05ms 1gbit:0.1ms 100mbit:1ms"
models="mlp cnn"
global_batch=128
memory=1
build=1

die() { echo "plan_validation.sh: $*" >&2; exit 1; }
usage_error() { echo "plan_validation.sh: $* (see --help)" >&2; exit 2; }

while [[ $# -gt 0 ]]; do
  case "$1" in
    --build-dir) build_dir=$(realpath -m "${2:?--build-dir needs a value}"); shift 2 ;;
    --reps) reps=${2:?--reps needs a value}; shift 2 ;;
    --steps) steps=${2:?--steps needs a value}; shift 2 ;;
    --out) out_dir=$(realpath -m "${2:?--out needs a value}"); shift 2 ;;
    --settings) settings=${2:?--settings needs a value}; shift 2 ;;
    --models) models=${2:?--models needs a value}; shift 2 ;;
    --global-batch) global_batch=${2:?--global-batch needs a value}; shift 2 ;;
    --no-memory) memory=0; shift ;;
    --no-build) build=0; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
    *) usage_error "unknown argument '$1'" ;;
  esac
done
for v in "$reps" "$steps" "$global_batch"; do
  [[ $v =~ ^[1-9][0-9]*$ ]] || usage_error "expected a positive integer, got '$v'"
done
(( global_batch % 4 == 0 )) || usage_error "--global-batch must be a multiple of 4 (up to 4 replicas), got $global_batch"
for s in $settings; do
  [[ $s =~ ^[0-9]+[kmg]?bit:[0-9.]+(us|ms)$ ]] || usage_error "--settings takes RATE:DELAY such as 1gbit:0.1ms, got '$s'"
done
for m in $models; do [[ $m == mlp || $m == cnn ]] || usage_error "--models takes mlp and cnn, got '$m'"; done
[[ $(id -u) == 0 ]] || usage_error "emulated hosts need root"
out_dir=${out_dir:-$build_dir/bench/results/plan_validation}
mkdir -p "$out_dir"/logs

export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1

if (( build )); then
  cmake --build "$build_dir" -j 2 --target cohortrun cohort-probe cohort-sim cohort-plan synthetic_benchmark >/dev/null ||
    die "build failed in $build_dir (LibTorch needed)"
fi
run=$build_dir/cohort/launcher/cohortrun
sim=$build_dir/tools/sim/cohort-sim
plan=$build_dir/tools/plan/cohort-plan
synthetic=$build_dir/examples/synthetic_benchmark
for p in "$run" "$sim" "$plan" "$synthetic"; do [[ -x $p ]] || die "$p is missing (build it, or drop --no-build)"; done

prefixes=()
cleanup() { for p in "${prefixes[@]}"; do "$repo/scripts/cluster.sh" down --prefix "$p" >/dev/null 2>&1 || true; done; }
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

failed=0
# logrun NAME CMD...: CMD's output to logs/NAME.log; 1 on failure.
logrun() {
  local name=$1
  shift
  if ! timeout 900 "$@" </dev/null >"$out_dir/logs/$name.log" 2>&1; then
    echo "plan_validation.sh: $name failed (log: $out_dir/logs/$name.log)" >&2
    return 1
  fi
}

# --- profiles: one rank, its timeline -> the workload, plus the memory -------
# synthetic_benchmark's models (cohort/models/image_classifiers.cc), SGD
# with momentum: parameters, gradients and one state element each, float32;
# what one example's forward keeps for backward, from the layers' outputs.
# one_rank_program MODEL WIDTH DEPTH BATCH [STRATEGY]: the profile's program
# (horovod's strategy unless STRATEGY), in the array `program` (the profile
# runs it alone, `shared` twice at once).
one_rank_program() {
  program=("$synthetic" --model "$1" --width "$2" --depth "$3" --strategy "${5:-multi_worker:style=horovod}"
           --batch-size "$4" --steps "$steps" --warmup "$warmup" --threads 1)
}
# The strategy each family's own step is measured with (zero's at stage 1).
declare -A family_strategy=([horovod]=multi_worker:style=horovod [ddp]=multi_worker:style=ddp
                            [zero]=zero:stage=1 [one_device]=one_device)
# step_ms LOG: the step time a synthetic_benchmark run printed.
step_ms() { sed -n 's/.*"step_ms":\([0-9.]*\).*/\1/p' "$1" | tail -1; }

# shared NAME MODEL WIDTH DEPTH BATCH: two copies of the one-rank run at
# once (the profile's "shared"), each for about 4 s (as many steps as the
# run alone took 4 s for), so that they overlap although they start apart;
# the first copy's timeline -> NAME.BATCH.shared.workload.json.
shared() {
  local name=$1 model=$2 width=$3 depth=$4 batch=$5 i alone shared_steps
  local -a pids=()
  alone=$(step_ms "$out_dir/logs/profile.$name.$batch.log")
  shared_steps=$(/usr/bin/python3 -c 'import math, sys; print(max(int(sys.argv[1]), math.ceil(4000 / float(sys.argv[2]))))' \
    "$steps" "$alone")
  one_rank_program "$model" "$width" "$depth" "$batch"
  program+=(--steps "$shared_steps")  # the last --steps counts
  for i in 0 1; do
    local -a timeline=()
    (( i == 0 )) && timeline=(--timeline "$out_dir/$name.$batch.shared.timeline.json")
    timeout 900 "$run" -np 1 "${timeline[@]}" "${program[@]}" </dev/null >"$out_dir/logs/shared.$name.$batch.$i.log" 2>&1 &
    pids+=($!)
  done
  for i in "${pids[@]}"; do wait "$i" || die "a shared copy of $name's profile failed (logs/shared.$name.$batch.*)"; done
  logrun "workload.$name.$batch.shared" "$sim" workload --timeline "$out_dir/$name.$batch.shared.timeline.json" \
    --out "$out_dir/$name.$batch.shared.workload.json" || die "cohort-sim workload of $name's shared copy failed"
}

profile() {  # profile NAME MODEL WIDTH DEPTH [SUFFIX]: NAME[SUFFIX].profile.json
  local name=$1 model=$2 width=$3 depth=$4 suffix=${5:-} batch
  # The batch of a rank of 4 and of a rank alone: the planner separates the
  # compute that does not grow with the batch (compute_at).
  for batch in $((global_batch / 4)) "$global_batch"; do
    local timeline=$out_dir/$name$suffix.$batch.timeline.json
    one_rank_program "$model" "$width" "$depth" "$batch"
    logrun "profile.$name$suffix.$batch" "$run" -np 1 --timeline "$timeline" "${program[@]}" ||
      die "the one-rank profile of $name at batch $batch failed"
    logrun "workload.$name$suffix.$batch" "$sim" workload --timeline "$timeline" \
      --out "$out_dir/$name$suffix.$batch.workload.json" ||
      die "cohort-sim workload of $name failed"
    # Each family's own step at this batch, one rank, as the program
    # reports it (the profile's families: its hooks, buckets or sharded
    # optimizer beside the model; horovod's too, so that every family's
    # period is measured the same way).
    local family
    for family in "${!family_strategy[@]}"; do
      one_rank_program "$model" "$width" "$depth" "$batch" "${family_strategy[$family]}"
      logrun "family.$name$suffix.$family.$batch" "$run" -np 1 "${program[@]}" ||
        die "the one-rank $family step of $name at batch $batch failed"
      step_ms "$out_dir/logs/family.$name$suffix.$family.$batch.log" >"$out_dir/$name$suffix.$family.$batch.step_ms"
    done
    shared "$name$suffix" "$model" "$width" "$depth" "$batch"
  done
  local params
  local log=$out_dir/logs/profile.$name$suffix.$global_batch.log
  params=$(sed -n 's/.*model [a-z]* (\([0-9]*\) parameters).*/\1/p' "$log" | head -1)
  [[ -n $params ]] || die "no parameter count in $log"
  /usr/bin/python3 - "$name" "$model" "$width" "$depth" "$params" "$((global_batch / 4))" "$synthetic" "$out_dir" \
    "$suffix" <<'EOF'
import json, sys
name, model, width, depth, params, batch, program, out, suffix = sys.argv[1:]
width, depth, params, batch = int(width), int(depth), int(params), int(batch)
if model == "mlp":  # Linear + ReLU outputs of every hidden layer, the input, the logits
    activations = 4 * (784 + 2 * width * depth + 10)
else:  # cnn: convolutions and their ReLUs at 28x28 and 14x14, pools, the dense head
    activations = 4 * (784 + 2 * 32 * 784 + 2 * 64 * 784 + 64 * 196 + 2 * 128 * 196 + 128 * 49 + 2 * 256 + 10)
def step_s(family, b):
    return float(open(f"{out}/{name}{suffix}.{family}.{b}.step_ms").read()) / 1e3
profile = {
    "name": name,
    "workload": f"{name}{suffix}.{batch}.workload.json",
    "batch_per_rank": batch,
    "compute_at": {"batch_per_rank": 4 * batch, "workload": f"{name}{suffix}.{4 * batch}.workload.json"},
    "families": {family: {"step_s": step_s(family, batch),
                          "compute_at": {"batch_per_rank": 4 * batch, "step_s": step_s(family, 4 * batch)}}
                 for family in ("horovod", "ddp", "zero", "one_device")},
    "shared": {"ranks": 2, "workload": f"{name}{suffix}.{batch}.shared.workload.json",
               "compute_at": {"batch_per_rank": 4 * batch, "workload": f"{name}{suffix}.{4 * batch}.shared.workload.json"}},
    "program": f"{program} --model {model} --width {width} --depth {depth}",
    "memory": {"parameter_bytes": 4 * params, "gradient_bytes": 4 * params,
               "optimizer_bytes_per_parameter_byte": 1, "activation_bytes_per_example": activations},
}
json.dump(profile, open(f"{out}/{name}{suffix}.profile.json", "w"), indent=1)
EOF
}

# --- the grid and the measurements ---------------------------------------------
# grid PLANS_JSON CHOSEN_JSON GRID_TSV: the plans to measure, one per line:
# id machines ranks_per_machine np strategy backend(auto: none) env(k=v;...) fits predicted_s
grid() {
  /usr/bin/python3 - "$1" "$2" "$3" <<'EOF'
import json, sys
plans = json.load(open(sys.argv[1]))["plans"]
chosen = json.load(open(sys.argv[2]))
seen, rows = set(), []
for p in plans:  # ranked: the first of each kind has the best knobs of its kind
    key = (p["machines"], p["ranks_per_machine"], p["family"], p["backend"])
    if key in seen:
        continue
    seen.add(key)
    rows.append(p)
# The chosen plan is plan 1, the first row.
assert rows[0]["id"] == 1 and rows[0]["strategy"] == chosen["strategy"], "plan 1 is the chosen plan"
with open(sys.argv[3], "w") as f:
    for p in rows:
        env = ";".join(f"{k}={v}" for k, v in p["env"].items()) or "-"
        f.write(f'{p["id"]}\t{p["machines"]}\t{p["ranks_per_machine"]}\t{p["np"]}\t{p["strategy"]}\t'
                f'{p["backend"] or "auto"}\t{env}\t{int(p["fits"])}\t{p.get("step_s", 0)}\n')
print(len(rows))
EOF
}

# measure TAG SETTING PROFILE_NAME GRID_TSV PLAN_FILE REP [LIMIT_KB]: runs every grid
# plan once (the chosen, id 1, through --strategy plan:PLAN_FILE); appends
# "tag id rep step_ms|failed" to results.tsv.
measure() {
  local tag=$1 setting=$2 name=$3 grid_tsv=$4 plan_file=$5 rep=$6 limit_kb=${7:-}
  local id machines rpm np strategy backend env fits predicted
  while IFS=$'\t' read -r id machines rpm np strategy backend env fits predicted; do
    local hosts=${hostlist[$setting]} h0 h1
    read -r h0 h1 <<<"$hosts"
    local -a cmd=("$run" -np "$np" -H "$h0:$rpm$( ((machines > 1)) && echo ",$h1:$rpm")"
                  --launch-template 'ip netns exec {host}' --store-addr "${bridge[$setting]}")
    [[ $backend == auto ]] || cmd+=(--backend "$backend")
    [[ -z $limit_kb ]] || cmd+=(--env MALLOC_ARENA_MAX=1)
    if [[ $env != - ]]; then
      local kv
      IFS=';' read -ra kvs <<<"$env"
      for kv in "${kvs[@]}"; do cmd+=(--env "$kv"); done
    fi
    local spec=$strategy
    [[ $id == 1 ]] && spec=plan:$plan_file
    # The profile's program, one word per line (shell quoting honoured).
    local -a prog
    mapfile -t prog < <(/usr/bin/python3 -c \
      'import json, shlex, sys; print("\n".join(shlex.split(json.load(open(sys.argv[1]))["program"])))' \
      "$out_dir/$name.profile.json")
    (( ${#prog[@]} > 0 )) || die "no program in $out_dir/$name.profile.json"
    # Every replica is a rank: the planner is asked for one_device, horovod, ddp and zero only.
    prog+=(--strategy "$spec" --batch-size $((global_batch / np)) --steps "$steps" --warmup "$warmup"
           --threads 1 --quiet)
    local log=$tag.$id.$rep
    local ok=1
    if [[ -n $limit_kb ]]; then
      logrun "$log" bash -c 'ulimit -v "$0"; exec "$@"' "$limit_kb" "${cmd[@]}" "${prog[@]}" || ok=0
    else
      logrun "$log" "${cmd[@]}" "${prog[@]}" || ok=0
    fi
    local ms
    ms=$(step_ms "$out_dir/logs/$log.log")
    if (( ok )) && [[ -n $ms ]]; then
      printf '%s\t%s\t%s\t%s\n' "$tag" "$id" "$rep" "$ms" >>"$out_dir/results.tsv"
    else
      printf '%s\t%s\t%s\tfailed\n' "$tag" "$id" "$rep" >>"$out_dir/results.tsv"
      # Under the limit, a plan the planner says does not fit should fail;
      # one it says fits must not.
      [[ -n $limit_kb && $fits == 0 ]] || failed=1
    fi
  done <"$grid_tsv"
}

# --- clusters and --check --------------------------------------------------------
declare -A bridge hostlist
: >"$out_dir/results.tsv"
for s in $settings; do
  info=$("$repo/scripts/cluster.sh" up --hosts 2 --link "${s%%:*}" --delay "${s#*:}" --owner $$) ||
    die "scripts/cluster.sh up failed"
  prefixes+=("$(sed -n 's/^prefix=//p' <<<"$info")")
  bridge[$s]=$(sed -n 's/^bridge=[^ ]* //p' <<<"$info")
  hostlist[$s]=$(sed -n 's/^host=\([^ ]*\) .*/\1/p' <<<"$info" | tr '\n' ' ')
  read -r h0 h1 <<<"${hostlist[$s]}"
  logrun "check.$s" "$run" --check -np 4 -H "$h0:2,$h1:2" --launch-template 'ip netns exec {host}' \
    --store-addr "${bridge[$s]}" --check-topology "$out_dir/topology.$s.json" ||
    die "cohortrun --check found problems on the healthy emulated cluster $s (log: $out_dir/logs/check.$s.log)"
done

# profile_model MODEL [SUFFIX]: the profile of synthetic_benchmark's MODEL.
# Every model is profiled at one width and depth (the grid's).
model_width=1024 model_depth=2
profile_model() { profile "$1" "$1" "$model_width" "$model_depth" "${2:-}"; }
for m in $models; do profile_model "$m"; done

# plan_for TAG MODEL SUFFIX [FLAGS...]: cohort-plan's ranking of TAG's
# setting (SETTING.MODEL) for MODEL's profile MODEL[SUFFIX] and the
# setting's measured topology -> plans.TAG[SUFFIX].json.
plan_for() {
  local tag=$1 m=$2 suffix=$3
  shift 3
  local topology=$out_dir/topology.${tag%.*}.json
  logrun "plan.$tag$suffix" "$plan" --profile "$out_dir/$m$suffix.profile.json" \
    --topology "$topology" --price-per-hour 0 --global-batch "$global_batch" --steps 1000 \
    --max-machines 2 --strategies one_device,horovod,ddp,zero --json "$out_dir/plans.$tag$suffix.json" "$@" ||
    die "cohort-plan failed for $tag$suffix"
}
tags=()
for s in $settings; do
  for m in $models; do
    tag=$s.$m
    plan_for "$tag" "$m" "" --out "$out_dir/chosen.$tag.json"
    grid "$out_dir/plans.$tag.json" "$out_dir/chosen.$tag.json" "$out_dir/grid.$tag.tsv" >/dev/null
    tags+=("$tag")
  done
done

# The memory-limited case: a wide mlp, every rank's address space limited.
if (( memory )); then
  s=${settings%% *}
  tag=$s.memory
  profile wide mlp 2048 16
  # A rank's address space with a tiny model: what every rank needs before
  # its model (LibTorch, the threads' stacks, the store client, the
  # communicators), the most of any rank of a 2 x 2 hierarchical ZeRO-3 job
  # (the most threads of the grid); one malloc arena per process, so that
  # the address space follows what is allocated.
  cat >"$out_dir/vmpeak.py" <<'EOF'
import re, subprocess, sys, time
# Runs the program; prints its VmPeak (kB) when it ends; exits with its code.
p = subprocess.Popen(sys.argv[1:])
peak = 0
while p.poll() is None:
    try:
        peak = max(peak, int(re.search(r"VmPeak:\s+(\d+)", open(f"/proc/{p.pid}/status").read()).group(1)))
    except (OSError, AttributeError):
        pass
    time.sleep(0.02)
print(f"vmpeak_kb {peak}", flush=True)
sys.exit(p.returncode)
EOF
  read -r h0 h1 <<<"${hostlist[$s]}"
  logrun baseline "$run" -np 4 -H "$h0:2,$h1:2" --launch-template 'ip netns exec {host}' --store-addr "${bridge[$s]}" \
    --backend hierarchical --env MALLOC_ARENA_MAX=1 /usr/bin/python3 "$out_dir/vmpeak.py" "$synthetic" --model mlp \
    --width 8 --depth 1 --strategy zero:stage=3 --batch-size 32 --steps 4 --warmup 1 --threads 1 --quiet ||
    die "the baseline run failed"
  baseline_kb=$(sed -n 's/^\[[0-9]*\] vmpeak_kb \([0-9]*\)$/\1/p' "$out_dir/logs/baseline.log" | sort -n | tail -1)
  [[ -n $baseline_kb ]] || die "no vmpeak_kb line in $out_dir/logs/baseline.log"
  # The planner's own memory per rank (ZeRO's formulas, tools/plan/README.md)
  # without a limit: the limit sits 10% above ZeRO-3's least need on 4 ranks,
  # which must be below every other family's.
  logrun "plan.$tag.unlimited" "$plan" --profile "$out_dir/wide.profile.json" --topology "$out_dir/topology.$s.json" \
    --price-per-hour 0 --global-batch "$global_batch" --steps 1000 --max-machines 2 \
    --strategies one_device,horovod,ddp,zero --json "$out_dir/plans.$tag.unlimited.json" ||
    die "cohort-plan failed for $tag without a limit"
  per_rank_bytes=$(/usr/bin/python3 - "$out_dir/plans.$tag.unlimited.json" <<'EOF'
import json, sys
plans = json.load(open(sys.argv[1]))["plans"]
zero3 = min(p["memory_per_rank_bytes"] for p in plans if p["strategy"].startswith("zero:stage=3") and p["np"] == 4)
others = min(p["memory_per_rank_bytes"] for p in plans if not p["strategy"].startswith("zero:stage=3") and p["np"] > 1)
assert 1.1 * zero3 < others, f"ZeRO-3 needs {zero3:.3g} B per rank, another plan only {others:.3g}: no limit separates them"
print(int(1.1 * zero3))
EOF
) || die "no memory limit lets ZeRO-3 alone fit the wide mlp"
  limit_kb=$((baseline_kb + per_rank_bytes / 1024))
  logrun "plan.$tag" "$plan" --profile "$out_dir/wide.profile.json" --topology "$out_dir/topology.$s.json" \
    --price-per-hour 0 --memory-bytes-per-rank "$per_rank_bytes" --global-batch "$global_batch" --steps 1000 \
    --max-machines 2 --strategies one_device,horovod,ddp,zero \
    --json "$out_dir/plans.$tag.json" --out "$out_dir/chosen.$tag.json" || die "cohort-plan failed for $tag"
  grid "$out_dir/plans.$tag.json" "$out_dir/chosen.$tag.json" "$out_dir/grid.$tag.tsv" >/dev/null
  echo "memory case: baseline ${baseline_kb} kB per rank, ulimit -v ${limit_kb} kB" >"$out_dir/memory.txt"
fi

# Interleaved: every rep runs every setting's and model's grid once.
for (( rep = 1; rep <= reps; rep++ )); do
  echo "plan_validation.sh: rep $rep of $reps (load $(cut -d' ' -f1-3 /proc/loadavg))" >&2
  # The profile again, beside the grid runs it predicts: the report's
  # in-grid predictions.
  for m in $models; do
    profile_model "$m" ".r$rep"
    for s in $settings; do
      measure "$s.$m" "$s" "$m" "$out_dir/grid.$s.$m.tsv" "$out_dir/chosen.$s.$m.json" "$rep"
    done
  done
  if (( memory )); then
    measure "${settings%% *}.memory" "${settings%% *}" wide "$out_dir/grid.${settings%% *}.memory.tsv" \
      "$out_dir/chosen.${settings%% *}.memory.json" "$rep" "$limit_kb"
  fi
done

# Each rep's rankings, from its profiles.
for (( rep = 1; rep <= reps; rep++ )); do
  for m in $models; do
    for s in $settings; do plan_for "$s.$m" "$m" ".r$rep"; done
  done
done

# The fastest rep's profile (its one-rank step alone the shortest) and the
# measured topology: the predictions that the report's "fastest rep"
# columns hold against each plan's fastest run.
for m in $models; do
  fastest_rep=$(for (( rep = 1; rep <= reps; rep++ )); do
    echo "$(step_ms "$out_dir/logs/profile.$m.r$rep.$((global_batch / 4)).log") $rep"
  done | sort -g | head -1 | cut -d' ' -f2)
  cp "$out_dir/$m.r$fastest_rep.profile.json" "$out_dir/$m.fastest.profile.json"
  for s in $settings; do plan_for "$s.$m" "$m" .fastest; done
done

# --- the report ------------------------------------------------------------------
if (( memory )); then tags+=("${settings%% *}.memory"); fi
/usr/bin/python3 - "$out_dir" "$reps" "$global_batch" "${tags[@]}" <<'EOF' | tee "$out_dir/table.md"
import json, os, statistics, sys
out, reps, global_batch, tags = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
measured = {}
for line in open(f"{out}/results.tsv"):
    tag, pid, rep, ms = line.rstrip("\n").split("\t")
    measured.setdefault((tag, int(pid)), []).append(None if ms == "failed" else float(ms))

def spearman(xs, ys):
    def ranks(v):
        order = sorted(range(len(v)), key=lambda i: v[i])
        r = [0.0] * len(v)
        i = 0
        while i < len(order):
            j = i
            while j + 1 < len(order) and v[order[j + 1]] == v[order[i]]:
                j += 1
            for k in range(i, j + 1):
                r[order[k]] = (i + j) / 2
            i = j + 1
        return r
    rx, ry = ranks(xs), ranks(ys)
    mx, my = statistics.mean(rx), statistics.mean(ry)
    num = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    den = (sum((a - mx) ** 2 for a in rx) * sum((b - my) ** 2 for b in ry)) ** 0.5
    return num / den if den else float("nan")

def key(p):  # a plan, whichever ranking it came from
    return (p["machines"], p["ranks_per_machine"], p["strategy"], p["backend"], tuple(sorted(p["env"].items())))

def in_grid_predictions(tag):
    """Each plan's median predicted step (ms) over the rankings from the
    profiles taken beside each rep's grid runs; {} without them."""
    got = {}
    for r in range(1, reps + 1):
        path = f"{out}/plans.{tag}.r{r}.json"
        if os.path.exists(path):
            for p in json.load(open(path))["plans"]:
                if p["fits"]:
                    got.setdefault(key(p), []).append(p["step_s"] * 1e3)
    return {k: statistics.median(v) for k, v in got.items()}

def period(name):  # a workload file's measured step period (ms)
    return json.load(open(f"{out}/{name}.workload.json"))["measured_step_s"] * 1e3

models = sorted({tag.rsplit(".", 1)[1] for tag in tags if not tag.endswith(".memory")})
batches = (global_batch // 4, global_batch)  # the profiles' two (profile())
for model in models:
    runs = [""] + [f".r{r}" for r in range(1, reps + 1)]
    print(f"{model}: two one-rank copies at once over one alone, "
          + "; ".join(f"batch {b}: " + ", ".join(f"{period(f'{model}{r}.{b}.shared') / period(f'{model}{r}.{b}'):.2f}"
                                                   for r in runs if os.path.exists(f"{out}/{model}{r}.{b}.shared.workload.json"))
                      for b in batches) + " (the first profile, then each rep's)")
print()

print("| setting | model | grid | chosen plan | chosen / best measured | predicted / measured (chosen) | rank correlation "
      "| in-grid profiles: predicted / measured (chosen) | rank correlation | their choice / best measured "
      "| fastest rep: chosen / best | predicted / measured (chosen) | rank correlation |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
# Plans on one machine (shm, one_device) never cross the emulated links: the
# same plan (strategy, backend, knobs) is the same run in every setting, so
# the last table pools its runs of all settings, the setting's noise apart:
# pooled[model][plan key] = (runs, predictions, plan), chosen[model] = keys.
pooled, chosen_keys = {}, {}
for tag in tags:
    setting, model = tag.rsplit(".", 1)
    plans = {p["id"]: p for p in json.load(open(f"{out}/plans.{tag}.json"))["plans"]}
    rows = [l.split("\t") for l in open(f"{out}/grid.{tag}.tsv").read().splitlines()]
    in_grid = in_grid_predictions(tag)
    pred, meas, fastest, measured_ids, fails, pred_in_grid, meas_in_grid = [], [], [], [], [], [], []
    for r in rows:
        pid = int(r[0])
        got = measured.get((tag, pid), [])
        ok = [v for v in got if v is not None]
        if plans[pid]["fits"] and ok and len(ok) == len(got):
            pred.append(plans[pid]["step_s"] * 1e3)
            meas.append(statistics.median(ok))
            fastest.append(min(ok))
            measured_ids.append(pid)
            if plans[pid]["machines"] == 1:
                runs, predictions, _ = pooled.setdefault(model, {}).setdefault(key(plans[pid]), ([], [], plans[pid]))
                runs.extend(ok)
                predictions.append(pred[-1])
                if pid == 1:
                    chosen_keys.setdefault(model, set()).add(key(plans[pid]))
            if key(plans[pid]) in in_grid:
                pred_in_grid.append(in_grid[key(plans[pid])])
                meas_in_grid.append(meas[-1])
        elif not plans[pid]["fits"]:
            fails.append((pid, bool(ok)))
    chosen = statistics.median([v for v in measured[(tag, 1)] if v is not None]) if measured.get((tag, 1)) and all(
        v is not None for v in measured[(tag, 1)]) else None
    best = min(meas) if meas else None
    c = plans[1]
    name = f'{c["machines"]}x{c["ranks_per_machine"]} {c["strategy"]} ({c["backend"] or "auto"})'
    if chosen is None:
        print(f"| {setting} | {model} | {len(rows)} | {name} | chosen plan failed | - | - | - | - | - | - | - | - |")
        continue
    ratio = chosen / best
    err = c["step_s"] * 1e3 / chosen
    rho = spearman(pred, meas) if len(pred) > 2 else float("nan")
    extra = ""
    if fails:
        ran = [str(pid) for pid, ok in fails if ok]
        extra = f"; {len(fails)} plans refused for memory" + (f", of which {', '.join(ran)} ran anyway" if ran else ", none ran")
    # The in-grid columns: the chosen plan's in-grid prediction, the
    # ranking's correlation, and the grid plan those predictions rank first.
    in_grid_cols = "- | - | -"
    if key(c) in in_grid and len(pred_in_grid) > 2:
        first = min(range(len(pred_in_grid)), key=lambda i: pred_in_grid[i])
        in_grid_cols = (f"{in_grid[key(c)] / chosen:.2f} ({in_grid[key(c)]:.1f} / {chosen:.1f} ms) "
                        f"| {spearman(pred_in_grid, meas_in_grid):.2f} | {meas_in_grid[first] / best:.2f}")
    # The fastest rep of each plan: the machine's other tenants only ever
    # add time, so each plan's least time is the one they touched least
    # (the estimate timeit's documentation recommends), held against the
    # predictions from the fastest rep's profile (the first profile's for
    # the memory case, whose model is profiled once).
    predicted = {key(plans[pid]): ms for pid, ms in zip(measured_ids, pred)}
    if os.path.exists(f"{out}/plans.{tag}.fastest.json"):
        predicted = {key(p): p["step_s"] * 1e3 for p in json.load(open(f"{out}/plans.{tag}.fastest.json"))["plans"]}
    pairs = [(predicted[key(plans[pid])], least) for pid, least in zip(measured_ids, fastest) if key(plans[pid]) in predicted]
    chosen_fastest = min(measured[(tag, 1)])
    fastest_cols = "- | - | -"
    if key(c) in predicted:
        fastest_cols = (f"{chosen_fastest / min(fastest):.2f} | {predicted[key(c)] / chosen_fastest:.2f} "
                        f"({predicted[key(c)]:.1f} / {chosen_fastest:.1f} ms) | "
                        f"{spearman(*zip(*pairs)) if len(pairs) > 2 else float('nan'):.2f}")
    print(f"| {setting} | {model} | {len(pred)} measured{extra} | {name} | {ratio:.2f} (best {best:.1f} ms) "
          f"| {err:.2f} ({c['step_s'] * 1e3:.1f} / {chosen:.1f} ms) | {rho:.2f} | {in_grid_cols} | {fastest_cols} |")

print()
print("| model | plan on one machine | runs | measured (median) | predicted (median) | predicted / measured "
      "| over the best of these |")
print("|---|---|---|---|---|---|---|")
for model in models:
    if model not in pooled:
        continue
    best = min(statistics.median(v[0]) for v in pooled[model].values())
    for k, (runs, predictions, p) in sorted(pooled[model].items(), key=lambda kv: statistics.median(kv[1][0])):
        m, pr = statistics.median(runs), statistics.median(predictions)
        mark = " (chosen)" if k in chosen_keys.get(model, set()) else ""
        knobs = "".join(f", {v[0]}={v[1]}" for v in sorted(p["env"].items())).replace("COHORT_", "")
        print(f'| {model} | {p["ranks_per_machine"]} ranks, {p["strategy"]} ({p["backend"] or "auto"}{knobs}){mark} '
              f"| {len(runs)} | {m:.1f} ms | {pr:.1f} ms | {pr / m:.2f} | {m / best:.2f} |")
EOF
exit $failed
