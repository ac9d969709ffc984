#!/usr/bin/env bash
# Builds the Kubernetes test infrastructure the operator's integration tests run against, from the
# Go module proxy into the git-ignored .testinfra/bin:
#   kube-apiserver, kubectl  pinned in tests/k8s/testinfra/go.mod
#   kube-scheduler, kube-controller-manager, kubelet
#                            the same module build, for the tests on a real node
#                            (tests/k8s/real_node.py: containerd + runc from Debian)
#   helm                     pinned in tests/k8s/testinfra/helm/go.mod (a module of its own, for
#                            the chart tests: tests/k8s/test_helm_chart.py)
#   kueue                    Kueue's manager (sigs.k8s.io/kueue/cmd/kueue), pinned in
#                            tests/k8s/testinfra/kueue/go.mod (a module of its own, for
#                            tests/k8s/kueue.py), with that module's CRDs copied into the
#                            git-ignored .testinfra/kueue-crds (generated files of the module)
#   kube-scheduler-plugins   sigs.k8s.io/scheduler-plugins/cmd/scheduler (kube-scheduler with the
#                            Coscheduling plugin) and, as kube-scheduler-plugins-controller, its
#                            cmd/controller (sets PodGroups' status), pinned in
#                            tests/k8s/testinfra/scheduler-plugins/go.mod (a module of its own, for
#                            the gang-scheduling tests: tests/k8s/test_gang_scheduling.py), with
#                            its CRDs (PodGroup, ElasticQuota) copied into the git-ignored
#                            .testinfra/scheduler-plugins-crds
# etcd comes from Debian (etcd-server, installed by install-deps). Go is test infrastructure only;
# the product stays C++. Each build has a stamp (a hash of its go.mod, go.sum and build recipe) and
# is made once per machine into $KOROVOD_CACHE/testinfra/<build>-<stamp> (scripts/cache.sh), which
# outlives the clone; .testinfra/bin and the CRD folders link to it. So a fresh clone on a machine
# that built these versions before builds nothing, and editing one build's recipe rebuilds only
# that one. Go's own caches (GOMODCACHE, GOCACHE) are outside the clone too.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT="$PWD"
# shellcheck source=scripts/cache.sh
source "$ROOT/scripts/cache.sh"
OUT="$ROOT/.testinfra/bin"
CACHE="$KOROVOD_CACHE/testinfra"
SRC="$ROOT/tests/k8s/testinfra"
HELM_SRC="$SRC/helm"
KUEUE_SRC="$SRC/kueue"
KUEUE_CRDS="$ROOT/.testinfra/kueue-crds"
SP_SRC="$SRC/scheduler-plugins"
SP_CRDS="$ROOT/.testinfra/scheduler-plugins-crds"

VERSION="$(sed -n 's/^require k8s.io\/kubernetes \(v[0-9.]*\)$/\1/p' "$SRC/go.mod")"
[ -n "$VERSION" ] || { echo "build-testinfra: no 'require k8s.io/kubernetes vX.Y.Z' in $SRC/go.mod" >&2; exit 1; }
HELM_VERSION="$(sed -n 's/^require helm.sh\/helm\/v[0-9]* \(v[0-9.]*\)$/\1/p' "$HELM_SRC/go.mod")"
[ -n "$HELM_VERSION" ] || { echo "build-testinfra: no 'require helm.sh/helm/vN vX.Y.Z' in $HELM_SRC/go.mod" >&2; exit 1; }
HELM_MODULE="helm.sh/helm/$(echo "$HELM_VERSION" | cut -d. -f1)"
KUEUE_VERSION="$(sed -n 's/^require sigs.k8s.io\/kueue \(v[0-9.]*\)$/\1/p' "$KUEUE_SRC/go.mod")"
[ -n "$KUEUE_VERSION" ] || { echo "build-testinfra: no 'require sigs.k8s.io/kueue vX.Y.Z' in $KUEUE_SRC/go.mod" >&2; exit 1; }
# (a -devel tag too: v0.35.4-devel is scheduler-plugins' tag built on Kubernetes v1.35.4)
SP_VERSION="$(sed -n 's/^require sigs.k8s.io\/scheduler-plugins \(v[0-9A-Za-z.-]*\)$/\1/p' "$SP_SRC/go.mod")"
[ -n "$SP_VERSION" ] || { echo "build-testinfra: no 'require sigs.k8s.io/scheduler-plugins vX.Y.Z' in $SP_SRC/go.mod" >&2; exit 1; }

# The version stamps make `kubectl version` and /version report the pinned release instead of
# v0.0.0-master, and `helm version` the pinned release instead of a -dev version (helm's Makefile
# sets the same -X); -s -w drops debug info (smaller binaries, faster links).
K8S_LDFLAGS="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  K8S_LDFLAGS+=" -X $pkg.gitVersion=$VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$(echo "$VERSION" | cut -d. -f2)"
done
K8S_CMDS="kube-apiserver kubectl kube-scheduler kube-controller-manager kubelet"
K8S_PKGS=""
for c in $K8S_CMDS; do K8S_PKGS+="${K8S_PKGS:+ }k8s.io/kubernetes/cmd/$c"; done
HELM_LDFLAGS="-s -w -X $HELM_MODULE/internal/version.version=$HELM_VERSION"
HELM_LDFLAGS+=" -X $HELM_MODULE/internal/version.gitTreeState=clean"
HELM_PKG="$HELM_MODULE/cmd/helm"
# Kueue's Makefile sets the same -X (its log's "Initializing" line shows it).
KUEUE_LDFLAGS="-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion=$KUEUE_VERSION"
KUEUE_PKG="sigs.k8s.io/kueue/cmd/kueue"
# component-base's version is the Kubernetes release it is built on (as for the binaries above):
# its emulation-version check refuses scheduler-plugins' own v0.x (which its Makefile sets).
SP_K8S_VERSION="$(sed -n 's/^\tk8s.io\/kubernetes => k8s.io\/kubernetes \(v[0-9.]*\)$/\1/p' "$SP_SRC/go.mod")"
[ -n "$SP_K8S_VERSION" ] || { echo "build-testinfra: no 'k8s.io/kubernetes => k8s.io/kubernetes vX.Y.Z' in $SP_SRC/go.mod" >&2; exit 1; }
SP_LDFLAGS="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  SP_LDFLAGS+=" -X $pkg.gitVersion=$SP_K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$(echo "$SP_K8S_VERSION" | cut -d. -f2)"
done
SP_PKG="sigs.k8s.io/scheduler-plugins/cmd/scheduler"
SP_CONTROLLER_PKG="sigs.k8s.io/scheduler-plugins/cmd/controller"

stamp() {  # stamp DIR RECIPE...
  local dir="$1"; shift
  { cat "$dir/go.mod" "$dir/go.sum"; echo "$*"; } | sha256sum | cut -c1-16
}
STAMP="$(stamp "$SRC" "$K8S_LDFLAGS" "$K8S_PKGS")"
HELM_STAMP="$(stamp "$HELM_SRC" CGO_ENABLED=0 "$HELM_LDFLAGS" "$HELM_PKG")"
KUEUE_STAMP="$(stamp "$KUEUE_SRC" CGO_ENABLED=0 "$KUEUE_LDFLAGS" "$KUEUE_PKG" crd-bases)"
SP_STAMP="$(stamp "$SP_SRC" CGO_ENABLED=0 "$SP_LDFLAGS" "$SP_PKG" "$SP_CONTROLLER_PKG" config/crd/bases)"
K8S_DIR="$CACHE/kubernetes-$STAMP"
HELM_DIR="$CACHE/helm-$HELM_STAMP"
KUEUE_DIR_OUT="$CACHE/kueue-$KUEUE_STAMP"
SP_DIR_OUT="$CACHE/scheduler-plugins-$SP_STAMP"

# link_cached DIR [CRDS]: a finished build (DIR/.done) into the clone: DIR/bin/* linked into
# .testinfra/bin, DIR/crds/*.yaml copied into the folder CRDS (a real folder: `kubectl apply -f`
# reads a symbolic link to a folder as a file). Returns 1 when DIR is not a finished build.
link_cached() {
  local dir="$1" crds="${2:-}" f
  [ -f "$dir/.done" ] || return 1
  mkdir -p "$OUT"
  for f in "$dir"/bin/*; do ln -sfn "$f" "$OUT/$(basename "$f")"; done
  if [ -n "$crds" ]; then
    rm -rf "$crds"
    mkdir -p "$crds"
    cp "$dir"/crds/*.yaml "$crds/"
  fi
}
# finish DIR: the build in DIR.tmp is complete; move it into place (an interrupted build leaves only
# a .tmp, never a DIR that looks finished).
finish() {
  touch "$1.tmp/.done"
  rm -rf "$1"
  mv "$1.tmp" "$1"
}
# copy_crds SRC MODULE PATTERN DIR: the CRD YAMLs PATTERN of Go module MODULE (required by the
# go.mod in SRC) into DIR.tmp/crds. They are files of the module: copied from the module cache
# (read-only there), not committed.
copy_crds() {
  local mod
  mod="$(cd "$1" && GOFLAGS=-mod=mod go list -m -f '{{.Dir}}' "$2")"
  mkdir -p "$4.tmp/crds"
  cp "$mod"/$3 "$4.tmp/crds/"
  chmod u+w "$4.tmp/crds"/*.yaml
}
# begin DIR: an empty DIR.tmp/bin to build into.
begin() {
  rm -rf "$1.tmp"
  mkdir -p "$1.tmp/bin"
}

K8S_OK=0
HELM_OK=0
KUEUE_OK=0
SP_OK=0
if link_cached "$K8S_DIR"; then
  echo "build-testinfra: $K8S_CMDS $VERSION are up to date ($K8S_DIR)"
  K8S_OK=1
fi
if link_cached "$HELM_DIR"; then
  echo "build-testinfra: helm $HELM_VERSION is up to date ($HELM_DIR)"
  HELM_OK=1
fi
if link_cached "$KUEUE_DIR_OUT" "$KUEUE_CRDS"; then
  echo "build-testinfra: kueue $KUEUE_VERSION is up to date ($KUEUE_DIR_OUT)"
  KUEUE_OK=1
fi
if link_cached "$SP_DIR_OUT" "$SP_CRDS"; then
  echo "build-testinfra: kube-scheduler-plugins $SP_VERSION is up to date ($SP_DIR_OUT)"
  SP_OK=1
fi
[ "$K8S_OK$HELM_OK$KUEUE_OK$SP_OK" = 1111 ] && exit 0

[ -x /usr/local/go/bin/go ] && PATH="$PATH:/usr/local/go/bin"
command -v go >/dev/null || { echo "build-testinfra: Go is needed (https://go.dev/dl); none on PATH" >&2; exit 1; }
mkdir -p "$OUT" "$CACHE"
# -mod=mod may add requirements to a go.mod/go.sum of the clone (a newly built command's
# dependencies); the cache stays keyed by the committed files' stamps, computed above.
if [ "$K8S_OK" = 0 ]; then
  echo "build-testinfra: building $K8S_CMDS $VERSION (first time: ~700 MB of modules, ~25 CPU-minutes)"
  begin "$K8S_DIR"
  # shellcheck disable=SC2086
  (cd "$SRC" && GOFLAGS=-mod=mod go build -trimpath -ldflags "$K8S_LDFLAGS" -o "$K8S_DIR.tmp/bin/" $K8S_PKGS)
  "$K8S_DIR.tmp/bin/kubectl" version --client | sed -n 1p  # sed reads it all: no SIGPIPE under pipefail
  finish "$K8S_DIR"
  link_cached "$K8S_DIR"
fi
if [ "$HELM_OK" = 0 ]; then
  echo "build-testinfra: building helm $HELM_VERSION (first time: ~550 MB of modules, ~7 CPU-minutes)"
  begin "$HELM_DIR"
  (cd "$HELM_SRC" && GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -ldflags "$HELM_LDFLAGS" \
    -o "$HELM_DIR.tmp/bin/helm" "$HELM_PKG")
  echo "build-testinfra: $("$HELM_DIR.tmp/bin/helm" version --short)"
  finish "$HELM_DIR"
  link_cached "$HELM_DIR"
fi
if [ "$KUEUE_OK" = 0 ]; then
  echo "build-testinfra: building kueue $KUEUE_VERSION (first time: ~450 MB of modules, ~5 CPU-minutes)"
  begin "$KUEUE_DIR_OUT"
  (cd "$KUEUE_SRC" && GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -ldflags "$KUEUE_LDFLAGS" \
    -o "$KUEUE_DIR_OUT.tmp/bin/kueue" "$KUEUE_PKG")
  # The CRDs (Workload, ClusterQueue, LocalQueue, ResourceFlavor, ... : every kind the manager's
  # controllers watch), generated files of the module.
  copy_crds "$KUEUE_SRC" sigs.k8s.io/kueue 'config/components/crd/bases/*.yaml' "$KUEUE_DIR_OUT"
  finish "$KUEUE_DIR_OUT"
  link_cached "$KUEUE_DIR_OUT" "$KUEUE_CRDS"
  echo "build-testinfra: kueue $KUEUE_VERSION, $(ls "$KUEUE_CRDS/" | wc -l) CRDs in $KUEUE_CRDS"
fi
if [ "$SP_OK" = 0 ]; then
  echo "build-testinfra: building kube-scheduler-plugins $SP_VERSION (first time: a few" \
       "modules beyond the Kubernetes build's, ~3 CPU-minutes after it)"
  begin "$SP_DIR_OUT"
  (cd "$SP_SRC" && GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -ldflags "$SP_LDFLAGS" \
    -o "$SP_DIR_OUT.tmp/bin/kube-scheduler-plugins" "$SP_PKG")
  (cd "$SP_SRC" && GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -ldflags "$SP_LDFLAGS" \
    -o "$SP_DIR_OUT.tmp/bin/kube-scheduler-plugins-controller" "$SP_CONTROLLER_PKG")
  # The CRDs (scheduling.x-k8s.io/v1alpha1 PodGroup, which Coscheduling and the controller watch;
  # ElasticQuota, which the controller also watches). config/crd/bases, not manifests/crds: those
  # are symbolic links in the repository, which module zips leave out.
  copy_crds "$SP_SRC" sigs.k8s.io/scheduler-plugins 'config/crd/bases/scheduling.x-k8s.io_*.yaml' \
    "$SP_DIR_OUT"
  finish "$SP_DIR_OUT"
  link_cached "$SP_DIR_OUT" "$SP_CRDS"
  echo "build-testinfra: kube-scheduler-plugins $SP_VERSION, $(ls "$SP_CRDS/" | wc -l) CRDs in $SP_CRDS"
fi
