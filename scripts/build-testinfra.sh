#!/usr/bin/env bash
# Builds the Kubernetes test infrastructure the operator's integration tests run against: a real
# kube-apiserver and kubectl (pinned in tests/k8s/testinfra/go.mod) from the Go module proxy, into
# the git-ignored .testinfra/bin. etcd comes from Debian (etcd-server, installed by install-deps).
# Go is test infrastructure only; the product stays C++. A stamp (hash of go.mod + go.sum + this
# script) skips the build when nothing changed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT="$PWD"
OUT="$ROOT/.testinfra/bin"
SRC="$ROOT/tests/k8s/testinfra"
VERSION="$(sed -n 's/^require k8s.io\/kubernetes \(v[0-9.]*\)$/\1/p' "$SRC/go.mod")"
[ -n "$VERSION" ] || { echo "build-testinfra: no 'require k8s.io/kubernetes vX.Y.Z' in $SRC/go.mod" >&2; exit 1; }
STAMP="$(cat "$SRC/go.mod" "$SRC/go.sum" "$0" | sha256sum | cut -c1-16)"
if [ -x "$OUT/kube-apiserver" ] && [ -x "$OUT/kubectl" ] && [ "$(cat "$OUT/.stamp" 2>/dev/null)" = "$STAMP" ]; then
  echo "build-testinfra: kube-apiserver and kubectl $VERSION are up to date in $OUT"
  exit 0
fi
[ -x /usr/local/go/bin/go ] && PATH="$PATH:/usr/local/go/bin"
command -v go >/dev/null || { echo "build-testinfra: Go is needed (https://go.dev/dl); none on PATH" >&2; exit 1; }
mkdir -p "$OUT"
echo "build-testinfra: building kube-apiserver and kubectl $VERSION (first time: ~700 MB of modules, ~15 CPU-minutes)"
# The version stamps make `kubectl version` and /version report the pinned release instead of
# v0.0.0-master; -s -w drops debug info (smaller binaries, faster links).
LDFLAGS="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  LDFLAGS+=" -X $pkg.gitVersion=$VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$(echo "$VERSION" | cut -d. -f2)"
done
(cd "$SRC" && GOFLAGS=-mod=mod go build -trimpath -ldflags "$LDFLAGS" -o "$OUT/" \
  k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kubectl)
echo "$STAMP" > "$OUT/.stamp"
"$OUT/kubectl" version --client | head -1
