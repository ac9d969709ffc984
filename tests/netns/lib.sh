# Shared harness of the data-plane chaos tests (tests/netns/chaos_*.sh). Source it, then:
#
#   chaos_init NAME N      checks (root, ip, iptables, tc; else exit 77), removes namespaces left by
#                          killed runs, creates N hosts: network namespaces ${CHAOS_ID}h<i> whose
#                          eth0 (ADDRS[i] = 10.213.20.<i+1>/24) meets the others' on a bridge in
#                          ${CHAOS_ID}br. The root namespace is never touched; everything made
#                          (namespaces, processes, /dev/shm names, the work folder) is removed on
#                          every exit path (EXIT, INT, TERM).
#   chaos_start_sidecars   one real korovod-sidecar per host (KOROVOD_PEERS, the job key file, the
#                          test's short KOROVOD_OP_TIMEOUT_SECONDS, SIDECAR_ENV added), logs in
#                          $WORK/sidecar<i>.log, then waits for every trainer socket.
#   chaos_start_trainers A  one korovod-chaos-trainer per host with arguments A, logs in
#                          $WORK/trainer<i>.log.
#   chaos_fault_now        records the fault's time (FAULT_AT, epoch seconds) after a fault.
#   chaos_finish           waits for every trainer (kills and fails the stragglers), stops every
#                          sidecar with SIGTERM (same), prints every log and the summary.
#   chaos_expect_error WHO I PATTERN...   WHO (trainer|sidecar) I's first error line matches one of
#                          the extended regular expressions; prints it and its time from the fault.
#
# Each host runs its processes through HOST_EXEC[i] (default: ip netns exec <ns>); a test may
# replace it (the /dev/shm test enters a private mount namespace as well) or add a wrapper per
# host in SIDECAR_WRAP[i] (the descriptor limit test: prlimit).
#
# Outcome: chaos_fail records a failure; the test ends with `chaos_exit`: 0 pass, 1 fail.
# "Nothing hangs" is the only timed assertion: every process must end by itself within
# OP_TIMEOUT + CHAOS_SLACK seconds of the fault (generous: CI machines are loaded).

CHAOS_PREFIX=kvc
# Every process a test starts dies with the test's shell, even a shell killed outright (ctest's
# timeout): setpriv --pdeathsig KILL, where util-linux has it. Put it after `ip netns exec` /
# nsenter (which exec) and before the program.
CHAOS_ORPHAN_GUARD=""
if setpriv --pdeathsig KILL true 2>/dev/null; then CHAOS_ORPHAN_GUARD="setpriv --pdeathsig KILL"; fi
CHAOS_SKIP=77
CHAOS_STATUS=0
CHAOS_SUBNET=10.213.20
CHAOS_PORT=29600
OP_TIMEOUT=${OP_TIMEOUT:-5}     # KOROVOD_OP_TIMEOUT_SECONDS of every sidecar
CHAOS_SLACK=${CHAOS_SLACK:-10}  # seconds past the op timeout before an error is "late"
START_TIMEOUT=${START_TIMEOUT:-30}
# The time within which the error is due (plus CHAOS_SLACK): the op timeout, or for a fault at
# start the start timeout.
CHAOS_BOUND=${CHAOS_BOUND:-$OP_TIMEOUT}
WORK=""
NS_BRIDGE=""
NS_HOSTS=()
ADDRS=()
HOST_EXEC=()
SIDECAR_WRAP=()
SIDECAR_ENV=()
SIDECAR_PIDS=()
TRAINER_PIDS=()
EXTRA_PIDS=()
FAULT_AT=""
N=0

chaos_skip() {
  echo "SKIP: $*"
  exit "$CHAOS_SKIP"
}
chaos_fail() {
  echo "FAIL: $*"
  CHAOS_STATUS=1
}
chaos_now() { date -u +%s.%N; }
# Seconds from $1 to $2 (epoch seconds with fractions), three decimals.
chaos_elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", b - a }'; }
# The epoch time of a log line that starts with an RFC 3339 time.
chaos_line_time() { date -u -d "${1%% *}" +%s.%N 2>/dev/null; }

chaos_cleanup() {
  local pid ns
  for pid in "${TRAINER_PIDS[@]}" "${SIDECAR_PIDS[@]}" "${EXTRA_PIDS[@]}"; do
    [ -n "$pid" ] || continue
    kill -CONT "$pid" 2>/dev/null
    kill -9 "$pid" 2>/dev/null
  done
  for pid in "${TRAINER_PIDS[@]}" "${SIDECAR_PIDS[@]}" "${EXTRA_PIDS[@]}"; do
    [ -n "$pid" ] && wait "$pid" 2>/dev/null
  done
  for ns in "${NS_HOSTS[@]}" "$NS_BRIDGE"; do
    [ -n "$ns" ] && ip netns del "$ns" 2>/dev/null
  done
  rm -f /dev/shm/"$CHAOS_PREFIX$$"-* 2>/dev/null
  [ -n "$WORK" ] && rm -rf "$WORK"
}

# chaos_init NAME N
chaos_init() {
  local name=$1 i err stale ns pid
  N=$2
  [ "$(id -u)" = 0 ] || chaos_skip "network namespaces need root (uid $(id -u))"
  command -v ip >/dev/null 2>&1 || chaos_skip "no 'ip' command (install iproute2)"
  [ -x "$SIDECAR" ] || { echo "FAIL: korovod-sidecar '$SIDECAR' is not executable"; exit 1; }
  [ -x "$TRAINER" ] || { echo "FAIL: korovod-chaos-trainer '$TRAINER' is not executable"; exit 1; }
  # Until the engine reads KOROVOD_OP_TIMEOUT_SECONDS its op timeout is a fixed 60 s, and every
  # error these tests wait for comes ~55 s after they give up on it: say so up front.
  if ! grep -q KOROVOD_OP_TIMEOUT_SECONDS "$SIDECAR" 2>/dev/null; then
    echo "WARNING: $SIDECAR does not read KOROVOD_OP_TIMEOUT_SECONDS (issue 30): its op timeout is the fixed 60 s, so errors due within ${OP_TIMEOUT} s + ${CHAOS_SLACK} s of a fault come late"
  fi
  # Absolute: nsenter -m starts the command in / .
  SIDECAR=$(realpath "$SIDECAR")
  TRAINER=$(realpath "$TRAINER")

  # The work folders and /dev/shm names of runs killed outright (their pid is gone).
  for f in /tmp/korovod-chaos-*-[0-9]*.* /dev/shm/"$CHAOS_PREFIX"[0-9]*-*; do
    [ -e "$f" ] || continue
    pid=${f#/tmp/korovod-chaos-*-}
    pid=${pid#/dev/shm/"$CHAOS_PREFIX"}
    pid=${pid%%[.-]*}
    [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null && rm -rf "$f"
  done
  # Namespaces of an earlier run that was killed before its cleanup ran (its pid is gone).
  stale=$(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${CHAOS_PREFIX}[0-9]+(br|h[0-9]+)$")
  for ns in $stale; do
    pid=${ns#"$CHAOS_PREFIX"}
    pid=${pid%br}
    pid=${pid%h[0-9]*}
    kill -0 "$pid" 2>/dev/null && continue
    # Its processes too (a run killed outright could not stop them; see CHAOS_ORPHAN_GUARD).
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$pid" 2>/dev/null; done
    ip netns del "$ns" 2>/dev/null
  done

  CHAOS_ID="${CHAOS_PREFIX}$$"
  NS_BRIDGE="${CHAOS_ID}br"
  for ((i = 0; i < N; i++)); do
    NS_HOSTS[i]="${CHAOS_ID}h$i"
    ADDRS[i]="$CHAOS_SUBNET.$((i + 1))"
    HOST_EXEC[i]="ip netns exec ${NS_HOSTS[i]}"
  done
  trap chaos_cleanup EXIT
  trap 'exit 1' INT TERM
  if ! err=$(ip netns add "$NS_BRIDGE" 2>&1); then
    NS_BRIDGE=""
    chaos_skip "cannot create a network namespace: $err"
  fi
  if ! err=$( (chaos_build_net) 2>&1); then
    chaos_skip "cannot build the namespace network: $err"
  fi
  WORK=$(mktemp -d "/tmp/korovod-chaos-$name-$$.XXXXXX")
  printf '%064d\n' 0 | tr 0 c >"$WORK/job.key"
  chmod 600 "$WORK/job.key"
  PEERS=""
  for ((i = 0; i < N; i++)); do PEERS+="${PEERS:+,}${ADDRS[i]}:$CHAOS_PORT"; done
  echo "$name: $N hosts ${NS_HOSTS[*]} at ${ADDRS[*]} (bridge in $NS_BRIDGE), op timeout ${OP_TIMEOUT} s"
}

chaos_build_net() {
  set -e
  ip -n "$NS_BRIDGE" link set lo up
  ip -n "$NS_BRIDGE" link add br0 type bridge
  ip -n "$NS_BRIDGE" link set br0 up
  local i
  for ((i = 0; i < N; i++)); do
    ip netns add "${NS_HOSTS[i]}"
    # Born in the bridge namespace; the far end moves into the host.
    ip -n "$NS_BRIDGE" link add "port$i" type veth peer name eth0 netns "${NS_HOSTS[i]}"
    ip -n "$NS_BRIDGE" link set "port$i" master br0 up
    ip -n "${NS_HOSTS[i]}" link set lo up
    ip -n "${NS_HOSTS[i]}" addr add "${ADDRS[i]}/24" dev eth0
    ip -n "${NS_HOSTS[i]}" link set eth0 up
  done
}

# chaos_need CMD...: skip when a command is missing.
chaos_need() {
  local c
  for c in "$@"; do command -v "$c" >/dev/null 2>&1 || chaos_skip "no '$c' command"; done
}

# in_host I CMD...: runs CMD in host I's network namespace. Not for background processes (`&`
# would fork a subshell whose pid is not the command's): use ip netns exec there.
in_host() {
  local i=$1
  shift
  ip netns exec "${NS_HOSTS[i]}" "$@"
}

chaos_start_sidecars() {
  local i waited
  for ((i = 0; i < N; i++)); do
    # shellcheck disable=SC2086 # HOST_EXEC and SIDECAR_WRAP are word lists
    ${HOST_EXEC[i]} $CHAOS_ORPHAN_GUARD ${SIDECAR_WRAP[i]:-} env -i PATH=/usr/bin:/bin \
      KOROVOD_RANK="$i" KOROVOD_SIZE="$N" KOROVOD_PEERS="$PEERS" \
      KOROVOD_JOB_KEY_FILE="$WORK/job.key" KOROVOD_SOCKET="$WORK/rank$i.sock" \
      KOROVOD_SHM_PREFIX="/$CHAOS_PREFIX$$-h$i-" KOROVOD_START_TIMEOUT_SECONDS="$START_TIMEOUT" \
      KOROVOD_OP_TIMEOUT_SECONDS="$OP_TIMEOUT" KOROVOD_ARENA_HEAP_MIB=16 \
      "${SIDECAR_ENV[@]}" "$SIDECAR" >"$WORK/sidecar$i.log" 2>&1 &
    SIDECAR_PIDS[i]=$!
  done
  for ((i = 0; i < N; i++)); do
    waited=0
    while [ ! -S "$WORK/rank$i.sock" ]; do
      if ! kill -0 "${SIDECAR_PIDS[i]}" 2>/dev/null || [ "$waited" -ge $((START_TIMEOUT * 10 + 50)) ]; then
        return 1
      fi
      sleep 0.1
      waited=$((waited + 1))
    done
  done
  echo "sidecars up (pids ${SIDECAR_PIDS[*]})"
}

# chaos_start_trainers ARGS...: the same arguments for every rank.
chaos_start_trainers() {
  local i
  for ((i = 0; i < N; i++)); do
    # shellcheck disable=SC2086
    ${HOST_EXEC[i]} $CHAOS_ORPHAN_GUARD env -i PATH=/usr/bin:/bin KOROVOD_SOCKET="$WORK/rank$i.sock" \
      "$TRAINER" "$@" >"$WORK/trainer$i.log" 2>&1 &
    TRAINER_PIDS[i]=$!
  done
}

# chaos_wait_line FILE ERE SECONDS: until a line of FILE matches (0) or the time is up (1).
chaos_wait_line() {
  local file=$1 re=$2 until
  until=$(awk -v t="$3" -v n="$(chaos_now)" 'BEGIN { printf "%.3f", n + t }')
  while ! grep -qE "$re" "$file" 2>/dev/null; do
    if awk -v u="$until" -v n="$(chaos_now)" 'BEGIN { exit !(n > u) }'; then return 1; fi
    sleep 0.05
  done
}

# chaos_wait_steps K SECONDS: until every trainer has finished step K (0), else 1.
chaos_wait_steps() {
  local i
  for ((i = 0; i < N; i++)); do
    chaos_wait_line "$WORK/trainer$i.log" "step $1 ok" "$2" || return 1
  done
}

chaos_fault_now() {
  FAULT_AT=$(chaos_now)
  echo "fault injected at $(date -u -d "@$FAULT_AT" +%Y-%m-%dT%H:%M:%S.%3NZ): $*"
}

# chaos_wait_pid PID UNTIL: 0 once PID has exited, 1 if it is still running at UNTIL (epoch s).
chaos_wait_pid() {
  while kill -0 "$1" 2>/dev/null; do
    # A zombie of ours counts as exited; `wait` reaps it below.
    [ "$(ps -o stat= -p "$1" 2>/dev/null | cut -c1)" = Z ] && return 0
    if awk -v u="$2" -v n="$(chaos_now)" 'BEGIN { exit !(n > u) }'; then return 1; fi
    sleep 0.1
  done
}

# chaos_reap KIND I PID UNTIL: waits for the process; a straggler is killed and fails the test.
# Sets REAPED_RC.
chaos_reap() {
  local kind=$1 i=$2 pid=$3 until=$4
  REAPED_RC=""
  if ! chaos_wait_pid "$pid" "$until"; then
    chaos_fail "$kind $i (pid $pid) still running at the deadline: it hangs (killed)"
    kill -CONT "$pid" 2>/dev/null
    kill -9 "$pid" 2>/dev/null
  fi
  if wait "$pid" 2>/dev/null; then REAPED_RC=0; else REAPED_RC=$?; fi
}

# chaos_finish TRAINER_DEADLINE_SECONDS: every trainer must end within that many seconds of now;
# then every sidecar is told SIGTERM and must end within 15 s. Exit codes in TRAINER_RC/SIDECAR_RC.
chaos_finish() {
  local i until
  until=$(awk -v t="$1" -v n="$(chaos_now)" 'BEGIN { printf "%.3f", n + t }')
  for ((i = 0; i < N; i++)); do
    [ -n "${TRAINER_PIDS[i]:-}" ] || continue
    chaos_reap trainer "$i" "${TRAINER_PIDS[i]}" "$until"
    TRAINER_RC[i]=$REAPED_RC
    TRAINER_PIDS[i]=""
  done
  for ((i = 0; i < N; i++)); do
    [ -n "${SIDECAR_PIDS[i]:-}" ] && kill -CONT "${SIDECAR_PIDS[i]}" 2>/dev/null
    [ -n "${SIDECAR_PIDS[i]:-}" ] && kill -TERM "${SIDECAR_PIDS[i]}" 2>/dev/null
  done
  until=$(awk -v n="$(chaos_now)" 'BEGIN { printf "%.3f", n + 15 }')
  for ((i = 0; i < N; i++)); do
    [ -n "${SIDECAR_PIDS[i]:-}" ] || continue
    chaos_reap sidecar "$i" "${SIDECAR_PIDS[i]}" "$until"
    SIDECAR_RC[i]=$REAPED_RC
    SIDECAR_PIDS[i]=""
  done
  for ((i = 0; i < N; i++)); do
    echo "--- host $i: sidecar (exit ${SIDECAR_RC[i]:-?}) ---"
    cat "$WORK/sidecar$i.log" 2>/dev/null
    echo "--- host $i: trainer (exit ${TRAINER_RC[i]:-?}) ---"
    cat "$WORK/trainer$i.log" 2>/dev/null
  done
  echo "--- end of logs ---"
}

# The first error line a process printed: a trainer's failed step or connect, a sidecar's ERROR
# (or its engine's shutdown by a peer).
chaos_error_line() {
  local kind=$1 i=$2
  if [ "$kind" = trainer ]; then
    grep -m1 -E " failed: | cannot connect " "$WORK/trainer$i.log" 2>/dev/null
  else
    # An engine stopped by a peer's shutdown (that peer's SIGTERM) is logged as INFO.
    grep -m1 -E "^[^ ]+ ERROR |^[^ ]+ INFO .* engine shut down: " "$WORK/sidecar$i.log" 2>/dev/null
  fi
}

# chaos_expect_error KIND I ERE...: KIND I printed an error line whose root cause matches one of
# the EREs.
# Prints it with its time from the fault; an error later than CHAOS_BOUND + CHAOS_SLACK fails.
chaos_expect_error() {
  local kind=$1 i=$2 line root re ok=0 t dt
  shift 2
  line=$(chaos_error_line "$kind" "$i")
  if [ -z "$line" ]; then
    chaos_fail "$kind $i printed no error (expected one naming: $*)"
    return
  fi
  # The root cause: what the rank that gave up first saw (after the last "gave up: " of the
  # chain of peers' aborts), so naming the culprit only as a relay does not count.
  root=${line##*gave up: }
  for re in "$@"; do
    if grep -qE -- "$re" <<<"$root"; then ok=1; fi
  done
  t=$(chaos_line_time "$line")
  dt=$( [ -n "$FAULT_AT" ] && [ -n "$t" ] && chaos_elapsed "$FAULT_AT" "$t" || echo "?")
  echo "ERROR LINE $kind $i (+${dt} s after the fault): $line"
  CHAOS_ERROR_TIMES+=("$kind $i: $dt s")
  [ "$ok" = 1 ] || chaos_fail "$kind $i's error does not name the culprit in its root cause '$root' (wanted one of: $*)"
  if [ "$dt" != "?" ] && awk -v d="$dt" -v b="$((CHAOS_BOUND + CHAOS_SLACK))" 'BEGIN { exit !(d > b) }'; then
    if [ "$CHAOS_BOUND" = "$OP_TIMEOUT" ]; then
      chaos_fail "$kind $i's error came ${dt} s after the fault, beyond op timeout + $CHAOS_SLACK s (does this korovod-sidecar read KOROVOD_OP_TIMEOUT_SECONDS=$OP_TIMEOUT?)"
    else
      chaos_fail "$kind $i's error came ${dt} s after the fault, beyond $CHAOS_BOUND + $CHAOS_SLACK s"
    fi
  fi
}

# chaos_expect_blame I CULPRIT: sidecar I's error names rank CULPRIT in its root cause, or names
# another rank J there whose own error does (a failure at start spreads before any abort channel
# exists: a rank that gave up because of the culprit is what its neighbours see). Timing as
# chaos_expect_error.
chaos_expect_blame() {
  local i=$1 c=$2 line root j jroot
  line=$(chaos_error_line sidecar "$i")
  root=${line##*gave up: }
  root=${root#*ERROR \[rank $i\] sidecar: }
  if grep -qE -- "$(chaos_rank_re "$c")" <<<"${root#*rank $i (*)}"; then
    chaos_expect_error sidecar "$i" "$(chaos_rank_re "$c")"
    return
  fi
  for ((j = 0; j < N; j++)); do
    [ "$j" = "$i" ] || [ "$j" = "$c" ] || ! grep -qE -- "$(chaos_rank_re "$j")" <<<"$root" && continue
    jroot=$(chaos_error_line sidecar "$j")
    jroot=${jroot##*gave up: }
    if grep -qE -- "$(chaos_rank_re "$c")" <<<"${jroot#*rank $j (*)}"; then
      echo "sidecar $i names rank $j, whose own error names rank $c: $jroot"
      chaos_expect_error sidecar "$i" "$(chaos_rank_re "$j")"
      return
    fi
  done
  chaos_expect_error sidecar "$i" "$(chaos_rank_re "$c")"
}

# chaos_expect_done I: trainer I finished every step.
chaos_expect_done() {
  if [ "${TRAINER_RC[$1]:-x}" != 0 ] || ! grep -q " done: " "$WORK/trainer$1.log"; then
    chaos_fail "trainer $1 did not complete (exit ${TRAINER_RC[$1]:-?}): $(chaos_error_line trainer "$1")"
  else
    echo "trainer $1: $(grep " done: " "$WORK/trainer$1.log")"
  fi
}

# chaos_rank_re R: an ERE for "rank R (10.213.20.x:port)", how the engine names a peer.
chaos_rank_re() { echo "rank $1 \\(${ADDRS[$1]//./\\.}:[0-9]+\\)"; }

chaos_exit() {
  if [ "${#CHAOS_ERROR_TIMES[@]}" -gt 0 ]; then
    echo "fault-to-error times: ${CHAOS_ERROR_TIMES[*]}"
  fi
  if [ "$CHAOS_STATUS" = 0 ]; then echo "PASS: $*"; fi
  exit "$CHAOS_STATUS"
}
CHAOS_ERROR_TIMES=()
TRAINER_RC=()
SIDECAR_RC=()
