//go:build tools

// Pins the Kueue manager (sigs.k8s.io/kueue/cmd/kueue) that scripts/build-testinfra.sh builds for
// the Kueue integration tests (tests/k8s/kueue.py, tests/k8s/test_kueue.py), and whose CRDs it
// copies from the module cache. A module of its own: Kueue's dependency graph stays out of the
// kube-apiserver module next door.
package tools

import (
	_ "sigs.k8s.io/kueue/cmd/kueue"
)
