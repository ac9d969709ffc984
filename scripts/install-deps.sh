#!/usr/bin/env bash
# Installs everything korovod needs to build and test on Debian bookworm (run as root or with sudo).
#   scripts/install-deps.sh            build + test dependencies
#   scripts/install-deps.sh --bench    also the peer baselines (Open MPI, Gloo, torch) for bench/
# Idempotent: packages already present are skipped by apt.
set -euo pipefail

WITH_BENCH=0
for a in "$@"; do
  case "$a" in
    --bench) WITH_BENCH=1 ;;
    *) echo "install-deps.sh: unknown flag $a" >&2; exit 2 ;;
  esac
done

SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive

PKGS=(g++ make cmake ninja-build pkg-config libgtest-dev libssl-dev iproute2 python3 python3-pip
      python3-venv)
if [ "$WITH_BENCH" = 1 ]; then
  PKGS+=(libopenmpi-dev openmpi-bin libgloo-dev python3-torch)
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
