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
# the product stays C++. Each build has a stamp (a hash of its go.mod, go.sum and build recipe:
# .stamp for the Kubernetes binaries, .stamp-helm for helm, .stamp-kueue for kueue,
# .stamp-scheduler-plugins for kube-scheduler-plugins) and is skipped
# when it is up to date, so editing one build's recipe does not rebuild the other.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT="$PWD"
OUT="$ROOT/.testinfra/bin"
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
K8S_OK=0
HELM_OK=0
KUEUE_OK=0
SP_OK=0
k8s_built() {
  local c
  for c in $K8S_CMDS; do [ -x "$OUT/$c" ] || return 1; done
  [ "$(cat "$OUT/.stamp" 2>/dev/null)" = "$STAMP" ]
}
if k8s_built; then
  echo "build-testinfra: $K8S_CMDS $VERSION are up to date in $OUT"
  K8S_OK=1
fi
if [ -x "$OUT/helm" ] && [ "$(cat "$OUT/.stamp-helm" 2>/dev/null)" = "$HELM_STAMP" ]; then
  echo "build-testinfra: helm $HELM_VERSION is up to date in $OUT"
  HELM_OK=1
fi
if [ -x "$OUT/kueue" ] && [ -f "$KUEUE_CRDS/kueue.x-k8s.io_workloads.yaml" ] &&
   [ "$(cat "$OUT/.stamp-kueue" 2>/dev/null)" = "$KUEUE_STAMP" ]; then
  echo "build-testinfra: kueue $KUEUE_VERSION is up to date in $OUT"
  KUEUE_OK=1
fi
if [ -x "$OUT/kube-scheduler-plugins" ] && [ -x "$OUT/kube-scheduler-plugins-controller" ] &&
   [ -f "$SP_CRDS/scheduling.x-k8s.io_podgroups.yaml" ] &&
   [ "$(cat "$OUT/.stamp-scheduler-plugins" 2>/dev/null)" = "$SP_STAMP" ]; then
  echo "build-testinfra: kube-scheduler-plugins $SP_VERSION is up to date in $OUT"
  SP_OK=1
fi
[ "$K8S_OK$HELM_OK$KUEUE_OK$SP_OK" = 1111 ] && exit 0

[ -x /usr/local/go/bin/go ] && PATH="$PATH:/usr/local/go/bin"
command -v go >/dev/null || { echo "build-testinfra: Go is needed (https://go.dev/dl); none on PATH" >&2; exit 1; }
mkdir -p "$OUT"
if [ "$K8S_OK" = 0 ]; then
  echo "build-testinfra: building $K8S_CMDS $VERSION (first time: ~700 MB of modules, ~25 CPU-minutes)"
  # shellcheck disable=SC2086
  (cd "$SRC" && GOFLAGS=-mod=mod go build -trimpath -ldflags "$K8S_LDFLAGS" -o "$OUT/" $K8S_PKGS)
  # -mod=mod may have added requirements to go.mod/go.sum (a newly built command's
  # dependencies): stamp what was built, or the next run would rebuild for nothing.
  stamp "$SRC" "$K8S_LDFLAGS" "$K8S_PKGS" > "$OUT/.stamp"
  "$OUT/kubectl" version --client | sed -n 1p  # sed reads it all: no SIGPIPE under pipefail
fi
if [ "$HELM_OK" = 0 ]; then
  echo "build-testinfra: building helm $HELM_VERSION (first time: ~550 MB of modules, ~7 CPU-minutes)"
  (cd "$HELM_SRC" && GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -ldflags "$HELM_LDFLAGS" \
    -o "$OUT/helm" "$HELM_PKG")
  echo "$HELM_STAMP" > "$OUT/.stamp-helm"
  echo "build-testinfra: $("$OUT/helm" version --short)"
fi
if [ "$KUEUE_OK" = 0 ]; then
  echo "build-testinfra: building kueue $KUEUE_VERSION (first time: ~450 MB of modules, ~5 CPU-minutes)"
  (cd "$KUEUE_SRC" && GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -ldflags "$KUEUE_LDFLAGS" \
    -o "$OUT/kueue" "$KUEUE_PKG")
  # The CRDs (Workload, ClusterQueue, LocalQueue, ResourceFlavor, ... : every kind the manager's
  # controllers watch) are generated files of the module: copied from the module cache (read-only
  # there), not committed.
  KUEUE_DIR="$(cd "$KUEUE_SRC" && GOFLAGS=-mod=mod go list -m -f '{{.Dir}}' sigs.k8s.io/kueue)"
  rm -rf "$KUEUE_CRDS" && mkdir -p "$KUEUE_CRDS"
  cp "$KUEUE_DIR"/config/components/crd/bases/*.yaml "$KUEUE_CRDS/"
  chmod u+w "$KUEUE_CRDS"/*.yaml
  echo "$KUEUE_STAMP" > "$OUT/.stamp-kueue"
  echo "build-testinfra: kueue $KUEUE_VERSION, $(ls "$KUEUE_CRDS" | wc -l) CRDs in $KUEUE_CRDS"
fi
if [ "$SP_OK" = 0 ]; then
  echo "build-testinfra: building kube-scheduler-plugins $SP_VERSION (first time: a few" \
       "modules beyond the Kubernetes build's, ~3 CPU-minutes after it)"
  (cd "$SP_SRC" && GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -ldflags "$SP_LDFLAGS" \
    -o "$OUT/kube-scheduler-plugins" "$SP_PKG")
  (cd "$SP_SRC" && GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -ldflags "$SP_LDFLAGS" \
    -o "$OUT/kube-scheduler-plugins-controller" "$SP_CONTROLLER_PKG")
  # The CRDs (scheduling.x-k8s.io/v1alpha1 PodGroup, which Coscheduling and the controller watch;
  # ElasticQuota, which the controller also watches) are files of the module: copied from the
  # module cache (read-only there), not committed. config/crd/bases, not manifests/crds: those
  # are symbolic links in the repository, which module zips leave out.
  SP_DIR="$(cd "$SP_SRC" && GOFLAGS=-mod=mod go list -m -f '{{.Dir}}' sigs.k8s.io/scheduler-plugins)"
  rm -rf "$SP_CRDS" && mkdir -p "$SP_CRDS"
  cp "$SP_DIR"/config/crd/bases/scheduling.x-k8s.io_*.yaml "$SP_CRDS/"
  chmod u+w "$SP_CRDS"/*.yaml
  echo "$SP_STAMP" > "$OUT/.stamp-scheduler-plugins"
  echo "build-testinfra: kube-scheduler-plugins $SP_VERSION, $(ls "$SP_CRDS" | wc -l) CRDs in $SP_CRDS"
fi
