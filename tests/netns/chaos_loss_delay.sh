#!/usr/bin/env bash
# Chaos 2: the link between hosts 0 and 1 at 1% loss and 200 ms delay each way, from the start,
# under an allreduce loop on 3 hosts. A bad link is not a dead one: every step must complete with
# the right sums within the (short) op timeout; if one does not, the error must name an end of
# that link. Nothing hangs.
#
# The kernel here has no sch_netem: the delay comes from korovod-delay-proxy
# (bench/scaling/delay_proxy.cc) in hosts 0 and 1, behind an iptables REDIRECT of the TCP
# connections each opens to the other (the proxy's own, marked, pass); it holds every chunk for
# the delay, so each byte between the two is delayed once, 200 ms one way. The loss is an
# iptables `statistic` DROP of 1% of the packets each of the two receives from the other.
#
# usage: chaos_loss_delay.sh korovod-sidecar korovod-chaos-trainer korovod-delay-proxy
# Exit: 0 pass, 1 fail, 77 skipped (no namespaces or iptables here).
set -u
SIDECAR=${1:?usage: chaos_loss_delay.sh korovod-sidecar korovod-chaos-trainer korovod-delay-proxy}
TRAINER=${2:?usage: chaos_loss_delay.sh korovod-sidecar korovod-chaos-trainer korovod-delay-proxy}
PROXY=${3:?usage: chaos_loss_delay.sh korovod-sidecar korovod-chaos-trainer korovod-delay-proxy}
DELAY_MS=${DELAY_MS:-200}
LOSS=${LOSS:-0.01}
PROXY_PORT=4199
PROXY_MARK=0x4b
. "$(dirname "$0")/lib.sh"

chaos_need iptables
[ -x "$PROXY" ] || { echo "FAIL: korovod-delay-proxy '$PROXY' is not executable"; exit 1; }
chaos_init loss_delay 3
in_host 0 iptables -t nat -L OUTPUT >/dev/null 2>&1 ||
  chaos_skip "iptables (nat table) does not work in a network namespace here"

for pair in "0 1" "1 0"; do
  set -- $pair
  in_host "$1" iptables -t nat -A OUTPUT -p tcp -d "${ADDRS[$2]}" -m mark ! --mark "$PROXY_MARK" \
    -j REDIRECT --to-ports "$PROXY_PORT"
  in_host "$1" iptables -A INPUT -s "${ADDRS[$2]}" -m statistic --mode random \
    --probability "$LOSS" -j DROP
  ip netns exec "${NS_HOSTS[$1]}" $CHAOS_ORPHAN_GUARD "$PROXY" --port "$PROXY_PORT" --delay-us $((DELAY_MS * 1000)) \
    --mark "$PROXY_MARK" >"$WORK/proxy$1.log" 2>&1 &
  EXTRA_PIDS+=($!)
  chaos_wait_line "$WORK/proxy$1.log" "^ready" 10 || chaos_fail "korovod-delay-proxy did not start in host $1"
done
chaos_fault_now "link ${ADDRS[0]} <-> ${ADDRS[1]}: ${DELAY_MS} ms each way, loss $LOSS (from the start)"

chaos_start_sidecars || { chaos_finish 1; chaos_fail "the sidecars did not start"; chaos_exit; }
STEPS=${STEPS:-6}
chaos_start_trainers --steps "$STEPS" --mib 1 --wait-seconds 120
chaos_finish $((STEPS * (OP_TIMEOUT + 1) + CHAOS_SLACK + 20))
for i in 0 1; do
  echo "host $i dropped $(in_host "$i" iptables -L INPUT -v -n -x | awk '/statistic/ {print $1}') packets from host $((1 - i)) (the 1% loss)"
done
R0=$(chaos_rank_re 0)
R1=$(chaos_rank_re 1)
for i in 0 1 2; do
  if grep -q " done: " "$WORK/trainer$i.log"; then
    chaos_expect_done "$i"
    echo "trainer $i step times: $(grep -oE 'ok \([0-9]+ bytes, [0-9.]+ s\)' "$WORK/trainer$i.log" | awk '{print $4}' | tr '\n' ' ')"
  else
    # A step beyond the op timeout: acceptable only if it names the slow link.
    chaos_expect_error trainer "$i" "$R0" "$R1"
    chaos_expect_error sidecar "$i" "$R0" "$R1"
  fi
done
chaos_exit "1% loss and ${DELAY_MS} ms delay on a link: the allreduce loop went on (or named the link)"
