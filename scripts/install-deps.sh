#!/usr/bin/env bash
# Installs everything korovod needs to build and test on Debian bookworm (run as root or with sudo).
#   scripts/install-deps.sh            build + test dependencies
#   scripts/install-deps.sh --bench    also the peer baselines (Open MPI, Gloo, torch) for bench/,
#                                      and Horovod 0.28.1 itself (built from the Python package
#                                      index for Debian's torch, CPU + Gloo, into
#                                      $KOROVOD_DEPS_DIR/horovod-venv; ~15 min on 2 cores, once)
#   scripts/install-deps.sh --cuda     also CUDA runtime + NCCL, for the optional GPU backend
#   scripts/install-deps.sh --tensorflow  also TensorFlow (CPU), Keras 3 and tf_keras from the
#                                      Python package index into $KOROVOD_DEPS_DIR/tf-venv, a
#                                      virtualenv that also sees Debian's torch (korovod.tensorflow
#                                      is built against it; ~600 MB, once)
#   scripts/install-deps.sh --torch-newest  also the newest torch from the Python package index
#                                      (pinned: TORCH_NEWEST_SET below) with numpy 2, pytest and
#                                      scikit-learn in $KOROVOD_DEPS_DIR/torch-venv, a virtualenv
#                                      isolated from Debian's site packages: the project's torch
#                                      tests and Horovod's suite run on it too (ctest's
#                                      *_torch_newest entries; ~5.4 GB with torch's CUDA wheels,
#                                      1.5 to 12 min by the network, once)
#   scripts/install-deps.sh --k8s      also etcd and libfaketime, for the operator's API-server
#                                      tests (the API server and kubectl come from
#                                      scripts/build-testinfra.sh),
#                                      and containerd, runc, the CNI plugins, iptables and
#                                      conntrack for the tests on a real node (tests/k8s/real_node.py)
#   scripts/install-deps.sh --images   also podman, buildah, debootstrap and runc, to build the
#                                      container images without Docker or a registry
#                                      (scripts/build-images.sh, images/README.md)
# Idempotent: packages already present are skipped by apt, CUDA wheels by a stamp file.
#
# --cuda is opt-in, not part of the default run: the NCCL wheel alone is ~300 MB to download and
# ~350 MB on disk, and a CPU-only build needs none of it (cmake's KOROVOD_WITH_NCCL=AUTO then just
# leaves the GPU backend out). CI passes --cuda so the backend is compiled and linked there even
# without a GPU.
#
# With --cuda, a system-wide toolkit (nvcc on PATH, /usr/local/cuda or $CUDA_HOME) and NCCL are used
# as they are. Whatever is missing comes from PyPI wheels, installed with Debian's pip into
# $KOROVOD_DEPS_DIR/cuda (default: <repo>/.deps/cuda, git-ignored), where cmake/Nccl.cmake looks.
# Only headers and shared libraries are fetched, no nvcc: the backend is plain C++ against the CUDA
# runtime API and NCCL. CUDA 13 wheels are used unless the driver (nvidia-smi) only supports 12,
# or KOROVOD_CUDA_FLAVOR=cu12 says so; if the CUDA 13 set cannot be installed, cu12 is tried.
set -euo pipefail

WITH_BENCH=0
WITH_CUDA=0
WITH_K8S=0
WITH_IMAGES=0
WITH_TENSORFLOW=0
WITH_TORCH_NEWEST=0
for a in "$@"; do
  case "$a" in
    --bench) WITH_BENCH=1 ;;
    --cuda) WITH_CUDA=1 ;;
    --k8s) WITH_K8S=1 ;;
    --images) WITH_IMAGES=1 ;;
    --tensorflow) WITH_TENSORFLOW=1 ;;
    --torch-newest) WITH_TORCH_NEWEST=1 ;;
    *) echo "install-deps.sh: unknown flag $a" >&2; exit 2 ;;
  esac
done

SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive

# clang-16 and libclang-rt-16-dev: the libFuzzer targets (scripts/fuzz.sh).
PKGS=(g++ make cmake ninja-build ccache pkg-config libgtest-dev libssl-dev nlohmann-json3-dev libyaml-cpp-dev iproute2
      clang-16 libclang-rt-16-dev
      python3 python3-dev python3-pip python3-venv
      libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libcpp-httplib-dev
      python3-grpcio python3-sklearn python3-numpy python3-torch pybind11-dev python3-pytest
      python3-yaml python3-mock python3-cloudpickle)
if [ "$WITH_BENCH" = 1 ]; then
  # libtorch-dev: python3-torch ships its C++ headers as symlinks into it; Horovod's torch
  # extension compiles against them.
  PKGS+=(libopenmpi-dev openmpi-bin libgloo-dev python3-torch libtorch-dev)
fi
if [ "$WITH_IMAGES" = 1 ]; then
  # runc, not crun: Debian 12's crun rejects hybrid cgroup v1 hosts (scripts/build-images.sh
  # writes a containers.conf selecting runc). debootstrap makes the base image from Debian's
  # mirror; gcc (above) builds the static pause binary (libc6-dev carries libc.a).
  PKGS+=(podman buildah debootstrap runc conmon containernetworking-plugins
         golang-github-containers-common)
fi
if [ "$WITH_K8S" = 1 ]; then
  PKGS+=(etcd-server openssl python3-cryptography)
  # libfaketime: tests/k8s/test_control_plane_chaos.py runs an operator replica 2 h ahead.
  PKGS+=(faketime)
  # A real node: the kubelet (scripts/build-testinfra.sh) runs pods through containerd 1.6 (CRI)
  # and runc; pod networking is the CNI bridge/host-local/loopback/portmap plugins in /usr/lib/cni;
  # portmap programs iptables, the kubelet checks conntrack; busybox-static makes the real-node
  # test's image (tests/k8s/test_real_node.py).
  PKGS+=(containerd runc containernetworking-plugins iptables conntrack busybox-static)
fi

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  # apt may be held by another installer on a shared machine: wait for it.
  for i in $(seq 1 60); do
    if $SUDO apt-get -o DPkg::Lock::Timeout=10 update -qq; then break; fi
    echo "apt busy, retrying ($i)..." >&2; sleep 5
  done
  $SUDO apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${missing[@]}"
fi

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# The virtualenvs and wheels are keyed by their pinned requirements (the stamps below) and kept
# per machine in $KOROVOD_CACHE/deps (scripts/cache.sh), which <repo>/.deps links to: a fresh
# clone reuses them. KOROVOD_DEPS_DIR puts them elsewhere. Created under the resolved path, so a
# venv never refers to the clone that first made it.
# shellcheck source=scripts/cache.sh
source "$REPO/scripts/cache.sh"
if [ -n "${KOROVOD_DEPS_DIR:-}" ]; then
  DEPS="$KOROVOD_DEPS_DIR"
else
  if [ ! -e "$REPO/.deps" ] && [ ! -L "$REPO/.deps" ]; then
    mkdir -p "$KOROVOD_CACHE/deps"
    ln -s "$KOROVOD_CACHE/deps" "$REPO/.deps"
  fi
  DEPS="$(cd "$REPO/.deps" && pwd -P)"
fi

# ---- PyTorch's own distributed test base (tests/torch_upstream) ----------------------------------
# torch.testing._internal imports expecttest, which neither torch ships. Pure Python, one version
# for every interpreter: installed into its own folder that only tests/torch_upstream puts on
# PYTHONPATH, so no interpreter's site packages change.
TORCH_UPSTREAM_SET="expecttest==0.3.0"
install_torch_upstream() {
  local dir="$DEPS/torch-upstream"
  if [ -f "$dir/.korovod-stamp" ] && [ "$(cat "$dir/.korovod-stamp")" = "$TORCH_UPSTREAM_SET" ]; then
    return
  fi
  rm -rf "$dir"
  /usr/bin/python3 -m pip install --quiet --disable-pip-version-check --no-deps --target "$dir" \
    $TORCH_UPSTREAM_SET
  echo "$TORCH_UPSTREAM_SET" >"$dir/.korovod-stamp"
}
install_torch_upstream

# ---- Horovod itself, the peer of bench/horovod_peer ---------------------------------------------
# In its own virtualenv (with Debian's site packages, for torch) so that its `horovod` package never
# shadows korovod's on the system path. Built once; the stamp names the version.
HOROVOD_VERSION=0.28.1
install_horovod() {
  local venv="$DEPS/horovod-venv"
  if [ -f "$venv/.korovod-stamp" ] && [ "$(cat "$venv/.korovod-stamp")" = "$HOROVOD_VERSION" ]; then
    echo "install-deps.sh: Horovod $HOROVOD_VERSION already in $venv"
    return 0
  fi
  rm -rf "$venv"
  /usr/bin/python3 -m venv --system-site-packages "$venv"
  echo "install-deps.sh: building Horovod $HOROVOD_VERSION into $venv (about 15 min on 2 cores)"
  # No build isolation: the build must see Debian's torch, not a fresh one from the index.
  "$venv/bin/pip" install --quiet --disable-pip-version-check cmake wheel packaging
  HOROVOD_WITH_PYTORCH=1 HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1 \
    HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1 HOROVOD_CPU_OPERATIONS=gloo \
    MAKEFLAGS="-j$(nproc)" \
    "$venv/bin/pip" install --no-build-isolation --no-cache-dir --disable-pip-version-check \
    "horovod==$HOROVOD_VERSION"
  "$venv/bin/python" -c 'import horovod.torch as hvd; assert hvd.gloo_built()'
  echo "$HOROVOD_VERSION" >"$venv/.korovod-stamp"
}
if [ "$WITH_BENCH" = 1 ]; then install_horovod; fi

# ---- TensorFlow, for korovod.tensorflow ----------------------------------------------------------
# Debian has no TensorFlow. The venv sees Debian's site packages (torch, sklearn, grpc) but has its
# own numpy: TensorFlow needs numpy >= 1.26, and Debian's torch (built for numpy 1.x) loads with
# 1.26 but not 2.x. Its own protobuf too (TensorFlow's, newer than Debian's). tf_keras is Keras 2
# for TF_USE_LEGACY_KERAS=1. Pinned; bump together. The stamp names the set.
TENSORFLOW_SET="tensorflow-cpu==2.21.0 tf_keras==2.21.0 numpy==1.26.4"
install_tensorflow() {
  local venv="$DEPS/tf-venv"
  if [ -f "$venv/.korovod-stamp" ] && [ "$(cat "$venv/.korovod-stamp")" = "$TENSORFLOW_SET" ]; then
    echo "install-deps.sh: TensorFlow already in $venv ($TENSORFLOW_SET)"
    return 0
  fi
  rm -rf "$venv"
  /usr/bin/python3 -m venv --system-site-packages "$venv"
  echo "install-deps.sh: installing $TENSORFLOW_SET into $venv"
  # shellcheck disable=SC2086  # the set is a list of requirements
  "$venv/bin/pip" install --quiet --disable-pip-version-check $TENSORFLOW_SET
  "$venv/bin/python" -c 'import tensorflow, torch, keras, tf_keras, numpy; assert numpy.__version__.startswith("1.")' \
    2>/dev/null
  echo "$TENSORFLOW_SET" >"$venv/.korovod-stamp"
}
if [ "$WITH_TENSORFLOW" = 1 ]; then install_tensorflow; fi

# ---- the newest torch, for the *_torch_newest tests ------------------------------------------------
# Debian's torch is 1.13; users run the newest from the package index. Its own virtualenv, without
# Debian's site packages (whose numpy 1.x and torch would shadow or clash with numpy 2 and torch 2).
# torch's pin lives here only (the tests ask the interpreter for its version); bump the set
# together. mock, cloudpickle and packaging: Horovod's test_torch.py imports them. The stamp names
# the set. A venv without the stamp (made by hand) is kept and completed in place rather than
# deleted under whoever uses it; pip's own cache is skipped (it would keep another 5 GB).
TORCH_NEWEST_SET="torch==2.15.0 numpy==2.4.6 scikit-learn==1.9.1 pytest==9.2.0 cloudpickle==3.1.3 mock==5.2.0 packaging==26.4"
install_torch_newest() {
  local venv="$DEPS/torch-venv"
  if [ -f "$venv/.korovod-stamp" ] && [ "$(cat "$venv/.korovod-stamp")" = "$TORCH_NEWEST_SET" ]; then
    echo "install-deps.sh: the newest torch already in $venv ($TORCH_NEWEST_SET)"
    return 0
  fi
  if ! grep -qs '^include-system-site-packages = false' "$venv/pyvenv.cfg" ||
     ! "$venv/bin/python" -c 'import sys' 2>/dev/null; then
    rm -rf "$venv"
    /usr/bin/python3 -m venv "$venv"
  fi
  local t0; t0=$(date +%s)
  echo "install-deps.sh: installing $TORCH_NEWEST_SET into $venv"
  # shellcheck disable=SC2086  # the set is a list of requirements
  "$venv/bin/pip" install --quiet --disable-pip-version-check --no-cache-dir $TORCH_NEWEST_SET
  "$venv/bin/python" -c 'import torch, numpy, sklearn, pytest, cloudpickle, mock, packaging
assert numpy.__version__.startswith("2."), numpy.__version__'
  echo "$TORCH_NEWEST_SET" >"$venv/.korovod-stamp"
  echo "install-deps.sh: the newest torch installed in $(( $(date +%s) - t0 )) s"
}
if [ "$WITH_TORCH_NEWEST" = 1 ]; then install_torch_newest; fi

[ "$WITH_CUDA" = 1 ] || exit 0

# ---- CUDA runtime + NCCL ------------------------------------------------------------------------
# Pinned so every machine builds against the same headers; bump together. The cu12 set needs the
# nvcc wheel only for its crt/ headers (cuda_runtime.h includes them); cu13 ships those separately.
CU13_CUDA=(nvidia-cuda-runtime==13.5.37 nvidia-cuda-crt==13.5.37 nvidia-cuda-cccl==13.3.5.0.6)
CU13_NCCL=(nvidia-nccl-cu13==2.32.3)
CU12_CUDA=(nvidia-cuda-runtime-cu12==12.9.79 nvidia-cuda-nvcc-cu12==12.9.86
           nvidia-cuda-cccl-cu12==12.9.27)
CU12_NCCL=(nvidia-nccl-cu12==2.32.3)

PREFIX="$DEPS/cuda"
PY=/usr/bin/python3

# Root of a system-wide toolkit, or empty.
system_cuda_root() {
  local nvcc
  if nvcc="$(command -v nvcc 2>/dev/null)"; then
    local root; root="$(cd "$(dirname "$nvcc")/.." && pwd)"
    # Debian's nvidia-cuda-toolkit puts nvcc in /usr/bin and headers in /usr/include.
    [ -f "$root/include/cuda_runtime_api.h" ] && { echo "$root"; return; }
  fi
  for r in "${CUDA_HOME:-}" "${CUDA_PATH:-}" /usr/local/cuda; do
    [ -n "$r" ] && [ -f "$r/include/cuda_runtime_api.h" ] && { echo "$r"; return; }
  done
  true
}

system_nccl_found() {
  local root="$1"
  for d in "$root/include" /usr/include /usr/local/include; do
    [ -n "$d" ] && [ -f "$d/nccl.h" ] || continue
    for l in "$root/lib64" "$root/lib" /usr/lib/x86_64-linux-gnu /usr/lib/aarch64-linux-gnu \
             /usr/local/lib /usr/lib64; do
      compgen -G "$l/libnccl.so*" >/dev/null && return 0
    done
  done
  return 1
}

# pip install --target into a fresh directory, then swap it in, so an interrupted install never
# leaves a half-populated prefix that cmake would pick up. Skipped when the stamp matches.
install_wheels() {
  local want="$*"
  if [ -f "$PREFIX/.korovod-stamp" ] && [ "$(cat "$PREFIX/.korovod-stamp")" = "$want" ]; then
    echo "install-deps.sh: CUDA wheels already in $PREFIX ($want)"
    return 0
  fi
  local tmp="$PREFIX.tmp.$$"
  rm -rf "$tmp"
  mkdir -p "$(dirname "$PREFIX")"
  echo "install-deps.sh: installing $want into $PREFIX"
  if ! "$PY" -m pip install --quiet --no-deps --no-compile --disable-pip-version-check \
       --root-user-action=ignore --target "$tmp" "$@"; then
    rm -rf "$tmp"
    return 1
  fi
  rm -rf "$PREFIX"
  mv "$tmp" "$PREFIX"
  echo "$want" >"$PREFIX/.korovod-stamp"
}

cuda_root="$(system_cuda_root)"
if [ -n "$cuda_root" ]; then
  ver="$(sed -n 's/^#define CUDART_VERSION \([0-9]*\).*/\1/p' \
        "$cuda_root/include/cuda_runtime_api.h")"
  major=$(( ${ver:-0} / 1000 ))
  if system_nccl_found "$cuda_root"; then
    echo "install-deps.sh: using system CUDA $major at $cuda_root and system NCCL"
    exit 0
  fi
  # Toolkit present, NCCL not: only the NCCL wheel that matches the toolkit's major version.
  case "$major" in
    13) install_wheels "${CU13_NCCL[@]}" ;;
    12) install_wheels "${CU12_NCCL[@]}" ;;
    *) echo "install-deps.sh: no NCCL wheel for system CUDA $major at $cuda_root (need 12/13)" >&2
       exit 1 ;;
  esac
  exit 0
fi

flavor="${KOROVOD_CUDA_FLAVOR:-}"
if [ -z "$flavor" ]; then
  flavor=cu13
  # A CUDA 13 runtime needs a CUDA 13 driver; on a GPU host with an older driver take cu12.
  if command -v nvidia-smi >/dev/null 2>&1; then
    drv="$(nvidia-smi 2>/dev/null | sed -n 's/.*CUDA Version: \([0-9]*\).*/\1/p' | head -1)"
    [ -n "$drv" ] && [ "$drv" -lt 13 ] && flavor=cu12
  fi
fi
case "$flavor" in
  cu13)
    install_wheels "${CU13_CUDA[@]}" "${CU13_NCCL[@]}" || {
      echo "install-deps.sh: CUDA 13 wheels failed, trying CUDA 12" >&2
      install_wheels "${CU12_CUDA[@]}" "${CU12_NCCL[@]}"
    } ;;
  cu12) install_wheels "${CU12_CUDA[@]}" "${CU12_NCCL[@]}" ;;
  *) echo "install-deps.sh: KOROVOD_CUDA_FLAVOR must be cu12 or cu13, not $flavor" >&2; exit 2 ;;
esac
