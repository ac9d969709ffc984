#!/usr/bin/env bash
# Chaos 6: rank 1's sidecar started with its descriptor limit at 64 (soft and hard, so it cannot
# raise it: prlimit --nofile=64:64), 4 hosts, an allreduce loop. Each peer costs a sidecar
# tcp_streams x (1 + KOROVOD_COLLECTIVE_LANES) + 1 connections (21 by default), plus its
# listener, the gRPC server's and the arena's descriptors: about 54 at 3 ranks, over 64 at 4. The
# loop completes, or rank 1 fails at start saying it ran out of descriptors (EMFILE, the limit)
# and every other rank's error names rank 1 (10.213.20.2:port), or names a rank whose own error
# names rank 1 (during the start there is no abort channel yet to carry rank 1's reason to a
# rank that is still waiting for a third one), all within the start timeout. Nothing hangs.
#
# usage: chaos_nofile.sh korovod-sidecar korovod-chaos-trainer
# Exit: 0 pass, 1 fail, 77 skipped (no namespaces or prlimit here).
set -u
SIDECAR=${1:?usage: chaos_nofile.sh korovod-sidecar korovod-chaos-trainer}
TRAINER=${2:?usage: chaos_nofile.sh korovod-sidecar korovod-chaos-trainer}
NOFILE=${NOFILE:-64}
START_TIMEOUT=10  # the fault strikes at start: errors are due within the start timeout
CHAOS_BOUND=$START_TIMEOUT
. "$(dirname "$0")/lib.sh"

chaos_need prlimit
chaos_init nofile 4
SIDECAR_WRAP[1]="prlimit --nofile=$NOFILE:$NOFILE --"
chaos_fault_now "rank 1's sidecar starts with RLIMIT_NOFILE $NOFILE"
if chaos_start_sidecars; then
  chaos_start_trainers --steps 20 --mib 4 --wait-seconds 120
  chaos_finish $((20 * (OP_TIMEOUT + 1) + CHAOS_SLACK))
else
  # A sidecar ended at start: the others must end too, by the start timeout.
  echo "a sidecar ended before serving its trainer"
  chaos_finish 0
fi
R1=$(chaos_rank_re 1)
done_all=1
for i in 0 1 2 3; do grep -q " done: " "$WORK/trainer$i.log" 2>/dev/null || done_all=0; done
if [ "$done_all" = 1 ]; then
  for i in 0 1 2 3; do chaos_expect_done "$i"; done
  chaos_exit "rank 1's sidecar served 3 ranks within $NOFILE descriptors"
fi
chaos_expect_error sidecar 1 "([Tt]oo many open files|out of file descriptors).*RLIMIT_NOFILE"
for i in 0 2 3; do chaos_expect_blame "$i" 1; done
chaos_exit "rank 1 out of descriptors was named by itself and by every other rank"
