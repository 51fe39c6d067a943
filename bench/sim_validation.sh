#!/usr/bin/env bash
# sim_validation.sh: cohort-sim's predicted step times against measured ones
# on this machine (issue 19), for runs the model was not fitted on.
#
# Usage: sudo bench/sim_validation.sh [--build-dir DIR] [--reps N] [--steps N]
#          [--out DIR] [--links "1gbit 250mbit"] [--no-cluster] [--quick] [--no-build]
#          [--predict-only] [--background N] [--cases REGEX]
#
# --no-build uses the programs already in DIR as they are (say, built before
# a merge that would rebuild every LibTorch target); --predict-only redoes
# step 4 from the logs a run with the same flags left in --out;
# --background N sets the other programs' load instead of the measured one;
# --cases REGEX measures and predicts only the cases whose names match
# (say 'zero|ps'; the names are in the table's first column).
#
# 1. Fit (cohort's own micro-benchmarks, nothing else):
#    - links.shm at 2, 4 and 8 ranks: cohort-bench allreduce on shm;
#    - links.network at each --links rate: cohort-bench allreduce over gloo
#      between 2 emulated hosts (scripts/cluster.sh: network namespaces,
#      tbf-shaped veth links; needs root); and its CPU costs (cpu_step_s,
#      cpu_s_per_byte: `cohort-sim fit --cpu`) from the machine's busy time
#      (/proc/stat) during allreduces of 1K-4M there, a long and a short run
#      of each size so that the processes' start cancels;
#    - links.shm for ZeRO's reduce-scatter and allgather at 2 and 4 ranks
#      (cohort-bench reduce_scatter and allgather on shm: separate code
#      paths from the allreduce's, with costs of their own);
#    - links.ps (the parameter servers' ZeroMQ ipc transport): the
#      request/reply round trips of ps_transport_bench, half of each one a
#      one-way transfer, alpha + bytes / B fitted by least squares;
#    - copy and reduction rates: bench_reduce_kernels (memcpy, sum f32).
#    Each rep runs the benchmarks again, interleaved with the training
#    runs, and the fit uses each size's median over reps.
# 2. Workloads: each program on one rank with its timeline (COHORT_TIMELINE)
#    -> `cohort-sim workload` (compute times free of communication; the
#    engine's wake-up latency from the same timeline). char_lm reduces its
#    gradients once after backward; its workload is one tensor of all
#    gradients, ready after one replica's step measured alone.
# 3. Measure, interleaved and repeated (--reps, medians), with one thread
#    per rank (OMP/OpenBLAS/MKL pinned to 1):
#    - synthetic_benchmark mlp and cnn, modes horovod and ddp, on 2, 4 and
#      8 ranks of this machine (shm);
#    - synthetic_benchmark mlp and cnn (horovod) on 2 and 4 emulated hosts
#      of one rank each, at each --links rate (gloo);
#    - char_lm on dp 2 and dp 4 meshes (shm);
#    - synthetic_benchmark mlp under zero stages 1, 2 and 3 on 2 and 4
#      ranks (shm), predicted from the horovod workload (the same model);
#    - synthetic_benchmark mlp under parameter_server:servers=1 on 3 and 5
#      ranks (2 and 4 workers, shm for nothing: ZeroMQ ipc).
#    While they run, bench/sim/other_load.py samples the runnable threads of
#    other programs (the shared machine's load) into background.txt.
# 4. Predict each run with `cohort-sim predict` on a topology built from the
#    fits (cores: this machine's; emulated hosts share them) and print
#    predicted against measured step time with the error, and the mean
#    absolute error.
#
# The machine is shared: runs are interleaved so that every case sees the
# same mix of load, and medians are reported; the load average is printed
# per rep. Outputs (logs, fits, topologies, workloads, predictions, the
# table) stay in --out (default DIR/bench/results/sim_validation).
# Exit status: 0 when every run succeeded (a missed target is reported, not
# an error), 1 otherwise, 2 on bad arguments.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=$repo/build
reps=3
steps=12
warmup=3
out_dir=
links="1gbit 250mbit"
cluster=1
quick=0
build=1
predict_only=0
background=
case_filter=

die() { echo "sim_validation.sh: $*" >&2; exit 1; }
usage_error() { echo "sim_validation.sh: $* (see --help)" >&2; exit 2; }

while [[ $# -gt 0 ]]; do
  case "$1" in
    --build-dir) build_dir=$(realpath -m "${2:?--build-dir needs a value}"); shift 2 ;;
    --reps) reps=${2:?--reps needs a value}; shift 2 ;;
    --steps) steps=${2:?--steps needs a value}; shift 2 ;;
    --out) out_dir=$(realpath -m "${2:?--out needs a value}"); shift 2 ;;
    --links) links=${2:?--links needs a value}; shift 2 ;;
    --no-cluster) cluster=0; shift ;;
    --quick) quick=1; shift ;;
    --no-build) build=0; shift ;;
    --predict-only) predict_only=1; build=0; shift ;;
    --background) background=${2:?--background needs a value}; shift 2 ;;
    --cases) case_filter=${2:?--cases needs a value}; shift 2 ;;
    -h|--help) sed -n '2,55p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) usage_error "unknown argument '$1'" ;;
  esac
done
for v in "$reps" "$steps"; do [[ $v =~ ^[1-9][0-9]*$ ]] || usage_error "expected a positive integer, got '$v'"; done
for l in $links; do [[ $l =~ ^[0-9]+[kmg]?bit$ ]] || usage_error "--links takes tc rates such as 1gbit, got '$l'"; done
[[ -z $background || $background =~ ^[0-9]+(\.[0-9]+)?$ ]] || usage_error "--background takes a number of threads, got '$background'"
if (( cluster && !predict_only )) && [[ $(id -u) != 0 ]]; then usage_error "emulated hosts need root (or pass --no-cluster)"; fi
out_dir=${out_dir:-$build_dir/bench/results/sim_validation}
mkdir -p "$out_dir"/logs

export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1

# --- build ------------------------------------------------------------------
if (( build )); then
  if [[ ! -f $build_dir/build.ninja ]]; then
    cmake -S "$repo" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCOHORT_WITH_TORCH=ON >/dev/null ||
      die "cmake configure of $build_dir failed"
  fi
  cmake --build "$build_dir" -j 2 --target cohort-sim cohort-bench cohortrun synthetic_benchmark char_lm \
    bench_reduce_kernels ps_transport_bench >/dev/null || die "build failed in $build_dir (LibTorch and Google Benchmark needed)"
fi
sim=$build_dir/tools/sim/cohort-sim
bench=$build_dir/tools/cohort-bench
run=$build_dir/cohort/launcher/cohortrun
synthetic=$build_dir/examples/synthetic_benchmark
char_lm=$build_dir/examples/char_lm
kernels=$build_dir/bench/bench_reduce_kernels
ps_bench=$build_dir/bench/ps_transport_bench
for p in "$sim" "$bench" "$run" "$synthetic" "$char_lm" "$kernels" "$ps_bench"; do
  [[ -x $p ]] || die "$p is missing (build it, or drop --no-build)"
done
# nproc would count OMP_NUM_THREADS (1, exported above), not the cores.
cores=$(getconf _NPROCESSORS_ONLN)

prefixes=()
cleanup() { for p in "${prefixes[@]}"; do "$repo/scripts/cluster.sh" down --prefix "$p" >/dev/null 2>&1 || true; done; }
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

failed=0
# log NAME CMD...: runs CMD, output to logs/NAME.<rep>.log; 1 on failure.
logrun() {
  local name=$1
  shift
  local log=$out_dir/logs/$name.$rep.log
  if ! timeout 900 "$@" >"$log" 2>&1; then
    echo "sim_validation.sh: $name failed (log: $log)" >&2
    failed=1
    return 1
  fi
}

# logrun, and the machine's busy CPU ticks over the run appended to the log
# ("# busy_ticks N hz H"): user, nice, system, irq, softirq and steal time of
# every core (/proc/stat), so the kernel's packet work counts too.
busy_ticks() { awk '/^cpu /{print $2 + $3 + $4 + $7 + $8 + $9}' /proc/stat; }
cpu_logrun() {
  local name=$1 before after
  before=$(busy_ticks)
  logrun "$@" || return 1
  after=$(busy_ticks)
  echo "# busy_ticks $((after - before)) hz $(getconf CLK_TCK)" >>"$out_dir/logs/$name.$rep.log"
}

# --- emulated clusters: one per link rate, 4 hosts each ------------------------
declare -A bridge hostlist
if (( cluster && !predict_only )); then
  for l in $links; do
    info=$("$repo/scripts/cluster.sh" up --hosts 4 --link "$l" --owner $$) || die "scripts/cluster.sh up failed"
    prefixes+=("$(sed -n 's/^prefix=//p' <<<"$info")")
    bridge[$l]=$(sed -n 's/^bridge=[^ ]* //p' <<<"$info")
    hostlist[$l]=$(sed -n 's/^host=\([^ ]*\) .*/\1/p' <<<"$info" | tr '\n' ' ')
  done
fi
hosts_arg() {  # hosts_arg LINK N -> h0:1,h1:1,...
  local -a hs
  read -ra hs <<<"${hostlist[$1]}"
  local out="" i
  for (( i = 0; i < $2; i++ )); do out+="${out:+,}${hs[$i]}:1"; done
  echo "$out"
}
# cohortrun on N emulated hosts of link LINK, over gloo: sets the array `on`.
on_cluster() {
  on=("$run" -H "$(hosts_arg "$1" "$2")" --launch-template 'ip netns exec {host}' --store-addr "${bridge[$1]}"
      --backend gloo)
}

# --- the cases ----------------------------------------------------------------
models=(mlp cnn)
# The last module of each synthetic_benchmark model (cohort/models/image_classifiers.cc).
declare -A first_grad=([mlp]=grad/5.bias [cnn]=grad/11.bias)
shm_ranks=(2 4 8)
modes=(horovod ddp)
host_counts=(2 4)
char_dp=(2 4)
if (( quick )); then shm_ranks=(2 4); modes=(horovod); char_dp=(2); fi
sb_flags=(--steps "$steps" --warmup "$warmup" --threads 1 --batch-size 64 --quiet)
cl_flags=(--steps 40 --threads 1 --log-every 1000)
cases=()
for m in "${models[@]}"; do
  for mode in "${modes[@]}"; do for n in "${shm_ranks[@]}"; do cases+=("shm:$m:$mode:$n"); done; done
  if (( cluster )); then
    for l in $links; do for h in "${host_counts[@]}"; do cases+=("net:$m:horovod:$h:$l"); done; done
  fi
done
for d in "${char_dp[@]}"; do cases+=("charlm:$d"); done
zero_stages=(1 2 3)
zero_ranks=(2 4)
ps_ranks=(3 5)
if (( quick )); then zero_ranks=(2); ps_ranks=(3); fi
for z in "${zero_stages[@]}"; do for n in "${zero_ranks[@]}"; do cases+=("zero:mlp:$z:$n"); done; done
for n in "${ps_ranks[@]}"; do cases+=("ps:mlp:$n"); done
if [[ -n $case_filter ]]; then
  kept=()
  for c in "${cases[@]}"; do [[ $c =~ $case_filter ]] && kept+=("$c"); done
  (( ${#kept[@]} )) || usage_error "--cases '$case_filter' matches none of: ${cases[*]}"
  cases=("${kept[@]}")
fi

if (( !predict_only )); then
# --- 1 and 2: workloads (one rank, timelines) -----------------------------------
mkdir -p "$out_dir/workloads"
rep=0
for m in "${models[@]}"; do
  for mode in horovod ddp; do
    tl=$out_dir/workloads/$m.$mode.timeline.json
    logrun "workload.$m.$mode" "$run" -np 1 --timeline "$tl" "$synthetic" --model "$m" --mode "$mode" \
      "${sb_flags[@]}" || continue
    # Backward's first gradient is the output layer's bias (horovod mode names
    # each parameter; DDP's buckets are found without it): mlp's middle layer
    # takes longer in backward than the whole forward pass, which would
    # otherwise put the step boundary before that layer.
    first=()
    [[ $mode == horovod ]] && first=(--first "${first_grad[$m]}")
    "$sim" workload --timeline "$tl" --out "$out_dir/workloads/$m.$mode.json" "${first[@]}" \
      2>>"$out_dir/logs/workloads.log" ||
      { echo "sim_validation.sh: no workload from $tl" >&2; failed=1; }
  done
done
for d in "${char_dp[@]}"; do
  # One replica's share of the global batch, alone.
  logrun "workload.charlm.$d" "$char_lm" --batch-size $(( 32 / d )) "${cl_flags[@]}" || true
done

# --- 3: calibration and measurements, interleaved --------------------------------
python3 "$repo/bench/sim/other_load.py" $$ "$out_dir/background.txt" &
sampler=$!
for (( rep = 1; rep <= reps; rep++ )); do
  echo "# rep $rep/$reps: load average $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$out_dir/load.txt"
  for n in 2 4 8; do
    logrun "bench.shm.$n" "$run" -np "$n" "$bench" allreduce --min-bytes 1K --max-bytes 64M --step-factor 4 \
      --seconds 0.05 --csv || true
  done
  if [[ " ${cases[*]}" == *" zero:"* ]]; then
    for c in reduce_scatter allgather; do
      for n in "${zero_ranks[@]}"; do
        logrun "bench.shm_$c.$n" "$run" -np "$n" "$bench" "$c" --min-bytes 1K --max-bytes 64M --step-factor 4 \
          --seconds 0.05 --csv || true
      done
    done
  fi
  if (( cluster )); then
    for l in $links; do
      max=64M
      [[ $l == *mbit || $l == *kbit ]] && max=16M
      on_cluster "$l" 2
      logrun "bench.net.$l" "${on[@]}" "$bench" allreduce --min-bytes 1K --max-bytes "$max" --step-factor 4 \
        --seconds 0.1 --csv || true
      # The CPU a rank spends per allreduce, by size: a long and a short run
      # of each, whose busy time over their ops' difference cancels the
      # processes' start.
      for size in 1K 64K 256K 1M 4M; do
        for secs in 0.3 1.5; do
          cpu_logrun "bench.netcpu.$l.$size.$secs" "${on[@]}" "$bench" allreduce --min-bytes "$size" \
            --max-bytes "$size" --seconds "$secs" --csv || true
        done
      done
    done
  fi
  logrun "bench.ps" "$run" -np 2 "$ps_bench" --sizes 256K,4M,64M --iters 5 --reps 3 || true
  logrun "bench.kernels" "$kernels" --benchmark_filter='BM_memcpy/67108864|BM_reduce_sum/f32_2src_inplace/67108864' \
    --benchmark_format=csv || true
  # The training runs, rotated so that each case runs early in some rep.
  count=${#cases[@]}
  for (( k = 0; k < count; k++ )); do
    c=${cases[$(( (k + (rep - 1) * 7) % count ))]}
    IFS=: read -r kind a b x y <<<"$c"
    case $kind in
      shm) logrun "run.$c" "$run" -np "$x" "$synthetic" --model "$a" --mode "$b" "${sb_flags[@]}" || true ;;
      net) on_cluster "$y" "$x"
           logrun "run.$c" "${on[@]}" "$synthetic" --model "$a" --mode "$b" "${sb_flags[@]}" || true ;;
      charlm) logrun "run.$c" "$run" -np "$a" "$char_lm" --dp "$a" "${cl_flags[@]}" || true ;;
      zero) logrun "run.$c" "$run" -np "$x" "$synthetic" --model "$a" --strategy "zero:stage=$b" "${sb_flags[@]}" ||
              true ;;
      ps) logrun "run.$c" "$run" -np "$b" "$synthetic" --model "$a" --strategy parameter_server:servers=1 \
            "${sb_flags[@]}" || true ;;
    esac
  done
done
kill "$sampler" 2>/dev/null || true
fi  # !predict_only

# --- 4: fit, predict, compare (python3 for the JSON and the medians) -------------
python3 - "$out_dir" "$sim" "$cores" "$reps" "$links" "$cluster" "$background" "${cases[@]}" <<'PY'
import glob, json, os, re, statistics, subprocess, sys

out, sim, cores, reps, links, cluster, background = sys.argv[1:8]
cores, reps, cluster = int(cores), int(reps), int(cluster)
cases = sys.argv[8:]
logs = os.path.join(out, "logs")

def rows(name, collective):
    """cohort-bench CSV rows of every rep: {size: [seconds...]}"""
    got = {}
    for path in glob.glob(f"{logs}/{name}.*.log"):
        for line in open(path):
            line = re.sub(r"^\[\d+\] ", "", line.strip())
            cells = line.split(",")
            if len(cells) >= 7 and cells[0] == collective:
                got.setdefault(int(cells[2]), []).append(float(cells[6]) * 1e-6)
    return got

# {size: seconds} as a cohort-bench CSV for `cohort-sim fit`.
def write_csv(name, collective, ranks, seconds):
    path = os.path.join(out, f"fit.{name}.csv")
    with open(path, "w") as f:
        f.write("collective,ranks,size_bytes,count,type,op,time_us\n")
        for size in sorted(seconds):
            f.write(f"{collective},{ranks},{size},0,f32,sum,{seconds[size] * 1e6}\n")
    return path

def median_csv(name, ranks, collective="allreduce"):
    got = rows(name, collective)
    if not got:
        return None
    return write_csv(name, collective, ranks, {size: statistics.median(v) for size, v in got.items()})

# The CPU per rank and allreduce at each size over link l, from the long and
# short runs of each rep: (busy_long - busy_short) / (ops_long - ops_short)
# / 2 ranks; medians over reps, as a cohort-bench CSV whose time is CPU.
def cpu_csv_of(l):
    per = {}
    for path in glob.glob(f"{logs}/bench.netcpu.{l}.*.1.5.*.log"):
        short = path.replace(".1.5.", ".0.3.")
        got = []
        for p in (path, short):
            text = open(p).read() if os.path.exists(p) else ""
            ops = re.findall(r"^\[0\] allreduce,2,(\d+),[^\n]*,(\d+)$", text, re.M)
            busy = re.search(r"^# busy_ticks (\d+) hz (\d+)$", text, re.M)
            if ops and busy:
                got.append((int(ops[-1][0]), int(ops[-1][1]), int(busy.group(1)) / int(busy.group(2))))
        if len(got) == 2 and got[0][1] > got[1][1]:
            (size, n_long, b_long), (_, n_short, b_short) = got
            per.setdefault(size, []).append(max(b_long - b_short, 0) / (n_long - n_short) / 2)
    if len(per) < 2:
        return None
    return write_csv(f"bench.netcpu.{l}", "allreduce", 2, {k: max(statistics.median(v), 1e-9) for k, v in per.items()})

# `cpu`: the CSV's times are CPU per rank and op (cohort-sim fit --cpu).
def fit(csv, topo, algorithm, link, collective="allreduce", cpu=False):
    tpath = os.path.join(out, "fit.topology.json")
    json.dump(topo, open(tpath, "w"))
    r = subprocess.run([sim, "fit", "--csv", csv, "--topology", tpath, "--algorithm", algorithm, "--link", link,
                        "--collective", collective] + (["--cpu"] if cpu else []), capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"sim_validation.sh: fit of {csv} failed: {r.stderr.strip()}")
    print(f"# fit {os.path.basename(csv)}: {r.stdout.strip()}  ({r.stderr.strip().replace('cohort-sim: ', '')})")
    return json.loads(r.stdout)[link]

# Kernel rates from Google Benchmark's CSV (bytes_per_second), medians.
def kernel_rate(pattern):
    vals = []
    for path in glob.glob(f"{logs}/bench.kernels.*.log"):
        for line in open(path):
            if re.search(pattern, line):
                cells = line.split(",")
                try:
                    vals.append(float(cells[5]))  # bytes_per_second
                except (IndexError, ValueError):
                    pass
    return statistics.median(vals) if vals else None

copy_rate = kernel_rate(r"BM_memcpy/67108864")
reduce_rate = kernel_rate(r"BM_reduce_sum/f32_2src_inplace/67108864")
shm = {}
for n in (2, 4, 8):
    csv = median_csv(f"bench.shm.{n}", n)
    if csv:
        shm[n] = fit(csv, {"hosts": 1, "ranks_per_host": n}, "shm", "shm")
shm_halves = []  # by_ranks entries of ZeRO's collectives
for c in ("reduce_scatter", "allgather"):
    for n in (2, 4):
        csv = median_csv(f"bench.shm_{c}.{n}", n, c)
        if csv:
            shm_halves.append(dict(fit(csv, {"hosts": 1, "ranks_per_host": n}, "shm", "shm", c), ranks=n, collective=c))
net = {}
if cluster:
    for l in links.split():
        csv = median_csv(f"bench.net.{l}", 2)
        if csv:
            topo = {"hosts": 2, "ranks_per_host": 1}
            if reduce_rate:
                topo["reduce_bytes_per_s"] = reduce_rate
            net[l] = fit(csv, topo, "ring", "network")
            cpu_csv = cpu_csv_of(l)
            if cpu_csv:
                # The CPU is an op's share: fitted on the link just fitted.
                net[l].update(fit(cpu_csv, dict(topo, links={"network": net[l]}), "ring", "network", cpu=True))

# The ps link: ps_transport_bench's zmq-ipc round trips (B bytes each way),
# one way = half a round trip = alpha + B / bandwidth, least squares weighted
# by 1/time (relative errors), as the allreduce fits.
def fit_ps():
    got = {}
    for path in glob.glob(f"{logs}/bench.ps.*.log"):
        for line in open(path):
            m = re.search(r"\| (\d+) KiB \| zmq-ipc \| ([0-9.]+) \|", line)
            if m:
                got.setdefault(int(m.group(1)) * 1024, []).append(float(m.group(2)) * 1e-6 / 2)
    if len(got) < 2:
        return None
    pts = [(b, statistics.median(v)) for b, v in sorted(got.items())]
    # minimise sum ((alpha + b x - t) / t)^2 over alpha, x
    s11 = sum(1 / t**2 for b, t in pts); s12 = sum(b / t**2 for b, t in pts); s22 = sum(b * b / t**2 for b, t in pts)
    r1 = sum(1 / t for b, t in pts); r2 = sum(b / t for b, t in pts)
    det = s11 * s22 - s12 * s12
    alpha, x = (r1 * s22 - r2 * s12) / det, (s11 * r2 - s12 * r1) / det
    alpha = max(alpha, 0.0)
    if alpha == 0.0:
        x = r2 / s22
    errs = [abs(alpha + b * x - t) / t for b, t in pts]
    link = {"alpha_s": alpha, "bytes_per_s": 1 / x}
    print(f"# fit bench.ps (zmq-ipc one way): {json.dumps(link)}  ({len(pts)} sizes, relative error max"
          f" {100 * max(errs):.1f}%)")
    return link

ps_link = fit_ps()

wake = []
for path in glob.glob(f"{out}/workloads/*.json"):
    if not path.endswith(".timeline.json"):
        w = json.load(open(path))
        if w.get("measured_wake_s"):
            wake.append(w["measured_wake_s"])
wake_s = statistics.median(wake) if wake else 0
print(f"# kernels: memcpy {copy_rate and copy_rate / 1e9:.2f} GB/s, sum f32 {reduce_rate and reduce_rate / 1e9:.2f} GB/s;"
      f" engine wake-up (median of the workloads' timelines) {wake_s * 1e6:.0f} us")

# The other programs' runnable threads while the runs ran: the median sample.
if not background:
    try:
        samples = [int(l.split()[1]) for l in open(f"{out}/background.txt") if len(l.split()) == 3]
        background = statistics.median(samples) if samples else 0
        print(f"# other programs' runnable threads: median {background} of {len(samples)} samples"
              f" (quartiles {statistics.quantiles(samples, n=4)[0]:.0f}..{statistics.quantiles(samples, n=4)[2]:.0f})"
              if len(samples) > 1 else f"# other programs' load: {len(samples)} samples")
    except OSError:
        background = 0
background = float(background)

def topology(hosts, per_host, link=None):
    t = {"hosts": hosts, "ranks_per_host": per_host, "links": {},
         "cpu": {"cores_per_host": cores, "one_machine": hosts > 1}, "engine": {"wake_s": wake_s}}
    if shm:
        base = shm.get(2) or next(iter(shm.values()))
        t["links"]["shm"] = dict(base, by_ranks=[dict(v, ranks=k) for k, v in shm.items()] + shm_halves)
    if link:
        t["links"]["network"] = net[link]
    if ps_link:
        t["links"]["ps"] = ps_link
    if copy_rate:
        t["copy_bytes_per_s"] = copy_rate
    if reduce_rate:
        t["reduce_bytes_per_s"] = reduce_rate
    return t

def measured(case):
    vals = []
    for path in glob.glob(f"{logs}/run.{case}.*.log"):
        text = open(path).read()
        m = re.search(r"median of \d+ steps: ([0-9.]+) ms/step", text)
        if m:
            vals.append(float(m.group(1)) * 1e-3)
        m = re.search(r"char_lm: trained .*?([0-9.]+) tokens/s", text)
        if m:
            vals.append(32 * 64 / float(m.group(1)))
    return (statistics.median(vals), len(vals)) if vals else (None, 0)

def charlm_workload(d):
    text = open(f"{logs}/workload.charlm.{d}.0.log").read()
    params = int(re.search(r"(\d+) parameters", text).group(1))
    rate = float(re.search(r"char_lm: trained .*?([0-9.]+) tokens/s", text).group(1))
    step = (32 // d) * 64 / rate
    path = f"{out}/workloads/charlm.dp{d}.json"
    json.dump({"name": f"char_lm replica of dp {d}", "tensors": [{"name": "grads", "bytes": 4 * params, "ready_s": step}]},
              open(path, "w"))
    return path

print()
print(f"| case | ranks | measured ms | predicted ms, idle machine | error | predicted ms, load {background:g} | error | runs |")
print("|------|------:|------------:|------------:|------:|------------:|------:|-----:|")
errors, errors_idle = [], []
for case in cases:
    parts = case.split(":")
    try:
        if parts[0] == "shm":
            _, m, mode, n = parts
            topo, wl, flags, ranks = topology(1, int(n)), f"{out}/workloads/{m}.{mode}.json", ["--mode", mode], int(n)
        elif parts[0] == "net":
            _, m, mode, h, l = parts
            topo, wl, flags, ranks = topology(int(h), 1, l), f"{out}/workloads/{m}.{mode}.json", ["--mode", mode, "--backend", "ring"], int(h)
        elif parts[0] == "zero":
            _, m, stage, n = parts
            topo, wl, ranks = topology(1, int(n)), f"{out}/workloads/{m}.horovod.json", int(n)
            flags = ["--mode", "zero", "--zero-stage", stage]
        elif parts[0] == "ps":
            _, m, n = parts
            topo, wl, ranks = topology(1, int(n)), f"{out}/workloads/{m}.horovod.json", int(n)
            flags = ["--mode", "parameter_server", "--ps-servers", "1"]
        else:
            d = int(parts[1])
            topo, wl, flags, ranks = topology(1, d), charlm_workload(d), [], d
    except (OSError, KeyError, AttributeError, StopIteration) as e:
        print(f"| {case} | | | | missing input ({e}) | |")
        continue
    meas, runs = measured(case)
    preds = []
    for load in (0, background):
        topo["cpu"]["background_threads"] = load
        tag = f"{case.replace(':', '_')}.load{load:g}"
        tpath, ppath = f"{out}/topology.{tag}.json", f"{out}/prediction.{tag}.json"
        json.dump(topo, open(tpath, "w"), indent=1)
        r = subprocess.run([sim, "predict", "--topology", tpath, "--workload", wl, "--json", ppath] + flags,
                           capture_output=True, text=True)
        preds.append(json.load(open(ppath))["predictions"][0]["step_s"] if r.returncode == 0 else r.stderr.strip())
    if meas is None or any(isinstance(p, str) for p in preds):
        why = next((p for p in preds if isinstance(p, str)), "no measurement")
        print(f"| {case} | {ranks} | {meas and meas * 1e3 or '-'} | - | {why} | - | | {runs} |")
        continue
    idle, loaded = ((p - meas) / meas for p in preds)
    errors_idle.append(abs(idle))
    errors.append(abs(loaded))
    print(f"| {case} | {ranks} | {meas * 1e3:.1f} | {preds[0] * 1e3:.1f} | {100 * idle:+.1f}% |"
          f" {preds[1] * 1e3:.1f} | {100 * loaded:+.1f}% | {runs} |")
for name, errs in (("idle machine", errors_idle), (f"load {background:g}", errors)):
    if errs:
        inside = sum(e <= 0.15 for e in errs)
        print(f"\n{name}: mean absolute error {100 * statistics.mean(errs):.1f}%, largest {100 * max(errs):.1f}%;"
              f" {inside}/{len(errs)} cases within +-15%")
PY
exit $failed
