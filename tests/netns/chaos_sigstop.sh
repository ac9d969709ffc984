#!/usr/bin/env bash
# Chaos 4: rank 1's sidecar SIGSTOPped (a frozen process: its sockets stay open, it answers
# nothing) for the op timeout + 3 s in the middle of an allreduce loop on 3 hosts, then SIGCONT.
# The survivors (ranks 0 and 2, trainer and sidecar) must end with an error naming rank 1
# (10.213.20.2:port) within about the op timeout; rank 1 itself, once resumed, must end with an
# error too (its peers have given up); nothing hangs.
#
# usage: chaos_sigstop.sh korovod-sidecar korovod-chaos-trainer
# Exit: 0 pass, 1 fail, 77 skipped (no namespaces here).
set -u
SIDECAR=${1:?usage: chaos_sigstop.sh korovod-sidecar korovod-chaos-trainer}
TRAINER=${2:?usage: chaos_sigstop.sh korovod-sidecar korovod-chaos-trainer}
. "$(dirname "$0")/lib.sh"

chaos_init sigstop 3
chaos_start_sidecars || { chaos_finish 1; chaos_fail "the sidecars did not start"; chaos_exit; }
chaos_start_trainers --steps 1000000 --mib 4 --wait-seconds 120
chaos_wait_steps 2 60 || chaos_fail "the allreduce loop did not reach step 2 on every rank"

kill -STOP "${SIDECAR_PIDS[1]}"
chaos_fault_now "rank 1's sidecar (pid ${SIDECAR_PIDS[1]}) stopped for $((OP_TIMEOUT + 3)) s"
sleep $((OP_TIMEOUT + 3)) &
wait $!  # (not a foreground sleep: a TERM to this script is handled at once)
kill -CONT "${SIDECAR_PIDS[1]}"
echo "rank 1's sidecar continued at $(date -u +%Y-%m-%dT%H:%M:%S.%3NZ)"

chaos_finish $((CHAOS_SLACK + 10))
R1=$(chaos_rank_re 1)
for kind in trainer sidecar; do
  chaos_expect_error "$kind" 0 "$R1"
  chaos_expect_error "$kind" 2 "$R1"
  chaos_expect_error "$kind" 1 "."
done
chaos_exit "a stopped sidecar was named by every survivor, and every process ended"
