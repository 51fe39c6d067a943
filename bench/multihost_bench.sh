#!/usr/bin/env bash
# cohort across hosts, side by side with OpenMPI and Gloo's own ring, in an
# emulated cluster (scripts/cluster.sh: network namespaces, tbf-shaped links).
#
# Usage: bench/multihost_bench.sh [--build-dir DIR] [--bytes 64M] [--link 1gbit]
#          [--reps N] [--iters N] [--out DIR]
#
# Part A, 4 hosts x 1 rank, each link shaped to --link: a float32 sum
# allreduce of --bytes, by
#   cohort hierarchical  cohortrun -H h0,h1,h2,h3 cohort-bench (--backend
#                        hierarchical; with one rank per host it is the flat
#                        gloo communicator underneath)
#   cohort gloo          the same with --backend gloo
#   OpenMPI              mpirun --hostfile (the namespaces) with an rsh agent
#                        doing `ip netns exec`, bench/mpi_allreduce_bench.c,
#                        with OpenMPI's default algorithm choice
#   OpenMPI ring         the same with coll_tuned's ring forced
#                        (coll_tuned_allreduce_algorithm 4)
#   Gloo ring            bench/multihost_gloo_ring.cc: gloo::allreduce RING
# reported as busbw (size/time x 2(n-1)/n) and as a fraction of the link rate.
# Part B, 2 hosts x 2 ranks: cohort hierarchical against cohort's flat gloo
# ring, time ratio (flat / hierarchical: > 1 means hierarchical is faster).
#
# Each program runs --reps times (default 3), the order rotating between
# reps; each run times --iters calls (default 3) after one checked call and
# one warm-up, and the best run counts. Raw CSV in --out (default
# DIR/bench/multihost). Needs root (network namespaces). Exit status 0 when
# every run succeeded with correct results, 1 otherwise, 2 on bad arguments.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=$repo/build
bytes=64M
link=1gbit
reps=3
iters=3
out_dir=

die() { echo "multihost_bench.sh: $*" >&2; exit 1; }
usage_error() { echo "multihost_bench.sh: $* (see --help)" >&2; exit 2; }

while [[ $# -gt 0 ]]; do
  case "$1" in
    --build-dir) build_dir=$(realpath -m "${2:?--build-dir needs a value}"); shift 2 ;;
    --bytes) bytes=${2:?--bytes needs a value}; shift 2 ;;
    --link) link=${2:?--link needs a value}; shift 2 ;;
    --reps) reps=${2:?--reps needs a value}; shift 2 ;;
    --iters) iters=${2:?--iters needs a value}; shift 2 ;;
    --out) out_dir=$(realpath -m "${2:?--out needs a value}"); shift 2 ;;
    -h|--help) sed -n '2,30p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) usage_error "unknown argument '$1'" ;;
  esac
done
[[ $reps =~ ^[1-9][0-9]*$ ]] || usage_error "--reps expects a positive integer, got '$reps'"
[[ $iters =~ ^[1-9][0-9]*$ ]] || usage_error "--iters expects a positive integer, got '$iters'"
[[ $bytes =~ ^[0-9]+[KMG]?$ ]] || usage_error "--bytes expects a size such as 64M, got '$bytes'"
[[ $link =~ ^([0-9]+)(k|m|g)bit$ ]] || usage_error "--link expects a rate such as 1gbit or 100mbit, got '$link'"
case ${BASH_REMATCH[2]} in k) link_bps=$(( BASH_REMATCH[1] * 1000 )) ;; m) link_bps=$(( BASH_REMATCH[1] * 1000000 )) ;;
  g) link_bps=$(( BASH_REMATCH[1] * 1000000000 )) ;; esac
out_dir=${out_dir:-$build_dir/bench/multihost}
[[ $(id -u) -eq 0 ]] || die "needs root to create network namespaces"
for tool in cmake mpicc mpirun ip tc; do
  command -v "$tool" >/dev/null 2>&1 || die "$tool not found; run scripts/bootstrap.sh first"
done

# --- build ------------------------------------------------------------------
if [[ ! -f $build_dir/build.ninja && ! -f $build_dir/Makefile ]]; then
  cmake -S "$repo" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null || die "cmake configure failed"
fi
cmake --build "$build_dir" -j 2 --target cohort-bench cohortrun multihost_gloo_ring >/dev/null ||
  die "building cohort-bench, cohortrun and multihost_gloo_ring in $build_dir failed (Gloo needed: scripts/bootstrap.sh)"
cohortrun=$build_dir/cohort/launcher/cohortrun
cohort_bench=$build_dir/tools/cohort-bench
gloo_ring=$build_dir/bench/multihost_gloo_ring
mkdir -p "$build_dir/bench" "$out_dir"
mpi_bench=$build_dir/bench/mpi_allreduce_bench
if [[ ! -x $mpi_bench || $repo/bench/mpi_allreduce_bench.c -nt $mpi_bench ]]; then
  mpicc -O2 -std=c11 -D_POSIX_C_SOURCE=200809L -D_ISOC11_SOURCE -Wall -Wextra \
    -o "$mpi_bench" "$repo/bench/mpi_allreduce_bench.c" || die "mpicc failed on bench/mpi_allreduce_bench.c"
fi

# --- the cluster ------------------------------------------------------------
work=$(mktemp -d /tmp/multihost_bench.XXXXXX)
prefixes=()
# shellcheck disable=SC2317  # called by the EXIT trap
cleanup() {
  for p in "${prefixes[@]}"; do "$repo/scripts/cluster.sh" down --prefix "$p" || true; done
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

# Sets hosts (array), bridge, subnet for a new cluster of $1 hosts.
cluster_up() {
  local info
  info=$("$repo/scripts/cluster.sh" up --hosts "$1" --link "$link" --owner $$) || die "scripts/cluster.sh up failed"
  prefixes+=("$(sed -n 's/^prefix=//p' <<<"$info")")
  bridge=$(sed -n 's/^bridge=[^ ]* //p' <<<"$info")
  subnet=$(sed -n 's/^subnet=//p' <<<"$info")
  mapfile -t hosts < <(sed -n 's/^host=\([^ ]*\) .*/\1/p' <<<"$info")
}

# OpenMPI starts its daemons through this agent: `agent HOST cmd...`.
# A TMPDIR per host: the emulated hosts share /tmp and one host name, and
# their OpenMPI daemons would race to create the same session directory.
cat >"$work/netns_agent.sh" <<EOF
#!/bin/sh
host=\$1
shift
mkdir -p "$work/tmp-\$host"
exec ip netns exec "\$host" env TMPDIR="$work/tmp-\$host" /bin/sh -c "\$*"
EOF
chmod +x "$work/netns_agent.sh"

sizes=(--min-bytes "$bytes" --max-bytes "$bytes" --iters "$iters" --warmup 1 --csv)
failed=0

# run NAME CMD...: runs one program, appends its CSV row to $out_dir/NAME.csv.
run() {
  local name=$1
  shift
  local log stamp
  stamp=$(date +%s%N)
  log=$out_dir/$name.$stamp.log
  if ! "$@" >"$log" 2>&1; then
    echo "multihost_bench.sh: $name failed (log: $log)" >&2
    failed=1
    return
  fi
  local row
  row=$(sed 's/^\[0\] //' "$log" | grep '^allreduce,' | head -1)
  [[ -n $row ]] || { echo "multihost_bench.sh: $name printed no result (log: $log)" >&2; failed=1; return; }
  [[ $(cut -d, -f10 <<<"$row") == 0 ]] || { echo "multihost_bench.sh: $name: wrong results: $row" >&2; failed=1; }
  echo "$row" >>"$out_dir/$name.csv"
}

# shellcheck disable=SC2317  # called through run
cohort_on() {  # cohort_on HOSTLIST BACKEND
  "$cohortrun" -H "$1" --launch-template 'ip netns exec {host}' --store-addr "$bridge" --backend "$2" \
    "$cohort_bench" allreduce "${sizes[@]}"
}

# best NAME: the lowest time_us of NAME's runs, and its busbw.
best() { sort -t, -k7,7g "$out_dir/$1.csv" | head -1; }

rm -f "$out_dir"/*.csv

# --- part A: 4 hosts x 1 rank -------------------------------------------------
cluster_up 4
a_hosts=$(IFS=,; echo "${hosts[*]}")
printf '%s slots=1\n' "${hosts[@]}" >"$work/hostfile"
# shellcheck disable=SC2054  # "tcp,self" is one MCA value
# rtc_hwloc_vmhole none: see tests/cluster/cluster_test.cc (orted's shared
# topology segment at a fixed address crashes it at random).
mpi_flags=(--hostfile "$work/hostfile" -np 4 --mca plm_rsh_agent "$work/netns_agent.sh" --mca rtc_hwloc_vmhole none
           --mca oob_tcp_if_include "$subnet" --mca btl tcp,self --mca btl_tcp_if_include "$subnet" --bind-to none)
[[ $(id -u) -eq 0 ]] && mpi_flags+=(--allow-run-as-root)
programs=(a_hierarchical a_gloo a_mpi a_mpi_ring a_gloo_ring)
for (( rep = 0; rep < reps; rep++ )); do
  for (( k = 0; k < ${#programs[@]}; k++ )); do
    p=${programs[$(( (k + rep) % ${#programs[@]} ))]}
    case $p in
      a_hierarchical) run "$p" cohort_on "$a_hosts" hierarchical ;;
      a_gloo) run "$p" cohort_on "$a_hosts" gloo ;;
      a_mpi) run "$p" mpirun "${mpi_flags[@]}" "$mpi_bench" "${sizes[@]}" ;;
      a_mpi_ring) run "$p" mpirun "${mpi_flags[@]}" --mca coll_tuned_use_dynamic_rules 1 \
                    --mca coll_tuned_allreduce_algorithm 4 "$mpi_bench" "${sizes[@]}" ;;
      a_gloo_ring)
        rm -rf "$work/gloo_store"; mkdir -p "$work/gloo_store"
        run "$p" "$cohortrun" -H "$a_hosts" --launch-template 'ip netns exec {host}' --store-addr "$bridge" \
          "$gloo_ring" --store-dir "$work/gloo_store" --iface eth0 --bytes "$bytes" --iters "$iters" ;;
    esac
  done
done

# --- part B: 2 hosts x 2 ranks ------------------------------------------------
cluster_up 2
b_hosts="${hosts[0]}:2,${hosts[1]}:2"
for (( rep = 0; rep < reps; rep++ )); do
  if (( rep % 2 == 0 )); then
    run b_hierarchical cohort_on "$b_hosts" hierarchical
    run b_gloo cohort_on "$b_hosts" gloo
  else
    run b_gloo cohort_on "$b_hosts" gloo
    run b_hierarchical cohort_on "$b_hosts" hierarchical
  fi
done

# --- report -------------------------------------------------------------------
echo "# multihost_bench: $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, kernel $(uname -r)"
echo "# float32 sum allreduce of $bytes; links shaped to $link (tbf, both directions); best of $reps runs x $iters calls"
echo
echo "A. 4 hosts x 1 rank"
printf '| %-22s | %12s | %12s | %16s |\n' program "time (ms)" "busbw (GB/s)" "busbw / link"
printf '|%s|%s|%s|%s|\n' "$(printf -- '-%.0s' {1..24})" "$(printf -- '-%.0s' {1..14})" "$(printf -- '-%.0s' {1..14})" "$(printf -- '-%.0s' {1..18})"
for p in a_hierarchical a_gloo a_mpi a_mpi_ring a_gloo_ring; do
  [[ -s $out_dir/$p.csv ]] || continue
  IFS=, read -r _ _ _ _ _ _ t _ bus _ _ <<<"$(best "$p")"
  case $p in
    a_hierarchical) label="cohort hierarchical" ;; a_gloo) label="cohort gloo" ;;
    a_mpi) label="OpenMPI MPI_Allreduce" ;; a_mpi_ring) label="OpenMPI, ring forced" ;;
    a_gloo_ring) label="Gloo ring (own)" ;;
  esac
  awk -v l="$label" -v t="$t" -v b="$bus" -v link="$link_bps" \
    'BEGIN { printf "| %-22s | %12.1f | %12.4f | %15.1f%% |\n", l, t / 1000, b, 100 * b * 8e9 / link }'
done
echo
echo "B. 2 hosts x 2 ranks"
if [[ -s $out_dir/b_hierarchical.csv && -s $out_dir/b_gloo.csv ]]; then
  IFS=, read -r _ _ _ _ _ _ th _ bh _ _ <<<"$(best b_hierarchical)"
  IFS=, read -r _ _ _ _ _ _ tg _ bg _ _ <<<"$(best b_gloo)"
  awk -v th="$th" -v tg="$tg" -v bh="$bh" -v bg="$bg" 'BEGIN {
    printf "| %-22s | %12s | %12s |\n", "program", "time (ms)", "busbw (GB/s)"
    printf "|------------------------|--------------|--------------|\n"
    printf "| %-22s | %12.1f | %12.4f |\n", "cohort hierarchical", th / 1000, bh
    printf "| %-22s | %12.1f | %12.4f |\n", "cohort gloo (flat ring)", tg / 1000, bg
    printf "\ntime ratio flat gloo / hierarchical: %.2f (> 1: hierarchical is faster)\n", tg / th }'
fi
echo
echo "raw CSV and logs: $out_dir"
exit $failed
