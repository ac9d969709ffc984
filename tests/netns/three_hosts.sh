#!/usr/bin/env bash
# Three ranks on three "hosts": network namespaces h0, h1, h2 whose veth interfaces meet on a
# bridge in a fourth namespace, so the root namespace is never touched. Addresses are in
# 10.213.7.0/24 and exist only inside these namespaces. Each rank runs korovod-test-rank over TCP;
# the test passes when every rank's checks pass and all ranks print the same digest per check.
#
# usage: three_hosts.sh /path/to/korovod-test-rank
# Exit: 0 pass, 1 fail, 77 skipped (cannot create network namespaces here).
set -u

RANK_BIN=${1:?usage: three_hosts.sh /path/to/korovod-test-rank}
SKIP=77
PREFIX=kvt
ID="${PREFIX}$$"
NS_BRIDGE="${ID}br"
NS_HOSTS=("${ID}h0" "${ID}h1" "${ID}h2")
ADDRS=(10.213.7.1 10.213.7.2 10.213.7.3)
PORT=29500
WORK=""
PIDS=()

skip() {
  echo "SKIP: $*"
  exit "$SKIP"
}

cleanup() {
  local pid ns
  for pid in "${PIDS[@]}"; do kill -9 "$pid" 2>/dev/null; done
  for ns in "${NS_HOSTS[@]}" "$NS_BRIDGE"; do ip netns del "$ns" 2>/dev/null; done
  [ -n "$WORK" ] && rm -rf "$WORK"
}

[ "$(id -u)" = 0 ] || skip "creating network namespaces needs root (uid $(id -u))"
command -v ip >/dev/null 2>&1 || skip "no 'ip' command (install iproute2)"
[ -x "$RANK_BIN" ] || { echo "FAIL: $RANK_BIN is not executable"; exit 1; }

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
  ip -n "$NS_BRIDGE" link add br0 type bridge
  ip -n "$NS_BRIDGE" link set br0 up
  local i
  for i in 0 1 2; do
    ip netns add "${NS_HOSTS[i]}"
    # The veth pair is born in the bridge namespace and its far end moves into the host one.
    ip -n "$NS_BRIDGE" link add "port$i" type veth peer name eth0 netns "${NS_HOSTS[i]}"
    ip -n "$NS_BRIDGE" link set "port$i" master br0 up
    ip -n "${NS_HOSTS[i]}" link set lo up
    ip -n "${NS_HOSTS[i]}" addr add "${ADDRS[i]}/24" dev eth0
    ip -n "${NS_HOSTS[i]}" link set eth0 up
  done
}
if ! err=$( (setup) 2>&1 ); then
  # veth or bridge support missing in this kernel/container is an environment limit, not a bug.
  skip "cannot build the namespace network: $err"
fi

WORK=$(mktemp -d)
PEERS="${ADDRS[0]}:$PORT,${ADDRS[1]}:$PORT,${ADDRS[2]}:$PORT"
echo "ranks at $PEERS in namespaces ${NS_HOSTS[*]} (bridge in $NS_BRIDGE)"
for i in 0 1 2; do
  timeout 180 ip netns exec "${NS_HOSTS[i]}" "$RANK_BIN" --rank "$i" --peers "$PEERS" \
    --transport tcp --check allreduce,allgather --connect-timeout-ms 30000 \
    >"$WORK/rank$i.log" 2>&1 &
  PIDS+=($!)
done

status=0
for i in 0 1 2; do
  if wait "${PIDS[i]}"; then rc=0; else rc=$?; fi
  echo "--- rank $i (exit $rc) ---"
  cat "$WORK/rank$i.log"
  [ "$rc" = 0 ] || status=1
done
PIDS=()

# Every check ran on every rank and holds the same bits everywhere.
expected_checks="allreduce_float32_sum_n1 allreduce_float32_sum_n1000003
  allgather_float32_uneven_n1 allgather_float32_uneven_n1000003"
for check in $expected_checks; do
  digests=$(grep -h "^check $check ok digest " "$WORK"/rank*.log | awk '{print $5}' | sort -u)
  count=$(grep -h "^check $check ok digest " "$WORK"/rank*.log | wc -l)
  if [ "$count" != 3 ]; then
    echo "FAIL: $check passed on $count of 3 ranks"
    status=1
  elif [ "$(echo "$digests" | wc -l)" != 1 ]; then
    echo "FAIL: $check: ranks hold different results (digests: $(echo $digests))"
    status=1
  fi
done
[ "$status" = 0 ] && echo "PASS: allreduce and allgather across three namespaces"
exit "$status"
