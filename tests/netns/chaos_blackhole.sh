#!/usr/bin/env bash
# Chaos 1: the link between hosts 0 and 1 blackholed (iptables DROP of everything each receives
# from the other) in the middle of an allreduce loop on 3 hosts. Every trainer and sidecar, the
# bystander rank 2 included, must end with an error whose root cause names an end of that link
# (rank 0 (10.213.20.1:port) or rank 1 (10.213.20.2:port)); nothing hangs.
#
# usage: chaos_blackhole.sh korovod-sidecar korovod-chaos-trainer
# Exit: 0 pass, 1 fail, 77 skipped (no namespaces or iptables here).
set -u
SIDECAR=${1:?usage: chaos_blackhole.sh korovod-sidecar korovod-chaos-trainer}
TRAINER=${2:?usage: chaos_blackhole.sh korovod-sidecar korovod-chaos-trainer}
. "$(dirname "$0")/lib.sh"

chaos_need iptables
chaos_init blackhole 3
in_host 0 iptables -L INPUT >/dev/null 2>&1 || chaos_skip "iptables does not work in a network namespace here"

chaos_start_sidecars || { chaos_finish 1; chaos_fail "the sidecars did not start"; chaos_exit; }
chaos_start_trainers --steps 1000000 --mib 4 --wait-seconds 120
chaos_wait_steps 2 60 || chaos_fail "the allreduce loop did not reach step 2 on every rank"

# DROP on INPUT (not OUTPUT, whose drops TCP would see as local errors): a cable cut.
in_host 0 iptables -A INPUT -s "${ADDRS[1]}" -j DROP
in_host 1 iptables -A INPUT -s "${ADDRS[0]}" -j DROP
chaos_fault_now "link ${ADDRS[0]} <-> ${ADDRS[1]} blackholed"

chaos_finish $((OP_TIMEOUT + CHAOS_SLACK + 10))
R0=$(chaos_rank_re 0)
R1=$(chaos_rank_re 1)
for kind in trainer sidecar; do
  for i in 0 1 2; do chaos_expect_error "$kind" "$i" "$R0" "$R1"; done
done
chaos_exit "a blackholed link ended every rank with an error naming an end of it"
