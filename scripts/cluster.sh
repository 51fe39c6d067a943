#!/usr/bin/env bash
# cluster.sh: an emulated cluster on one Linux machine, for testing and
# benchmarking multi-host cohort jobs without more machines.
#
#   scripts/cluster.sh up --hosts N [--link RATE] [--delay D] [--prefix NAME] [--owner PID]
#   scripts/cluster.sh down [--prefix NAME | --all | --stale]
#   scripts/cluster.sh exec HOST cmd [args...]
#   scripts/cluster.sh list
#
# `up` creates N network namespaces, the "hosts" NAME-h0 .. NAME-h<N-1>, each
# with one interface eth0 and its own IPv4 address, joined by a bridge NAME-br
# in the root namespace. The bridge holds the subnet's first address, so a
# program in the root namespace (cohortrun, its store) reaches every host and
# every host reaches it. Each host's link is shaped in both directions (its
# eth0 towards the bridge, and the bridge port towards it) by a tbf qdisc at
# RATE (a tc rate: 1gbit, 100mbit; default 1gbit) and, when the kernel has
# sch_netem, delayed by D (a tc time: 0.1ms; default 0). A kernel without
# netem (CONFIG_NET_SCH_NETEM unset) cannot add delay: the links are then
# rate limited only, `up` says so on stderr and prints delay_applied=0.
#
# Names are unique per run: without --prefix a random one ("cc" + 6 hex
# digits) is chosen; the subnet is a free 10.X.Y.0/24 (X in 200..254) that no
# interface or route of this machine overlaps, chosen under a lock so that
# clusters created in parallel never share one. Everything stays inside the
# namespaces and the bridge: no NAT, no forwarding to other interfaces.
#
# `up` prints what it created, one "key=value" line each, for scripts:
#   prefix=cc1a2b3c
#   subnet=10.213.7.0/24
#   bridge=cc1a2b3c-br 10.213.7.1
#   host=cc1a2b3c-h0 10.213.7.2        (one line per host)
#   link=1gbit delay=0.1ms delay_applied=1
# and records the same in /run/cohort-cluster/<prefix>.env.
#
# Removal: `down --prefix NAME` kills the processes left in the hosts and
# deletes the namespaces, the bridge and the record. A failing `up` removes
# what it created before it exits. With --owner PID, `up` also leaves a
# detached watcher that runs `down` once PID has exited, so a test killed
# half-way (a timeout, a crash) does not leave its cluster behind; `down
# --stale` removes every cluster whose owner is gone, `down --all` every
# cluster this script created.
#
# `exec HOST cmd` runs cmd in HOST (a namespace name, or the index 0..N-1
# with --prefix): the same as `ip netns exec HOST cmd`, which is also the
# launch template cohortrun needs:
#   cohortrun -H cc1a2b3c-h0:2,cc1a2b3c-h1:2 --launch-template 'ip netns exec {host}' \
#             --store-addr 10.213.7.1 prog args
#
# Needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN) and iproute2.
set -euo pipefail

readonly STATE_DIR=/run/cohort-cluster
readonly LOCK_FILE=$STATE_DIR/.lock
readonly MAX_HOSTS=200

die() { echo "cluster.sh: error: $*" >&2; exit 1; }
note() { echo "cluster.sh: $*" >&2; }

usage() {
  sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'
}

need_tools() {
  command -v ip >/dev/null || die "iproute2's 'ip' is not installed"
  command -v tc >/dev/null || die "iproute2's 'tc' is not installed"
}

valid_prefix() { [[ $1 =~ ^[a-z][a-z0-9]{0,9}$ ]]; }

random_prefix() { printf 'cc%06x' $(( (RANDOM << 15 | RANDOM) & 0xffffff )); }

ip_to_int() {
  local IFS=.
  read -r a b c d <<<"$1"
  echo $(( (a << 24) | (b << 16) | (c << 8) | d ))
}

# True when 10.$1.$2.0/24 overlaps an address or route of this machine (in
# any case the root namespace's), so using it could capture real traffic.
subnet_taken() {
  local base=$(( (10 << 24) | ($1 << 16) | ($2 << 8) )) end cidr net len start stop
  end=$(( base + 255 ))
  while read -r cidr; do
    [[ $cidr == default ]] && continue
    [[ $cidr == */* ]] || cidr=$cidr/32
    net=${cidr%/*}; len=${cidr#*/}
    [[ $net =~ ^[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+$ ]] || continue
    start=$(( $(ip_to_int "$net") & ~((1 << (32 - len)) - 1) & 0xffffffff ))
    stop=$(( start + (1 << (32 - len)) - 1 ))
    (( start <= end && base <= stop )) && return 0
  done < <( { ip -4 route show table all | awk '{for (i = 1; i <= 2; i++) if ($i ~ /^[0-9.]+(\/[0-9]+)?$/) {print $i; break}}'
              ip -4 -o addr show | awk '{print $4}'; } )
  return 1
}

# Picks a free 10.X.Y.0/24 and prints "X Y"; the caller holds the lock.
pick_subnet() {
  local seed x y i
  seed=$(( $(printf '%d' "'${PREFIX:0:1}") + ${#PREFIX} * 7 + RANDOM ))
  for (( i = 0; i < 55 * 256; i++ )); do
    x=$(( 200 + (seed / 256 + i / 256) % 55 ))
    y=$(( (seed + i) % 256 ))
    if ! subnet_taken "$x" "$y"; then echo "$x $y"; return; fi
  done
  die "no free 10.X.Y.0/24 subnet (X in 200..254) on this machine"
}

# tc arguments for one shaped direction; the burst covers one 64 KiB GSO
# packet plus slack so tbf never has to split segments, and the queue holds
# about 20 ms at RATE so a TCP window in flight is not dropped.
shape_link() {
  local ns_args=("$@")
  local dev=${ns_args[-1]}
  unset 'ns_args[-1]'
  if [[ $NETEM == 1 && $DELAY != 0 && $DELAY != 0ms ]]; then
    tc "${ns_args[@]}" qdisc add dev "$dev" root handle 1: tbf rate "$LINK" burst 256kb latency 20ms
    tc "${ns_args[@]}" qdisc add dev "$dev" parent 1:1 handle 10: netem delay "$DELAY" limit 100000
  else
    tc "${ns_args[@]}" qdisc add dev "$dev" root tbf rate "$LINK" burst 256kb latency 20ms
  fi
}

netem_available() {
  # A throw-away veth pair in a throw-away namespace tells without touching
  # anything that exists.
  local probe="ccprobe$$"
  ip netns add "$probe" 2>/dev/null || return 1
  local ok=1
  if ip -n "$probe" link add p0 type veth peer name p1 2>/dev/null &&
     tc -n "$probe" qdisc add dev p0 root netem delay 1ms 2>/dev/null; then ok=0; fi
  ip netns del "$probe" 2>/dev/null || true
  return $ok
}

cluster_up() {
  local hosts="" owner=""
  LINK=1gbit DELAY=0 PREFIX=""
  while (( $# )); do
    case $1 in
      --hosts) hosts=${2:?--hosts needs a number}; shift 2 ;;
      --hosts=*) hosts=${1#*=}; shift ;;
      --link) LINK=${2:?--link needs a rate}; shift 2 ;;
      --link=*) LINK=${1#*=}; shift ;;
      --delay) DELAY=${2:?--delay needs a time}; shift 2 ;;
      --delay=*) DELAY=${1#*=}; shift ;;
      --prefix) PREFIX=${2:?--prefix needs a name}; shift 2 ;;
      --prefix=*) PREFIX=${1#*=}; shift ;;
      --owner) owner=${2:?--owner needs a pid}; shift 2 ;;
      --owner=*) owner=${1#*=}; shift ;;
      *) die "up: unknown argument '$1' (see --help)" ;;
    esac
  done
  if ! [[ $hosts =~ ^[0-9]+$ ]] || (( hosts < 1 || hosts > MAX_HOSTS )); then
    die "up: --hosts needs a number of hosts 1..$MAX_HOSTS, got '$hosts'"
  fi
  [[ $LINK =~ ^[0-9]+(\.[0-9]+)?([kmgt]?bit|[kmgt]?bps)$ ]] ||
    die "up: --link needs a tc rate such as 1gbit or 100mbit, got '$LINK'"
  [[ $DELAY =~ ^[0-9]+(\.[0-9]+)?(us|ms|s)?$ ]] || die "up: --delay needs a time such as 0.1ms, got '$DELAY'"
  [[ -z $owner || $owner =~ ^[0-9]+$ ]] || die "up: --owner needs a pid, got '$owner'"
  [[ -n $PREFIX ]] || PREFIX=$(random_prefix)
  valid_prefix "$PREFIX" || die "up: --prefix must be 1-10 lowercase letters and digits starting with a letter, got '$PREFIX'"
  need_tools
  mkdir -p "$STATE_DIR"

  NETEM=0
  if [[ $DELAY != 0 && $DELAY != 0ms && $DELAY != 0us ]]; then
    if netem_available; then NETEM=1
    else note "warning: delay $DELAY not applied: this kernel has no sch_netem (CONFIG_NET_SCH_NETEM); links are rate limited only"
    fi
  fi

  exec 9>"$LOCK_FILE"
  flock 9
  [[ ! -e $STATE_DIR/$PREFIX.env ]] || die "up: a cluster named '$PREFIX' exists already (down --prefix $PREFIX)"
  ip link show "$PREFIX-br" >/dev/null 2>&1 && die "up: interface $PREFIX-br exists already"
  local x y
  read -r x y < <(pick_subnet)
  local net="10.$x.$y"

  # From here on a failure (or an interruption) removes whatever was created.
  trap 'exit 130' INT TERM HUP
  trap undo_failed_up EXIT
  {
    echo "prefix=$PREFIX"
    echo "hosts=$hosts"
    echo "owner=$owner"
  } >"$STATE_DIR/$PREFIX.env"

  ip link add "$PREFIX-br" type bridge
  # The bridge forwards between ports only; nothing is routed out of it.
  ip addr add "$net.1/24" dev "$PREFIX-br"
  ip link set "$PREFIX-br" up
  local i
  for (( i = 0; i < hosts; i++ )); do
    local ns="$PREFIX-h$i" port="$PREFIX-v$i"
    ip netns add "$ns"
    ip link add "$port" type veth peer name eth0 netns "$ns"
    ip link set "$port" master "$PREFIX-br"
    ip link set "$port" up
    ip -n "$ns" link set lo up
    ip -n "$ns" addr add "$net.$(( i + 2 ))/24" dev eth0
    ip -n "$ns" link set eth0 up
    shape_link -n "$ns" eth0
    shape_link "$port"
  done
  flock -u 9

  {
    echo "subnet=$net.0/24"
    echo "bridge=$PREFIX-br $net.1"
    for (( i = 0; i < hosts; i++ )); do echo "host=$PREFIX-h$i $net.$(( i + 2 ))"; done
    echo "link=$LINK delay=$DELAY delay_applied=$(( NETEM ))"
  } >>"$STATE_DIR/$PREFIX.env"
  trap - EXIT

  if [[ -n $owner ]]; then
    # Detached from our stdout/stderr so that callers reading them see EOF.
    setsid "$0" watch --prefix "$PREFIX" --owner "$owner" </dev/null >/dev/null 2>&1 &
  fi
  grep -v '^hosts=\|^owner=' "$STATE_DIR/$PREFIX.env"
}

# The EXIT trap of a failing `up`: removes what it created.
undo_failed_up() {
  local status=$?
  trap - EXIT
  if (( status )); then
    note "up failed; removing $PREFIX"
    remove_cluster "$PREFIX"
  fi
  exit "$status"
}

remove_cluster() {
  local prefix=$1 ns pid
  valid_prefix "$prefix" || die "down: bad prefix '$prefix'"
  for ns in $(ip netns list | awk '{print $1}' | grep -E "^$prefix-h[0-9]+$" || true); do
    # Processes left in a host would keep its namespace (and port) alive.
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null || true; done
    ip netns del "$ns" 2>/dev/null || true
  done
  # Deleting a namespace deletes its veth end and so the port; a port whose
  # namespace vanished some other way is removed here.
  for pid in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | sed 's/@.*//' | grep -E "^$prefix-v[0-9]+$" || true); do
    ip link del "$pid" 2>/dev/null || true
  done
  ip link del "$prefix-br" 2>/dev/null || true
  rm -f "$STATE_DIR/$prefix.env"
}

cluster_down() {
  local prefix="" mode=one f
  while (( $# )); do
    case $1 in
      --prefix) prefix=${2:?--prefix needs a name}; shift 2 ;;
      --prefix=*) prefix=${1#*=}; shift ;;
      --all) mode=all; shift ;;
      --stale) mode=stale; shift ;;
      *) die "down: unknown argument '$1'" ;;
    esac
  done
  need_tools
  case $mode in
    one)
      [[ -n $prefix ]] || die "down: --prefix NAME (or --all, --stale) is required"
      remove_cluster "$prefix" ;;
    all|stale)
      shopt -s nullglob
      for f in "$STATE_DIR"/*.env; do
        local p owner
        p=$(sed -n 's/^prefix=//p' "$f"); owner=$(sed -n 's/^owner=//p' "$f")
        if [[ $mode == all ]] || [[ -n $owner ]] && ! kill -0 "$owner" 2>/dev/null; then
          note "removing $p"
          remove_cluster "$p"
        fi
      done ;;
  esac
}

# Runs `down` once the owner has exited (started by `up --owner`).
cluster_watch() {
  local prefix="" owner=""
  while (( $# )); do
    case $1 in
      --prefix) prefix=$2; shift 2 ;;
      --owner) owner=$2; shift 2 ;;
      *) die "watch: unknown argument '$1'" ;;
    esac
  done
  while kill -0 "$owner" 2>/dev/null && [[ -e $STATE_DIR/$prefix.env ]]; do sleep 1; done
  [[ -e $STATE_DIR/$prefix.env ]] && remove_cluster "$prefix"
  return 0
}

cluster_exec() {
  (( $# >= 2 )) || die "exec: usage: exec HOST cmd [args...]"
  local host=$1
  shift
  ip netns list | awk '{print $1}' | grep -qx -- "$host" || die "exec: no host (network namespace) named '$host'"
  exec ip netns exec "$host" "$@"
}

cluster_list() {
  shopt -s nullglob
  local f
  for f in "$STATE_DIR"/*.env; do
    echo "== $(basename "$f" .env)"
    grep -v '^prefix=' "$f"
  done
}

main() {
  (( $# )) || { usage >&2; exit 2; }
  local command=$1
  shift
  case $command in
    up) cluster_up "$@" ;;
    down) cluster_down "$@" ;;
    exec) cluster_exec "$@" ;;
    list) cluster_list ;;
    watch) cluster_watch "$@" ;;
    -h|--help|help) usage ;;
    *) die "unknown command '$command' (up, down, exec, list; see --help)" ;;
  esac
}

main "$@"
