#!/usr/bin/env bash
# Chaos 5: /dev/shm fills up on host 1 during a run. Every host gets a private mount namespace
# (unshare -m) with its own small tmpfs on /dev/shm, so the machine's /dev/shm is never touched;
# sidecar and trainer of a host share it (nsenter). The trainers allreduce tensors that grow by
# 2 MiB a step, so the arena's client heap must grow (posix_fallocate in /dev/shm); once the loop
# runs, host 1's /dev/shm is filled to the last byte. Rank 1's trainer must fail with an error
# saying the arena could not grow for want of space; then, as in a pod whose main container
# ended, rank 1's sidecar is stopped (SIGTERM), and every other trainer and sidecar must end
# with an error naming rank 1 (10.213.20.2:port). Nothing hangs.
#
# The trainers bound their wait for heap space to the op timeout (--allocation-timeout-seconds):
# the client's own wait is 5 minutes, and a failed reservation is retried for all of it
# (sidecar/arena/heap_allocator.cc, HeapAllocator::AllocateWaiting; tests/netns/README.md).
#
# usage: chaos_shm_full.sh korovod-sidecar korovod-chaos-trainer
# Exit: 0 pass, 1 fail, 77 skipped (no namespaces, mount namespaces or tmpfs here).
set -u
SIDECAR=${1:?usage: chaos_shm_full.sh korovod-sidecar korovod-chaos-trainer}
TRAINER=${2:?usage: chaos_shm_full.sh korovod-sidecar korovod-chaos-trainer}
SHM_MIB=${SHM_MIB:-128}
. "$(dirname "$0")/lib.sh"

chaos_need unshare nsenter
chaos_init shm_full 3
# One process per host holds its mount namespace (a tmpfs on /dev/shm of SHM_MIB).
for ((i = 0; i < N; i++)); do
  ip netns exec "${NS_HOSTS[i]}" $CHAOS_ORPHAN_GUARD unshare -m --propagation private sh -c \
    "mount -t tmpfs -o size=${SHM_MIB}m kvcshm /dev/shm && echo ready && exec sleep 100000" \
    >"$WORK/holder$i.log" 2>&1 &
  EXTRA_PIDS+=($!)
  chaos_wait_line "$WORK/holder$i.log" "^ready" 10 ||
    chaos_skip "cannot mount a private tmpfs on /dev/shm: $(cat "$WORK/holder$i.log")"
  HOST_EXEC[i]="nsenter -t ${EXTRA_PIDS[i]} -m -n"
done
size=$(nsenter -t "${EXTRA_PIDS[1]}" -m df -k --output=size /dev/shm | tail -1 | tr -d " ")
[ "$size" = \
  $((SHM_MIB * 1024)) ] || { chaos_fail "host 1's /dev/shm is not its own tmpfs (size $size KiB)"; chaos_exit; }

chaos_start_sidecars || { chaos_finish 1; chaos_fail "the sidecars did not start"; chaos_exit; }
chaos_start_trainers --steps 40 --mib 1 --grow-mib 2 --wait-seconds 120 \
  --allocation-timeout-seconds "$OP_TIMEOUT"
chaos_wait_steps 2 60 || chaos_fail "the allreduce loop did not reach step 2 on every rank"
nsenter -t "${EXTRA_PIDS[1]}" -m dd if=/dev/zero of=/dev/shm/kvc-fill bs=1M status=none 2>/dev/null
chaos_fault_now "host 1's /dev/shm filled: $(nsenter -t "${EXTRA_PIDS[1]}" -m df -h --output=used,avail /dev/shm | tail -1)"

# Rank 1's trainer ends; its pod's sidecar is stopped then (the kubelet's part here).
until=$(awk -v t="$((OP_TIMEOUT + CHAOS_SLACK + 10))" -v n="$(chaos_now)" 'BEGIN { printf "%.3f", n + t }')
chaos_reap trainer 1 "${TRAINER_PIDS[1]}" "$until"
TRAINER_PIDS[1]=""
TRAINER_RC[1]=$REAPED_RC
kill -TERM "${SIDECAR_PIDS[1]}"
echo "trainer 1 ended (exit $REAPED_RC); its sidecar told SIGTERM at $(date -u +%H:%M:%S.%3N)"

chaos_finish $((OP_TIMEOUT + CHAOS_SLACK + 10))
R1=$(chaos_rank_re 1)
chaos_expect_error trainer 1 "/dev/shm|[Nn]o space|ENOSPC"
for i in 0 2; do
  chaos_expect_error trainer "$i" "$R1"
  chaos_expect_error sidecar "$i" "$R1"
done
chaos_exit "a full /dev/shm on host 1 failed rank 1 saying so, and every other rank named rank 1"
