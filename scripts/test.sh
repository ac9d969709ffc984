#!/usr/bin/env bash
# Installs what is needed, builds, and runs every test: the Release build (all tests, NCCL backend
# compiled and linked when its libraries are available; the operator's tests against a real
# kube-apiserver + etcd) and an ASan+UBSan build of the runtime (data plane and engine) and sidecar
# tests. This is the README's test command and what .ci/run calls. The e2e tests on a real node
# (tests/k8s/test_real_e2e.py) run the container images scripts/build-images.sh makes from the
# Release build; tests/README.md has the cold and warm times.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
JOBS="${JOBS:-2}"

bash scripts/install-deps.sh --cuda --k8s --images --tensorflow

step() { printf '\n==== %s (%s)\n' "$1" "$(date -u +%H:%M:%S)"; }

# kube-apiserver, kubectl, the node's binaries (kube-scheduler, kube-controller-manager, kubelet),
# helm, Kueue and the scheduler-plugins (Coscheduling) scheduler build from the Go module proxy
# while the C++ builds (the module download overlaps the compiles); the k8s tests need them.
# Stamped: a warm run skips them.
step "Go test infrastructure for the k8s tests (background, log in build-testinfra.log)"
bash scripts/build-testinfra.sh > build-testinfra.log 2>&1 &
TESTINFRA_PID=$!

step "configure + build (Release)"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DKOROVOD_WITH_NCCL=AUTO >/dev/null
cmake --build build -j"$JOBS"

# The operator, sidecar, trainer-pytorch and pause images from that build (podman, no registry),
# as archives in .testinfra/images that the real-node tests import into the node's containerd.
# Cached: the debootstrap base and the Debian runtime layers are built once per machine.
step "container images from build/ (scripts/build-images.sh)"
bash scripts/build-images.sh build

step "wait for the Go test infrastructure"
if ! wait "$TESTINFRA_PID"; then
  cat build-testinfra.log >&2
  echo "scripts/build-testinfra.sh failed: the k8s tests cannot run" >&2
  exit 1
fi
tail -2 build-testinfra.log

step "tests (Release)"
# Horovod's own PyTorch suite runs as ctest horovod_torch_suite_2ranks from ../shared/horovod-tests
# (or KOROVOD_HOROVOD_TESTS); without it that test is reported skipped, and said so here.
HOROVOD_TESTS="${KOROVOD_HOROVOD_TESTS:-$(cd .. && pwd)/shared/horovod-tests}"
if [ -f "$HOROVOD_TESTS/parallel/test_torch.py" ]; then
  echo "Horovod's test_torch.py: $HOROVOD_TESTS (ctest horovod_torch_suite_2ranks)"
else
  echo "Horovod's test_torch.py NOT FOUND at $HOROVOD_TESTS: horovod_torch_suite_2ranks is SKIPPED"
fi
# A missing kube-apiserver, kubectl, helm, etcd, node binary or image archive fails the k8s tests
# here instead of skipping them.
KOROVOD_REQUIRE_K8S=1 ctest --test-dir build -j"$JOBS" --output-on-failure --timeout 900

if [ "${KOROVOD_SKIP_SANITIZERS:-0}" != 1 ]; then
  step "configure + build (ASan+UBSan, runtime and sidecar tests)"
  # -O1 -g1 (line tables only): the usual sanitizer setting, and about 3x faster to compile than
  # -O2 -g on these machines; reports still name file and line.
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKOROVOD_SANITIZE=ON \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1" \
    -DKOROVOD_WITH_NCCL=OFF -DKOROVOD_BUILD_PYTHON=OFF -DKOROVOD_BUILD_OPERATOR=OFF >/dev/null
  cmake --build build-asan -j"$JOBS"
  step "tests (ASan+UBSan)"
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --test-dir build-asan -j"$JOBS" -L 'common|runtime|sidecar|launcher' --output-on-failure --timeout 1800
fi
