#!/usr/bin/env bash
# Chaos 3: the link between hosts 0 and 1 throttled by tbf to 20 mbit/s each way (from the start,
# so the start-up link probe sees it), under an allreduce far larger than the op timeout allows at
# that rate. A slow link is not a dead one: the allreduce completes with the right sums, or, if
# the engine's op timeout ends it, every rank's error names an end of the slow link (rank 0 or
# rank 1 with its address), never a healthy rank; nothing hangs.
#
# Size: 32 MiB (MIB=...), not the issue's 256 MiB: a 3-rank ring allreduce sends 4/3 of the
# tensor over every link, so 256 MiB at 20 mbit/s is 143 s on the slow link alone (and 1.5 GB of
# trainer and arena memory); 32 MiB is ~18 s at 20 mbit/s, over three times the 5 s op timeout.
#
# Only the one link is shaped: in each of hosts 0 and 1, an htb root that sends everything to a
# fast class 1:1 except what a u32 filter picks (packets to the other host) for class 1:2, whose
# qdisc is tbf. (This kernel has no sch_prio, which would sort as well.)
#
# usage: chaos_throttle.sh korovod-sidecar korovod-chaos-trainer
# Exit: 0 pass, 1 fail, 77 skipped (no namespaces or tbf here).
set -u
SIDECAR=${1:?usage: chaos_throttle.sh korovod-sidecar korovod-chaos-trainer}
TRAINER=${2:?usage: chaos_throttle.sh korovod-sidecar korovod-chaos-trainer}
RATE=${RATE:-20mbit}
MIB=${MIB:-32}
. "$(dirname "$0")/lib.sh"

chaos_need tc
chaos_init throttle 3
shape() {
  set -e
  local from=$1 to=$2 ns=${NS_HOSTS[$1]}
  # htb only sorts (its classes are far faster than the link); tbf on class 1:2 throttles.
  tc -n "$ns" qdisc add dev eth0 root handle 1: htb default 1
  tc -n "$ns" class add dev eth0 parent 1: classid 1:1 htb rate 10gbit quantum 65536
  tc -n "$ns" class add dev eth0 parent 1: classid 1:2 htb rate 10gbit quantum 65536
  tc -n "$ns" qdisc add dev eth0 parent 1:2 handle 20: tbf rate "$RATE" burst 32kb latency 2s
  tc -n "$ns" filter add dev eth0 parent 1: protocol ip prio 1 u32 \
    match ip dst "${ADDRS[to]}/32" flowid 1:2
}
if ! err=$( (shape 0 1 && shape 1 0) 2>&1); then chaos_skip "cannot shape with tbf here: $err"; fi
chaos_fault_now "link ${ADDRS[0]} <-> ${ADDRS[1]} throttled to $RATE each way (tbf, from the start)"

chaos_start_sidecars || { chaos_finish 1; chaos_fail "the sidecars did not start"; chaos_exit; }
# A small step first (the loop is running), then the large one.
chaos_start_trainers --steps 2 --mib 1 --grow-mib $((MIB - 1)) --wait-seconds 300
# 4/3 of the tensor over a link at RATE, twice over for a loaded machine, and the slack.
chaos_finish $((MIB * 4 / 3 * 8 * 2 / ${RATE%mbit} + OP_TIMEOUT + CHAOS_SLACK + 20))
for i in 0 1; do
  echo "host $i sent $(tc -s -n "${NS_HOSTS[i]}" qdisc show dev eth0 | awk '/qdisc tbf/ {getline; print $2}') bytes through tbf to host $((1 - i))"
done
R0=$(chaos_rank_re 0)
R1=$(chaos_rank_re 1)
done_all=1
for i in 0 1 2; do grep -q " done: " "$WORK/trainer$i.log" || done_all=0; done
if [ "$done_all" = 1 ]; then
  for i in 0 1 2; do
    chaos_expect_done "$i"
    echo "trainer $i: $(grep 'step 1 ok' "$WORK/trainer$i.log")"
  done
  chaos_exit "a $MIB MiB allreduce over a $RATE link completed (no false timeout)"
fi
# The op timeout ended it: the error must name the slow link, and only after the op timeout.
step1=$(grep -h "step 0 ok" "$WORK"/trainer*.log | sort | tail -1)
FAULT_AT=$(chaos_line_time "$step1")  # the large step started here: its errors count from it
echo "the $MIB MiB step started by $(date -u -d "@$FAULT_AT" +%H:%M:%S.%3N); it did not complete on every rank"
for i in 0 1 2; do
  chaos_expect_error trainer "$i" "$R0" "$R1"
  chaos_expect_error sidecar "$i" "$R0" "$R1"
  # Not before the op timeout: a link that moves bytes is not declared dead early.
  t=$(chaos_line_time "$(chaos_error_line trainer "$i")")
  if [ -n "$t" ] && awk -v d="$(chaos_elapsed "$FAULT_AT" "$t")" -v m="$OP_TIMEOUT" \
    'BEGIN { exit !(d < 0.8 * m) }'; then
    chaos_fail "trainer $i failed $(chaos_elapsed "$FAULT_AT" "$t") s into the step, before the op timeout of $OP_TIMEOUT s"
  fi
done
chaos_exit "a $MIB MiB allreduce over a $RATE link ended, past the op timeout, naming the slow link"
