#!/usr/bin/env bash
# Installs what is needed, builds, and runs every test once; the README's test command and what
# .ci/run calls. tests/README.md#ci-time has the stages' cold and warm times.
#
#   1. install-deps.sh (apt; the TensorFlow venv, the newest torch's venv and the CUDA wheels,
#      reused by their pinned sets)
#   2. the Go test infrastructure (kube-apiserver, kubelet, helm, Kueue, ...: build-testinfra.sh)
#      in the background at the lowest CPU priority: it takes the CPU the builds and tests leave
#      idle, and the k8s tests, last, wait for it. Cached per machine by its pinned versions.
#   3. the Release build: the product (NCCL backend compiled and linked when its libraries are
#      found), the Python client, the TensorFlow ops, and the tests of the product as users run
#      it (KOROVOD_BUILD_UNIT_TESTS=OFF); then the container images from it
#   4. those tests but k8s (python, tensorflow, horovod, package, bench, images, docs, layers)
#   5. the k8s tests (operator, webhook, chart, Kueue, a real node) on the Release build, with
#      the ASan+UBSan build of the C++ unit and multi-process tests of common, runtime, sidecar,
#      launcher and operator (KOROVOD_BUILD_SYSTEM_TESTS=OFF) beside them at nice 10
#   6. those unit and multi-process tests under ASan+UBSan
#   7. the libFuzzer targets (scripts/fuzz.sh: built with clang beside the k8s tests, run here for
#      60 s in all, with every past finding replayed)
# Both builds go through ccache (outside the clone), so a fresh clone on a machine that ran this
# before recompiles nothing it has seen. ctest starts the longest tests first from
# tests/ctest-costs.txt (measured; a run's own measurements refresh it: see tests/README.md).
# Each stage's wall time is printed at the end, also when a stage fails.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
JOBS="${JOBS:-2}"

STAGES=()
CURRENT_STAGE=""
CURRENT_T=0
T0=$(date +%s)
minutes_since() { awk -v t="$1" -v now="$(date +%s)" 'BEGIN { printf "%.1f", (now - t) / 60 }'; }
# kill_tree PID: PID and everything it started (a background stage's compilers outlive its shell).
kill_tree() {
  local child
  for child in $(pgrep -P "$1" 2>/dev/null); do kill_tree "$child"; done
  kill "$1" 2>/dev/null || true
}
summary() {
  local rc=$?
  # A failed run leaves no build behind (an unfinished Go build is never taken as built).
  if [ "$rc" != 0 ]; then
    [ -z "${TESTINFRA_PID:-}" ] || kill_tree "$TESTINFRA_PID"
    [ -z "${ASAN_PID:-}" ] || kill_tree "$ASAN_PID"
    [ -z "${FUZZ_PID:-}" ] || kill_tree "$FUZZ_PID"
  fi
  printf '\n==== stage times (%s)\n' "$([ "$rc" = 0 ] && echo passed || echo "FAILED, rc $rc")"
  local s
  for s in "${STAGES[@]}"; do printf '  %s\n' "$s"; done
  if [ -n "$CURRENT_STAGE" ]; then
    printf '  %-50s %6s min  <- failed\n' "$CURRENT_STAGE" "$(minutes_since "$CURRENT_T")"
  fi
  printf '  %-50s %6s min\n' "total" "$(minutes_since "$T0")"
}
trap summary EXIT
# stage NAME COMMAND...: runs COMMAND, records its wall time under NAME.
stage() {
  CURRENT_STAGE="$1"
  CURRENT_T=$(date +%s)
  shift
  printf '\n==== %s (%s)\n' "$CURRENT_STAGE" "$(date -u +%H:%M:%S)"
  "$@"
  STAGES+=("$(printf '%-50s %6s min' "$CURRENT_STAGE" "$(minutes_since "$CURRENT_T")")")
  CURRENT_STAGE=""
}

stage "install-deps.sh" bash scripts/install-deps.sh --cuda --k8s --images --tensorflow --torch-newest

# The Go builds write their log beside the clone's build trees; stamped and cached, a warm run
# only links the binaries.
printf '\n==== Go test infrastructure in the background (nice 19; log in build-testinfra.log)\n'
TESTINFRA_T=$(date +%s)
nice -n 19 bash scripts/build-testinfra.sh > build-testinfra.log 2>&1 &
TESTINFRA_PID=$!

# ccache: paths under the clone hashed relative to it (a clone elsewhere hits the same entries);
# the sanitizer build's -g1 does not hash the build directory.
CMAKE_CACHE_ARGS=()
if command -v ccache >/dev/null; then
  export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1
  export CCACHE_MAXSIZE="${CCACHE_MAXSIZE:-8G}"
  CMAKE_CACHE_ARGS=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  ccache --zero-stats >/dev/null
fi

# ctest's scheduling costs: the longest tests first, from the committed measurements (ctest reads
# Testing/Temporary/CTestCostData.txt; it adds its own after each run).
seed_costs() {
  mkdir -p "$1/Testing/Temporary"
  [ -f "$1/Testing/Temporary/CTestCostData.txt" ] ||
    cp tests/ctest-costs.txt "$1/Testing/Temporary/CTestCostData.txt"
}

release_build() {
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DKOROVOD_WITH_NCCL=AUTO \
    -DKOROVOD_BUILD_UNIT_TESTS=OFF -DKOROVOD_BUILD_SYSTEM_TESTS=ON "${CMAKE_CACHE_ARGS[@]}" >/dev/null
  cmake --build build -j"$JOBS"
}
stage "build (Release: product and system tests)" release_build

# The operator, sidecar, trainer-pytorch and pause images from that build (podman, no registry),
# as archives in .testinfra/images that the real-node tests import into the node's containerd.
stage "container images (scripts/build-images.sh)" bash scripts/build-images.sh build

# Horovod's own PyTorch suite runs as ctest horovod_torch_suite_2ranks (and *_torch_newest) from
# ../shared/horovod-tests (or KOROVOD_HOROVOD_TESTS); without it those tests are reported skipped,
# and said so here.
HOROVOD_TESTS="${KOROVOD_HOROVOD_TESTS:-$(cd .. && pwd)/shared/horovod-tests}"
if [ -f "$HOROVOD_TESTS/parallel/test_torch.py" ]; then
  echo "Horovod's test_torch.py: $HOROVOD_TESTS (ctest horovod_torch_suite_2ranks, and _torch_newest)"
else
  echo "Horovod's test_torch.py NOT FOUND at $HOROVOD_TESTS: horovod_torch_suite_2ranks(_torch_newest) SKIPPED"
fi
seed_costs build
stage "tests (Release, all but k8s)" \
  ctest --test-dir build -j"$JOBS" -LE '^k8s$' --output-on-failure --timeout 900

wait_testinfra() {
  if ! wait "$TESTINFRA_PID"; then
    cat build-testinfra.log >&2
    echo "scripts/build-testinfra.sh failed: the k8s tests cannot run" >&2
    return 1
  fi
  tail -2 build-testinfra.log
  echo "the Go test infrastructure took $(minutes_since "$TESTINFRA_T") min in the background"
}
stage "wait for the Go test infrastructure" wait_testinfra

# The sanitizer build (-O1 -g1, line tables only: the usual sanitizer setting, and about 3x faster
# to compile than -O2 -g on these machines; reports still name file and line; the NCCL backend's
# tests are built here too and skip without a GPU) runs beside the k8s tests at nice 10: those
# mostly wait on the API server, the kubelet and pods, and the compiler takes the CPU they leave.
SANITIZE=1
[ "${KOROVOD_SKIP_SANITIZERS:-0}" = 1 ] && SANITIZE=0
asan_build() {
  renice -n 10 -p "$BASHPID" >/dev/null
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKOROVOD_SANITIZE=ON \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1" \
    -DKOROVOD_WITH_NCCL=AUTO -DKOROVOD_BUILD_PYTHON=OFF -DKOROVOD_BUILD_BENCH=OFF \
    -DKOROVOD_BUILD_OPERATOR=ON -DKOROVOD_BUILD_UNIT_TESTS=ON -DKOROVOD_BUILD_SYSTEM_TESTS=OFF \
    "${CMAKE_CACHE_ARGS[@]}" >/dev/null
  cmake --build build-asan -j"$JOBS"
}
if [ "$SANITIZE" = 1 ]; then
  printf '\n==== build (ASan+UBSan) in the background at nice 10 (log in build-asan.log)\n'
  ASAN_T=$(date +%s)
  asan_build > build-asan.log 2>&1 &
  ASAN_PID=$!
fi

# The libFuzzer targets (tests/fuzz, clang, its own build-fuzz) are built beside the k8s tests too,
# at nice 15 so the ASan build keeps the CPU first (a few dozen files, ~1 CPU-min cold; ccache);
# they run after the ASan tests (scripts/fuzz.sh run: 60 s), where nothing timing-sensitive runs.
FUZZ=1
[ "${KOROVOD_SKIP_FUZZ:-0}" = 1 ] && FUZZ=0
if [ "$FUZZ" = 1 ]; then
  printf '\n==== build (libFuzzer targets) in the background at nice 15 (log in build-fuzz.log)\n'
  nice -n 15 bash scripts/fuzz.sh build > build-fuzz.log 2>&1 &
  FUZZ_PID=$!
fi

# A missing kube-apiserver, kubectl, helm, etcd, node binary or image archive fails the k8s tests
# here instead of skipping them.
KOROVOD_REQUIRE_K8S=1 stage "tests (Release, k8s; the ASan build beside them)" \
  ctest --test-dir build -j"$JOBS" -L '^k8s$' --output-on-failure --timeout 900

if [ "$SANITIZE" = 1 ]; then
  wait_asan_build() {
    if ! wait "$ASAN_PID"; then
      tail -100 build-asan.log >&2
      echo "the ASan+UBSan build failed (build-asan.log)" >&2
      return 1
    fi
    tail -1 build-asan.log
    echo "the ASan+UBSan build took $(minutes_since "$ASAN_T") min (beside the k8s tests)"
  }
  stage "wait for the ASan+UBSan build" wait_asan_build
  # The operator's GoogleTest suites (label operator: controller, manager, the webhook's decision
  # and its HTTPS server under slow clients and floods) run in this build too: fail loudly if a
  # build option ever drops them (issue 31 found them assumed absent).
  asan_operator_tests() {
    local n
    n="$(ctest --test-dir build-asan -N -L '^operator$' | sed -n 's/^Total Tests: //p')"
    if [ "${n:-0}" -eq 0 ]; then
      echo "the ASan+UBSan build has no operator tests (label operator)" >&2
      return 1
    fi
    echo "$n operator tests in the ASan+UBSan build"
  }
  stage "check: operator tests in the ASan+UBSan build" asan_operator_tests
  seed_costs build-asan
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
    stage "tests (ASan+UBSan: unit and multi-process)" \
    ctest --test-dir build-asan -j"$JOBS" --output-on-failure --timeout 1800
fi
if [ "$FUZZ" = 1 ]; then
  fuzz_stage() {
    if ! wait "$FUZZ_PID"; then
      tail -50 build-fuzz.log >&2
      echo "the fuzz build failed (build-fuzz.log)" >&2
      return 1
    fi
    bash scripts/fuzz.sh run
  }
  stage "fuzz (libFuzzer: every target, 60 s in all)" fuzz_stage
fi
if command -v ccache >/dev/null; then ccache --show-stats | sed -n '1,6p'; fi
