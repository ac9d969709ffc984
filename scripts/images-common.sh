# Sourced by scripts/build-images.sh and scripts/build-images-full.sh (not run on its own): the
# podman configuration and the Debian base image both image builds start from, made here with
# debootstrap instead of pulled from a registry. Needs scripts/install-deps.sh --images, and root.
# shellcheck shell=bash

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# The image archives and podman's configuration go to the git-ignored .testinfra/images, next to
# the k8s test binaries of scripts/build-testinfra.sh; the debootstrap base (rootfs and stamp)
# outlives the clone, in $KOROVOD_CACHE/images (scripts/cache.sh).
IMG_OUT="${KOROVOD_IMAGES_DIR:-$ROOT/.testinfra/images}"
# shellcheck source=scripts/cache.sh
source "$ROOT/scripts/cache.sh"
IMG_CACHE="$KOROVOD_CACHE/images"
mkdir -p "$IMG_OUT" "$IMG_CACHE"

die() { echo "$(basename "$0"): $*" >&2; exit 1; }
step() { printf '\n==== %s (%s)\n' "$1" "$(date -u +%H:%M:%S)"; }
# Any command that fails outside an if/||, in a function too (-E), names itself before set -e exits
# (command substitutions, whose failures the caller tests, stay quiet).
set -E
# shellcheck disable=SC2154  # rc is assigned in the trap itself
trap 'rc=$?; [ "$BASH_SUBSHELL" != 0 ] || echo "$(basename "$0"): FAILED (exit $rc) at line $LINENO: $BASH_COMMAND" >&2' ERR
# timed LABEL CMD...: runs CMD and prints how long it took (the scripts' timing lines). Call it as a
# plain command, not under if/||, or set -e would not stop CMD at its first failure.
timed() {
  local label="$1" t0; shift
  t0=$(date +%s)
  "$@"
  printf -- '---- %s: %ss\n' "$label" "$(( $(date +%s) - t0 ))"
}

[ "$(id -u)" = 0 ] || die "must run as root (debootstrap, and podman's root storage the images are built in)"
for tool in podman debootstrap runc; do
  command -v "$tool" >/dev/null || die "$tool not found: run scripts/install-deps.sh --images"
done

# podman's configuration, written here rather than to /etc/containers so that the machine's own
# settings are left alone: runc, because Debian 12's crun refuses hosts with the hybrid cgroup v1
# layout; cgroupfs and a file events log, because CI machines may run without systemd; explicit
# ulimits no higher than this process's hard limits, because podman's defaults (the hard limits it
# tries to raise to 1048576) are refused where root lacks CAP_SYS_RESOURCE (runc: "error setting
# rlimit type 7"); nproc at most 32768, the hard limit podman gives conmon there (type 6).
export CONTAINERS_CONF="$IMG_OUT/containers.conf"
limit() { local h; h="$(ulimit -H "$1")"; { [ "$h" = unlimited ] || [ "$h" -gt "$2" ]; } && h="$2"; echo "$h"; }
NOFILE="$(limit -n 65536)"
NPROC="$(limit -u 32768)"
cat > "$CONTAINERS_CONF.tmp" <<EOF
# Written by scripts/images-common.sh (scripts/build-images.sh); used through CONTAINERS_CONF.
[containers]
default_ulimits = ["nofile=$NOFILE:$NOFILE", "nproc=$NPROC:$NPROC"]

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
EOF
mv "$CONTAINERS_CONF.tmp" "$CONTAINERS_CONF"

# The base every Dockerfile names (ARG DEBIAN_IMAGE), read from the operator's Dockerfile; podman
# resolves the short name debian:... to docker.io/library/debian:..., so that is the tag given.
DEBIAN_SHORT="$(sed -n 's/^ARG DEBIAN_IMAGE=\(.*\)$/\1/p' "$ROOT/images/operator/Dockerfile")"
[ -n "$DEBIAN_SHORT" ] || die "no 'ARG DEBIAN_IMAGE=...' in images/operator/Dockerfile"
for f in "$ROOT"/images/*/Dockerfile; do
  grep -qx "ARG DEBIAN_IMAGE=$DEBIAN_SHORT" "$f" || die "$f does not pin ARG DEBIAN_IMAGE=$DEBIAN_SHORT like the others"
done
DEBIAN_IMAGE="docker.io/library/$DEBIAN_SHORT"
SUITE=bookworm

# Debian's mirror, the one apt uses on this machine (deb822 .sources or one-line .list), unless
# KOROVOD_DEBIAN_MIRROR names another.
debian_mirror() {
  if [ -n "${KOROVOD_DEBIAN_MIRROR:-}" ]; then echo "$KOROVOD_DEBIAN_MIRROR"; return; fi
  local m
  m="$( { cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources 2>/dev/null || true; } \
       | sed -n -e 's/^deb \(\[[^]]*\] \)\{0,1\}\(https\{0,1\}:\/\/[^ ]*\/debian\/\{0,1\}\) .*/\2/p' \
                -e 's/^URIs: *\(https\{0,1\}:\/\/[^ ]*\/debian\/\{0,1\}\) *$/\1/p' | head -1)"
  echo "${m:-http://deb.debian.org/debian}"
}
MIRROR="$(debian_mirror)"

# make_base DIR: a bookworm minbase root filesystem laid out like Docker's debian:*-slim images:
# deb822 sources for bookworm, -updates and -security; dpkg excludes docs, man pages and locales.
make_base() {
  local dir="$1"
  debootstrap --variant=minbase "$SUITE" "$dir" "$MIRROR" >"$IMG_CACHE/debootstrap.log" 2>&1 \
    || { tail -20 "$IMG_CACHE/debootstrap.log" >&2; die "debootstrap $SUITE from $MIRROR failed (log: $IMG_CACHE/debootstrap.log)"; }
  local sec="${MIRROR%/debian}"; sec="${sec%/debian/}"
  rm -f "$dir/etc/apt/sources.list"
  cat > "$dir/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $MIRROR
Suites: $SUITE $SUITE-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: $sec/debian-security
Suites: $SUITE-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  cat > "$dir/etc/dpkg/dpkg.cfg.d/korovod-slim" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/lintian/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
EOF
  # Docker's debian images' apt settings: no .deb cache left in layers (without this every
  # `apt-get install` layer keeps its downloads: ~450 MB in the trainer image), no translations.
  cat > "$dir/etc/apt/apt.conf.d/docker-clean" <<'EOF'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
EOF
  echo 'Acquire::Languages "none";' > "$dir/etc/apt/apt.conf.d/docker-no-languages"
  echo 'Apt::AutoRemove::SuggestsImportant "false";' > "$dir/etc/apt/apt.conf.d/docker-autoremove-suggests"
  find "$dir/usr/share/doc" -mindepth 2 ! -name copyright ! -type d -delete
  rm -rf "$dir"/usr/share/man/* "$dir"/usr/share/info/* "$dir"/usr/share/locale/* \
         "$dir"/var/lib/apt/lists/* "$dir"/var/cache/apt/*.bin "$dir"/var/cache/apt/archives/*.deb \
         "$dir"/var/log/*.log "$dir"/var/log/apt/* "$dir/etc/resolv.conf" "$dir/etc/hostname"
}

# ensure_base: the base image in podman's storage, tagged $DEBIAN_IMAGE. The debootstrap rootfs is
# cached as $IMG_CACHE/debian-rootfs.tar (not next to the image archives: it is not one) with a
# stamp (mirror, suite, recipe), so it is made once per machine; re-imported from the cache if
# podman's storage lost the image.
ensure_base() {
  local stamp tar="$IMG_CACHE/debian-rootfs.tar"
  stamp="$( { echo "$MIRROR $SUITE $DEBIAN_IMAGE"; declare -f make_base; } | sha256sum | cut -c1-16)"
  if [ -f "$tar" ] && [ "$(cat "$IMG_CACHE/.stamp" 2>/dev/null)" = "$stamp" ]; then
    if podman image exists "$DEBIAN_IMAGE" \
       && [ "$(podman image inspect -f '{{index .Labels "dev.korovod.base-stamp"}}' "$DEBIAN_IMAGE")" = "$stamp" ]; then
      echo "base image $DEBIAN_IMAGE is up to date (stamp $stamp)"
      return 0
    fi
  else
    echo "debootstrap --variant=minbase $SUITE from $MIRROR (first time on this machine: ~1-3 min)"
    local dir="$IMG_CACHE/rootfs.tmp"
    mkdir -p "$IMG_CACHE"
    rm -rf "$dir" "$tar"
    make_base "$dir"
    tar -C "$dir" --numeric-owner -cf "$tar.tmp" .
    rm -rf "$dir"
    mv "$tar.tmp" "$tar"
    echo "$stamp" > "$IMG_CACHE/.stamp"
  fi
  # The image this import replaces, for build-images.sh's cleanup once nothing uses it any more.
  podman image inspect -f '{{.Id}}' "$DEBIAN_IMAGE" >> "$IMG_CACHE/base-replaced" 2>/dev/null || true
  echo "importing $tar as $DEBIAN_IMAGE"
  podman import --quiet \
    --change 'CMD ["bash"]' \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change "LABEL dev.korovod.base-stamp=$stamp" \
    --change "LABEL dev.korovod.base-source=debootstrap-$SUITE-minbase" \
    "$tar" "$DEBIAN_IMAGE" >/dev/null
}
