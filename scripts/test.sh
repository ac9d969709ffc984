#!/usr/bin/env bash
# Installs what is needed, builds, and runs every test: the Release build (all tests, NCCL backend
# compiled and linked when its libraries are available) and an ASan+UBSan build of the runtime
# (data plane and engine) and sidecar tests. This is the README's test command and what .ci/run calls.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
JOBS="${JOBS:-2}"

bash scripts/install-deps.sh --cuda

step() { printf '\n==== %s (%s)\n' "$1" "$(date -u +%H:%M:%S)"; }

step "configure + build (Release)"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DKOROVOD_WITH_NCCL=AUTO >/dev/null
cmake --build build -j"$JOBS"

step "tests (Release)"
ctest --test-dir build -j"$JOBS" --output-on-failure --timeout 900

if [ "${KOROVOD_SKIP_SANITIZERS:-0}" != 1 ]; then
  step "configure + build (ASan+UBSan, runtime and sidecar tests)"
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKOROVOD_SANITIZE=ON \
    -DKOROVOD_WITH_NCCL=OFF >/dev/null
  cmake --build build-asan -j"$JOBS"
  step "tests (ASan+UBSan)"
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --test-dir build-asan -j"$JOBS" -L 'runtime|sidecar' --output-on-failure --timeout 1800
fi
