#!/usr/bin/env bash
# Builds the Kubernetes test infrastructure the operator's integration tests run against, from the
# Go module proxy into the git-ignored .testinfra/bin:
#   kube-apiserver, kubectl  pinned in tests/k8s/testinfra/go.mod
#   helm                     pinned in tests/k8s/testinfra/helm/go.mod (a module of its own, for
#                            the chart tests: tests/k8s/test_helm_chart.py)
# etcd comes from Debian (etcd-server, installed by install-deps). Go is test infrastructure only;
# the product stays C++. Each build has a stamp (a hash of its go.mod, go.sum and build recipe:
# .stamp for kube-apiserver + kubectl, .stamp-helm for helm) and is skipped when it is up to date,
# so editing one build's recipe does not rebuild the other.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT="$PWD"
OUT="$ROOT/.testinfra/bin"
SRC="$ROOT/tests/k8s/testinfra"
HELM_SRC="$SRC/helm"

VERSION="$(sed -n 's/^require k8s.io\/kubernetes \(v[0-9.]*\)$/\1/p' "$SRC/go.mod")"
[ -n "$VERSION" ] || { echo "build-testinfra: no 'require k8s.io/kubernetes vX.Y.Z' in $SRC/go.mod" >&2; exit 1; }
HELM_VERSION="$(sed -n 's/^require helm.sh\/helm\/v[0-9]* \(v[0-9.]*\)$/\1/p' "$HELM_SRC/go.mod")"
[ -n "$HELM_VERSION" ] || { echo "build-testinfra: no 'require helm.sh/helm/vN vX.Y.Z' in $HELM_SRC/go.mod" >&2; exit 1; }
HELM_MODULE="helm.sh/helm/$(echo "$HELM_VERSION" | cut -d. -f1)"

# The version stamps make `kubectl version` and /version report the pinned release instead of
# v0.0.0-master, and `helm version` the pinned release instead of a -dev version (helm's Makefile
# sets the same -X); -s -w drops debug info (smaller binaries, faster links).
K8S_LDFLAGS="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  K8S_LDFLAGS+=" -X $pkg.gitVersion=$VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$(echo "$VERSION" | cut -d. -f2)"
done
K8S_PKGS="k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kubectl"
HELM_LDFLAGS="-s -w -X $HELM_MODULE/internal/version.version=$HELM_VERSION"
HELM_LDFLAGS+=" -X $HELM_MODULE/internal/version.gitTreeState=clean"
HELM_PKG="$HELM_MODULE/cmd/helm"

stamp() {  # stamp DIR RECIPE...
  local dir="$1"; shift
  { cat "$dir/go.mod" "$dir/go.sum"; echo "$*"; } | sha256sum | cut -c1-16
}
STAMP="$(stamp "$SRC" "$K8S_LDFLAGS" "$K8S_PKGS")"
HELM_STAMP="$(stamp "$HELM_SRC" CGO_ENABLED=0 "$HELM_LDFLAGS" "$HELM_PKG")"
K8S_OK=0
HELM_OK=0
if [ -x "$OUT/kube-apiserver" ] && [ -x "$OUT/kubectl" ] && [ "$(cat "$OUT/.stamp" 2>/dev/null)" = "$STAMP" ]; then
  echo "build-testinfra: kube-apiserver and kubectl $VERSION are up to date in $OUT"
  K8S_OK=1
fi
if [ -x "$OUT/helm" ] && [ "$(cat "$OUT/.stamp-helm" 2>/dev/null)" = "$HELM_STAMP" ]; then
  echo "build-testinfra: helm $HELM_VERSION is up to date in $OUT"
  HELM_OK=1
fi
[ "$K8S_OK$HELM_OK" = 11 ] && exit 0

[ -x /usr/local/go/bin/go ] && PATH="$PATH:/usr/local/go/bin"
command -v go >/dev/null || { echo "build-testinfra: Go is needed (https://go.dev/dl); none on PATH" >&2; exit 1; }
mkdir -p "$OUT"
if [ "$K8S_OK" = 0 ]; then
  echo "build-testinfra: building kube-apiserver and kubectl $VERSION (first time: ~700 MB of modules, ~15 CPU-minutes)"
  # shellcheck disable=SC2086
  (cd "$SRC" && GOFLAGS=-mod=mod go build -trimpath -ldflags "$K8S_LDFLAGS" -o "$OUT/" $K8S_PKGS)
  echo "$STAMP" > "$OUT/.stamp"
  "$OUT/kubectl" version --client | sed -n 1p  # sed reads it all: no SIGPIPE under pipefail
fi
if [ "$HELM_OK" = 0 ]; then
  echo "build-testinfra: building helm $HELM_VERSION (first time: ~550 MB of modules, ~7 CPU-minutes)"
  (cd "$HELM_SRC" && GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -ldflags "$HELM_LDFLAGS" \
    -o "$OUT/helm" "$HELM_PKG")
  echo "$HELM_STAMP" > "$OUT/.stamp-helm"
  echo "build-testinfra: $("$OUT/helm" version --short)"
fi
