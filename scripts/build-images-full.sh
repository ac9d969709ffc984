#!/usr/bin/env bash
# Builds the images from their Dockerfiles, exactly as a release would (`docker build -f
# images/X/Dockerfile .`), with podman and no Docker engine or registry: the Debian base the
# Dockerfiles pin is made locally with debootstrap (scripts/images-common.sh, shared with
# scripts/build-images.sh). Each image compiles korovod again in its builder stage: ~15-20 min per
# image on 2 cores, so this is not part of CI (the fast path, scripts/build-images.sh, is).
#   scripts/build-images-full.sh [IMAGE_DIR...]   default: operator sidecar trainer sidecar-cuda
# Tags: ghcr.io/korovod/<image>:$KOROVOD_IMAGE_TAG (default: the chart's appVersion, the same as the
# fast path, which this replaces). Logs: .testinfra/images/full-<dir>.log. Builds run at nice 10 so
# that other work on the machine keeps its share of the cores. sidecar-cuda downloads ~700 MB of
# CUDA/NCCL wheels from PyPI in its builder stage (x86_64 only). podman's layer cache is kept, so a
# rebuild after a source change starts from the dependency layers.
# Machines whose HTTPS egress goes through a proxy with its own CA (in /usr/local/share/ca-certificates,
# or KOROVOD_BUILD_CA_DIR) get that directory mounted read-only into the RUN steps: the builder's
# update-ca-certificates (ca-certificates package) then trusts it, and pip can reach PyPI. Nothing of
# it reaches a final stage. Without such certificates nothing is mounted.
# Needs root and scripts/install-deps.sh --images.
set -euo pipefail
# shellcheck source=scripts/images-common.sh
source "$(dirname "${BASH_SOURCE[0]}")/images-common.sh"
cd "$ROOT"

APP_VERSION="$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\} *$/\1/p' helm/korovod/Chart.yaml)"
TAG="${KOROVOD_IMAGE_TAG:-$APP_VERSION}"
[ -n "$TAG" ] || die "no image tag: no appVersion in helm/korovod/Chart.yaml and KOROVOD_IMAGE_TAG unset"
DIRS=("$@")
[ "${#DIRS[@]}" -gt 0 ] || DIRS=(operator sidecar trainer sidecar-cuda)
for d in "${DIRS[@]}"; do
  [ -f "images/$d/Dockerfile" ] || die "no images/$d/Dockerfile"
done

step "base image $DEBIAN_IMAGE (debootstrap, cached)"
timed "base image" ensure_base

CA_DIR="${KOROVOD_BUILD_CA_DIR:-/usr/local/share/ca-certificates}"
CA_MOUNT=()
if compgen -G "$CA_DIR/*.crt" >/dev/null || compgen -G "$CA_DIR/*/*.crt" >/dev/null; then
  CA_MOUNT=(--volume "$CA_DIR:/usr/local/share/ca-certificates:ro")
  echo "mounting the local CA certificates of $CA_DIR into the build steps"
fi

# One image: podman build, output to its log, never pulling (FROM resolves to the local base).
build_one() {
  nice -n 10 podman build --pull=never --layers "${CA_MOUNT[@]}" -f "images/$1/Dockerfile" -t "$2" . \
    >"$3" 2>&1
}

failed=()
for d in "${DIRS[@]}"; do
  name="$(sed -n 's/^LABEL dev.korovod.image="\([^"]*\)".*/\1/p' "images/$d/Dockerfile")"
  [ -n "$name" ] || die "images/$d/Dockerfile has no LABEL dev.korovod.image=\"...\""
  ref="$name:$TAG"
  log="$IMG_OUT/full-$d.log"
  step "$ref from images/$d/Dockerfile (compiles in the builder stage; log: $log)"
  t0=$(date +%s)
  if build_one "$d" "$ref" "$log"; then
    echo "---- full build $ref: $(( $(date +%s) - t0 ))s"
    echo "$ref: $(podman image inspect -f '{{.Size}}' "$ref" | awk '{printf "%.0f MB", $1/1e6}')"
  else
    tail -20 "$log" >&2
    echo "build-images-full.sh: $ref FAILED after $(( $(date +%s) - t0 ))s (log: $log)" >&2
    failed+=("$d")
  fi
done
[ "${#failed[@]}" = 0 ] || die "failed: ${failed[*]}"
