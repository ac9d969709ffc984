#!/usr/bin/env bash
# Preflight across three "hosts" with two networks each, one of them broken.
#
# Network namespaces h0, h1, h2 each get eth0 on network A (10.213.8.0/24, bridge br0) and eth1
# on network B (10.213.9.0/24, bridge br1); both bridges live in a fourth namespace, so the root
# namespace is never touched. Network A is then broken by taking br0 down: eth0 stays up with
# carrier in every host, so only trying it shows that it does not work. Each host gets its own
# host name (a UTS namespace). Real korovod-sidecar processes start with KOROVOD_COORDINATOR
# (rank 0 on network B) and every host offers eth0 first.
#
#   1. coordinator: preflight skips eth0 for eth1, korovod-test-trainer's ops pass on every rank,
#      and every start-up summary line shows eth1;
#   2. world file listing eth0 then eth1 for every rank: the same;
#   3. KOROVOD_IFACE=eth0: every sidecar fails within the start timeout, and the ranks that dial
#      name the rank, host, address and interface they tried.
#
# usage: sidecar_preflight.sh /path/to/korovod-sidecar /path/to/korovod-test-trainer
# Exit: 0 pass, 1 fail, 77 skipped (cannot create network namespaces here).
set -u

SIDECAR=${1:?usage: sidecar_preflight.sh korovod-sidecar korovod-test-trainer}
TRAINER=${2:?usage: sidecar_preflight.sh korovod-sidecar korovod-test-trainer}
SKIP=77
PREFIX=kvp
ID="${PREFIX}$$"
NS_BRIDGE="${ID}br"
NS_HOSTS=("${ID}h0" "${ID}h1" "${ID}h2")
NET_A=10.213.8  # broken
NET_B=10.213.9  # works
COORD_PORT=29400
DATA_PORT=29500
START_TIMEOUT=8
WORK=""
PIDS=()
STATUS=0

skip() {
  echo "SKIP: $*"
  exit "$SKIP"
}
fail() {
  echo "FAIL: $*"
  STATUS=1
}

kill_all() {
  local pid
  for pid in "${PIDS[@]}"; do kill -9 "$pid" 2>/dev/null; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null; done
  PIDS=()
}

cleanup() {
  local ns
  kill_all
  for ns in "${NS_HOSTS[@]}" "$NS_BRIDGE"; do ip netns del "$ns" 2>/dev/null; done
  rm -f /dev/shm/kvp"$$"-* 2>/dev/null
  [ -n "$WORK" ] && rm -rf "$WORK"
}

[ "$(id -u)" = 0 ] || skip "creating network namespaces needs root (uid $(id -u))"
command -v ip >/dev/null 2>&1 || skip "no 'ip' command (install iproute2)"
command -v unshare >/dev/null 2>&1 || skip "no 'unshare' command (install util-linux)"
[ -x "$SIDECAR" ] || { echo "FAIL: $SIDECAR is not executable"; exit 1; }
[ -x "$TRAINER" ] || { echo "FAIL: $TRAINER is not executable"; exit 1; }

# Namespaces left by an earlier run that was killed before its cleanup ran (its pid is gone).
stale=$(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${PREFIX}[0-9]+(br|h[0-9])$")
for ns in $stale; do
  pid=${ns#"$PREFIX"}
  pid=${pid%br}
  pid=${pid%h[0-9]}
  kill -0 "$pid" 2>/dev/null || ip netns del "$ns" 2>/dev/null
done

trap cleanup EXIT
trap 'exit 1' INT TERM

if ! err=$(ip netns add "$NS_BRIDGE" 2>&1); then
  skip "cannot create a network namespace: $err"
fi

setup() {
  set -e
  ip -n "$NS_BRIDGE" link set lo up
  local b i
  for b in 0 1; do
    ip -n "$NS_BRIDGE" link add "br$b" type bridge
    ip -n "$NS_BRIDGE" link set "br$b" up
  done
  for i in 0 1 2; do
    ip netns add "${NS_HOSTS[i]}"
    ip -n "${NS_HOSTS[i]}" link set lo up
    # eth0 first, so it is the first candidate every host offers.
    ip -n "$NS_BRIDGE" link add "a$i" type veth peer name eth0 netns "${NS_HOSTS[i]}"
    ip -n "$NS_BRIDGE" link set "a$i" master br0 up
    ip -n "${NS_HOSTS[i]}" addr add "$NET_A.$((i + 1))/24" dev eth0
    ip -n "${NS_HOSTS[i]}" link set eth0 up
    ip -n "$NS_BRIDGE" link add "b$i" type veth peer name eth1 netns "${NS_HOSTS[i]}"
    ip -n "$NS_BRIDGE" link set "b$i" master br1 up
    ip -n "${NS_HOSTS[i]}" addr add "$NET_B.$((i + 1))/24" dev eth1
    ip -n "${NS_HOSTS[i]}" link set eth1 up
  done
  # Break network A: frames on it go nowhere, yet eth0 keeps its carrier in every host.
  ip -n "$NS_BRIDGE" link set br0 down
}
if ! err=$( (setup) 2>&1 ); then
  skip "cannot build the namespace network: $err"
fi
if ! ip netns exec "${NS_HOSTS[0]}" unshare --uts true 2>/dev/null; then
  skip "cannot create a UTS namespace (unshare --uts)"
fi

WORK=$(mktemp -d)
printf '%064d\n' 0 | tr 0 c >"$WORK/job.key"
chmod 600 "$WORK/job.key"
cat >"$WORK/world" <<EOF
# Every rank offers the broken network first.
rank=0 host=h0 port=$DATA_PORT addr=eth0/$NET_A.1 addr=eth1/$NET_B.1
rank=1 host=h1 port=$DATA_PORT addr=eth0/$NET_A.2 addr=eth1/$NET_B.2
rank=2 host=h2 port=$DATA_PORT addr=eth0/$NET_A.3 addr=eth1/$NET_B.3
EOF

# start_sidecars RUN VAR=VALUE...: one sidecar per host with the given placement variables.
start_sidecars() {
  local run=$1 i
  shift
  for i in 0 1 2; do
    timeout 120 ip netns exec "${NS_HOSTS[i]}" unshare --uts \
      env -i PATH=/usr/bin:/bin HOSTNAME_TO_SET="h$i" \
      KOROVOD_RANK="$i" KOROVOD_SIZE=3 KOROVOD_JOB_KEY_FILE="$WORK/job.key" \
      KOROVOD_SOCKET="$WORK/$run.rank$i.sock" KOROVOD_SHM_PREFIX="/kvp$$-$run-" \
      KOROVOD_DATA_PORT="$DATA_PORT" KOROVOD_START_TIMEOUT_SECONDS="$START_TIMEOUT" \
      KOROVOD_ARENA_HEAP_MIB=16 "$@" \
      sh -c 'hostname "$HOSTNAME_TO_SET" && exec "$0"' "$SIDECAR" \
      >"$WORK/$run.sidecar$i.log" 2>&1 &
    PIDS+=($!)
  done
}

show_logs() {
  local run=$1 i
  for i in 0 1 2; do
    echo "--- $run: sidecar $i ---"
    cat "$WORK/$run.sidecar$i.log"
    [ -f "$WORK/$run.trainer$i.log" ] && { echo "--- $run: trainer $i ---"; cat "$WORK/$run.trainer$i.log"; }
  done
}

# run_job RUN VAR=VALUE...: sidecars up, a trainer per rank, summaries checked, sidecars stopped.
run_job() {
  local run=$1 i waited
  start_sidecars "$@"
  for i in 0 1 2; do
    waited=0
    while [ ! -S "$WORK/$run.rank$i.sock" ]; do
      if ! kill -0 "${PIDS[i]}" 2>/dev/null || [ "$waited" -ge 600 ]; then
        fail "$run: sidecar $i did not become ready"
        show_logs "$run"
        kill_all
        return
      fi
      sleep 0.1
      waited=$((waited + 1))
    done
  done
  local tpids=()
  for i in 0 1 2; do
    timeout 120 ip netns exec "${NS_HOSTS[i]}" env -i KOROVOD_SOCKET="$WORK/$run.rank$i.sock" \
      "$TRAINER" >"$WORK/$run.trainer$i.log" 2>&1 &
    tpids+=($!)
  done
  for i in 0 1 2; do
    if ! wait "${tpids[i]}"; then fail "$run: trainer $i failed"; fi
    grep -q "^trainer rank $i/3 ok$" "$WORK/$run.trainer$i.log" || fail "$run: trainer $i not ok"
  done
  for i in 0 1 2; do kill -TERM "${PIDS[i]}" 2>/dev/null; done
  for i in 0 1 2; do wait "${PIDS[i]}" 2>/dev/null; done
  PIDS=()
  for i in 0 1 2; do
    local line next prev
    line=$(grep "\] world: korovod: rank $i/3 " "$WORK/$run.sidecar$i.log")
    next=$(((i + 1) % 3))
    prev=$(((i + 2) % 3))
    echo "$run: $line"
    case "$line" in
      *"rank $i/3 host h$i iface eth1 addr $NET_B.$((i + 1)):$DATA_PORT transport tcp: next rank $next (h$next) $NET_B.$((next + 1)) (eth1) "*" GB/s, prev rank $prev (h$prev) $NET_B.$((prev + 1)) (eth1) "*" GB/s") ;;
      *) fail "$run: rank $i's summary does not show eth1 on both links: '$line'" ;;
    esac
  done
  [ "$STATUS" = 0 ] || show_logs "$run"
}

echo "hosts ${NS_HOSTS[*]}: eth0 on $NET_A.0/24 (broken), eth1 on $NET_B.0/24; bridges in $NS_BRIDGE"

# 1. Rendezvous, the broken interface offered first.
run_job coord KOROVOD_COORDINATOR="$NET_B.1:$COORD_PORT"
# 2. A world file, the broken interface listed first.
run_job file KOROVOD_WORLD_FILE="$WORK/world"

# 3. Only the broken interface: the start fails within the timeout, naming what was tried.
start_sidecars iface KOROVOD_COORDINATOR="$NET_B.1:$COORD_PORT" KOROVOD_IFACE=eth0
for i in 0 1 2; do
  if wait "${PIDS[i]}"; then rc=0; else rc=$?; fi
  [ "$rc" = 1 ] || fail "iface: sidecar $i exited $rc, expected 1 (a start-up error)"
done
PIDS=()
for i in 1 2; do
  log="$WORK/iface.sidecar$i.log"
  want="rank $i (host h$i) cannot reach rank 0 (host h0) before the start deadline (tried $NET_A.1:$DATA_PORT on eth0: "
  grep -qF "$want" "$log" || fail "iface: sidecar $i's error lacks: $want"
  echo "iface: $(grep -F "cannot reach" "$log")"
done
grep -q "rank 0 .*timed out after" "$WORK/iface.sidecar0.log" || fail "iface: rank 0 did not time out"
[ "$STATUS" = 0 ] || show_logs iface

[ "$STATUS" = 0 ] && echo "PASS: preflight skipped the broken eth0 (coordinator and world file), and KOROVOD_IFACE=eth0 failed naming rank, host, address and interface"
exit "$STATUS"
