#!/usr/bin/env bash
# Builds korovod's container images for the e2e tests on this machine, with podman and without a
# registry or a Docker engine, from binaries CI already compiled (the fast path; the Dockerfiles'
# own multi-stage build is scripts/build-images-full.sh). images/README.md describes both.
#   scripts/build-images.sh [BUILD_DIR]     BUILD_DIR: a configured and built tree (default
#                                           $KOROVOD_BUILD_DIR, else build/), Release, with Python
# Steps, each timed:
#   1. base: debootstrap --variant=minbase bookworm from Debian's mirror, imported as the base the
#      Dockerfiles pin (docker.io/library/debian:bookworm-YYYYMMDD-slim); cached per machine in
#      .testinfra/images with a stamp.
#   2. pause: Kubernetes' pause.c (Go module cache, the version in tests/k8s/testinfra/go.mod)
#      compiled statically, FROM scratch, as $KOROVOD_PAUSE_IMAGE (default registry.k8s.io/pause:3.10,
#      the sandbox image the test node's containerd is configured with).
#   3. runtime layers: per image, the Debian packages its Dockerfile's final stage installs, tagged
#      localhost/korovod-ci-runtime-<image>:<hash of base + packages>, rebuilt only on a change.
#   4. operator, sidecar, trainer-pytorch (images/ci/*.Containerfile) FROM those layers: the
#      stripped binaries, Python package and examples at the Dockerfiles' paths, same USER and
#      ENTRYPOINT, tagged ghcr.io/korovod/<image>:$KOROVOD_IMAGE_TAG (default: the chart's appVersion,
#      which is what helm/korovod deploys by default), checked with ldd inside the image.
#   5. archives: podman save --format docker-archive to .testinfra/images/<image>.tar (skipped when
#      the image is unchanged), for `ctr -n k8s.io images import`.
# sidecar-cuda is not built here (it needs the CUDA wheels and a NCCL-configured build).
# Needs root and scripts/install-deps.sh --images.
set -euo pipefail
# shellcheck source=scripts/images-common.sh
source "$(dirname "${BASH_SOURCE[0]}")/images-common.sh"
cd "$ROOT"

BUILD="${1:-${KOROVOD_BUILD_DIR:-build}}"
BUILD="$(cd "$BUILD" 2>/dev/null && pwd)" || die "build directory ${1:-${KOROVOD_BUILD_DIR:-build}} does not exist (configure and build first)"
APP_VERSION="$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\} *$/\1/p' helm/korovod/Chart.yaml)"
TAG="${KOROVOD_IMAGE_TAG:-$APP_VERSION}"
[ -n "$TAG" ] || die "no image tag: no appVersion in helm/korovod/Chart.yaml and KOROVOD_IMAGE_TAG unset"
PAUSE_IMAGE="${KOROVOD_PAUSE_IMAGE:-registry.k8s.io/pause:3.10}"
CTX="$IMG_OUT/ctx"
T_START=$(date +%s)

for f in bin/korovod-operator bin/korovod-sidecar bin/korovodrun; do
  [ -x "$BUILD/$f" ] || die "$BUILD/$f not found: build the project first (cmake --build $BUILD)"
done
compgen -G "$BUILD/python/korovod/_client*.so" >/dev/null \
  || die "$BUILD/python/korovod/_client*.so not found: configure with KOROVOD_BUILD_PYTHON=ON and build"

# podman build, never pulling: every FROM must already be in local storage.
pbuild() { podman build --pull=never --layers --quiet "$@" >/dev/null; }

# ---- 1. base ----------------------------------------------------------------------------------
step "1. base image $DEBIAN_IMAGE (debootstrap, cached)"
timed "base image" ensure_base

# ---- 2. pause ---------------------------------------------------------------------------------
build_pause() {
  local ver gomodcache src d="$CTX/pause"
  ver="$(sed -n 's/^require k8s.io\/kubernetes \(v[0-9.]*\)$/\1/p' tests/k8s/testinfra/go.mod)"
  [ -n "$ver" ] || die "no 'require k8s.io/kubernetes vX.Y.Z' in tests/k8s/testinfra/go.mod"
  [ -x /usr/local/go/bin/go ] && PATH="$PATH:/usr/local/go/bin"
  if command -v go >/dev/null; then gomodcache="$(go env GOMODCACHE)"; else gomodcache="${GOMODCACHE:-$HOME/go/pkg/mod}"; fi
  src="$gomodcache/k8s.io/kubernetes@$ver/build/pause/linux/pause.c"
  if [ ! -f "$src" ]; then
    command -v go >/dev/null || die "$src is missing and Go is not installed to download k8s.io/kubernetes@$ver"
    echo "downloading k8s.io/kubernetes@$ver for pause.c (go mod download)"
    (cd tests/k8s/testinfra && GOFLAGS=-mod=mod go mod download "k8s.io/kubernetes@$ver")
    [ -f "$src" ] || die "go mod download k8s.io/kubernetes@$ver did not provide $src"
  fi
  rm -rf "$d"; mkdir -p "$d"
  # Upstream's flags (build/pause/Makefile), with the Kubernetes version as the reported one.
  gcc -Os -Wall -Werror -static -DVERSION="v$ver-korovod" -o "$d/pause" "$src" \
    || die "gcc -static failed on $src (libc6-dev provides libc.a)"
  strip "$d/pause"
  pbuild -f images/ci/pause.Containerfile -t "$PAUSE_IMAGE" "$d"
}
step "2. pause image $PAUSE_IMAGE"
timed "pause image" build_pause

# ---- 3. runtime layers ------------------------------------------------------------------------
# The Debian packages images/<dir>/Dockerfile's final stage installs (its apt-get install words
# that are package names), so the fast path ships what the full build ships.
runtime_pkgs() {
  sed -n '/ AS final/,$p' "images/$1/Dockerfile" | sed -n '/apt-get install/,/rm -rf/p' \
    | tr -s '[:blank:]\134' '\n' | grep -E '^[a-z0-9][a-z0-9.+-]+$' | grep -vxE 'apt-get|install|rm' \
    | sort -u | tr '\n' ' ' | sed 's/ $//'
}
declare -A RUNTIME
build_runtime() {
  local dir="$1" pkgs hash ref
  pkgs="$(runtime_pkgs "$dir")"
  [ -n "$pkgs" ] || die "no runtime packages found in images/$dir/Dockerfile's final stage"
  hash="$( { podman image inspect -f '{{.Id}}' "$DEBIAN_IMAGE"; echo "$pkgs"; cat images/ci/runtime.Containerfile; } \
          | sha256sum | cut -c1-16)"
  ref="localhost/korovod-ci-runtime-$dir:$hash"
  RUNTIME[$dir]="$ref"
  if podman image exists "$ref"; then
    echo "$ref is up to date ($pkgs)"
    return 0
  fi
  echo "building $ref: apt-get install $pkgs (waits for Debian's mirror)"
  podman build --pull=never --layers -f images/ci/runtime.Containerfile \
    --build-arg DEBIAN_IMAGE="$DEBIAN_IMAGE" --build-arg PACKAGES="$pkgs" \
    -t "$ref" images/ci > "$IMG_OUT/runtime-$dir.log" 2>&1 \
    || { tail -20 "$IMG_OUT/runtime-$dir.log" >&2; die "runtime layer for $dir failed (log: $IMG_OUT/runtime-$dir.log)"; }
}
step "3. runtime-library layers (rebuilt only when a Dockerfile's package list or the base changes)"
for dir in operator sidecar trainer; do
  timed "runtime layer $dir" build_runtime "$dir"
done

# ---- 4. images --------------------------------------------------------------------------------
stage_operator() { install -m 0755 -s "$BUILD/bin/korovod-operator" "$1/korovod-operator"; }
stage_sidecar() { install -m 0755 -s "$BUILD/bin/korovod-sidecar" "$1/korovod-sidecar"; }
stage_trainer() {
  mkdir -p "$1/bin" "$1/python"
  install -m 0755 -s "$BUILD/bin/korovodrun" "$BUILD/bin/korovod-sidecar" "$1/bin/"
  install -m 0755 python/bin/korovod-local-ranks "$1/bin/"  # a pod's ranks (ranksPerWorker)
  # Same merge as the Dockerfile: python/korovod + python/horovod + the build's korovod/_client.
  cp -r python/korovod python/horovod "$1/python/"
  cp -r "$BUILD/python/korovod/." "$1/python/korovod/"
  cp -r examples "$1/examples"
  find "$1" \( -name __pycache__ -o -name '*.pyc' \) -prune -exec rm -rf {} +
  chmod -R a+rX "$1"
}
declare -A IMAGE_OF=([operator]=ghcr.io/korovod/operator [sidecar]=ghcr.io/korovod/sidecar
                     [trainer]=ghcr.io/korovod/trainer-pytorch)
build_image() {
  local dir="$1" ref="${IMAGE_OF[$1]}:$TAG" d="$CTX/$1" libs
  rm -rf "$d"; mkdir -p "$d"
  "stage_$dir" "$d"
  pbuild -f "images/ci/$dir.Containerfile" --build-arg RUNTIME_IMAGE="${RUNTIME[$dir]}" -t "$ref" "$d"
  # Every shared library the binaries need must resolve inside the image.
  libs="$(podman run --rm --user 0 --entrypoint /bin/sh "$ref" -c \
    'for f in /usr/local/bin/korovod* /opt/korovod/python/korovod/*.so; do [ ! -f "$f" ] || ldd "$f"; done')" \
    || die "could not run ldd in $ref"
  ! grep -q 'not found' <<<"$libs" || die "$ref lacks libraries: $(grep 'not found' <<<"$libs" | tr -s ' \t\n' ' ')"
  echo "$ref: $(podman image inspect -f '{{.Size}}' "$ref" | awk '{printf "%.0f MB", $1/1e6}')"
}
step "4. images from $BUILD (tag $TAG)"
for dir in operator sidecar trainer; do
  timed "image ${IMAGE_OF[$dir]}:$TAG" build_image "$dir"
done

# ---- 5. archives ------------------------------------------------------------------------------
# docker-archive: one image with its full name in manifest.json's RepoTags, which
# `ctr -n k8s.io images import` (containerd 1.6) imports under that name.
save_image() {
  local ref="$1" id out="$IMG_OUT/$2.tar"
  id="$(podman image inspect -f '{{.Id}}' "$ref")"
  if [ -f "$out" ] && [ "$(cat "$out.id" 2>/dev/null)" = "$id $ref" ]; then
    echo "$out is up to date ($ref)"
    return 0
  fi
  rm -f "$out.tmp"
  podman save --quiet --format docker-archive -o "$out.tmp" "$ref"
  mv "$out.tmp" "$out"
  echo "$id $ref" > "$out.id"
  echo "$out: $ref ($(du -m "$out" | cut -f1) MB)"
}
step "5. archives in $IMG_OUT"
timed "archive pause" save_image "$PAUSE_IMAGE" pause
for dir in operator sidecar trainer; do
  timed "archive ${IMAGE_OF[$dir]##*/}" save_image "${IMAGE_OF[$dir]}:$TAG" "${IMAGE_OF[$dir]##*/}"
done
rm -rf "$CTX"

# What earlier runs left behind once a tag moved on: untagged CI images, runtime layers of an older
# package list or base, and bases ensure_base replaced (kept while a full build still uses one).
# Nothing else in podman's storage is touched (scripts/build-images-full.sh's layer cache stays).
cleanup() {
  local dir
  podman images -q --filter dangling=true --filter label=dev.korovod.build=ci \
    | xargs -r podman rmi >/dev/null 2>&1 || true
  for dir in "${!RUNTIME[@]}"; do
    podman images --format '{{.Repository}}:{{.Tag}}' "localhost/korovod-ci-runtime-$dir" \
      | grep -vx "${RUNTIME[$dir]}" | xargs -r podman rmi >/dev/null 2>&1 || true
  done
  local id keep=() current
  current="$(podman image inspect -f '{{.Id}}' "$DEBIAN_IMAGE")"
  [ -f "$IMG_CACHE/base-replaced" ] || return 0
  while read -r id; do
    [ "$id" != "$current" ] || continue
    podman rmi "$id" >/dev/null 2>&1 || ! podman image exists "$id" || keep+=("$id")
  done < "$IMG_CACHE/base-replaced"
  printf '%s\n' "${keep[@]}" | grep . > "$IMG_CACHE/base-replaced" || rm -f "$IMG_CACHE/base-replaced"
}
step "6. remove images earlier runs left behind"
timed "cleanup" cleanup

step "done in $(( $(date +%s) - T_START ))s"
echo "import into a node's containerd with: for a in $IMG_OUT/*.tar; do ctr -n k8s.io images import \"\$a\"; done"
