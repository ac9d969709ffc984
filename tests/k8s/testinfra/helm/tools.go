//go:build tools

// Pins the helm CLI that scripts/build-testinfra.sh builds for the chart tests
// (tests/k8s/test_helm_chart.py). A module of its own: helm's dependency graph stays out of the
// kube-apiserver module next door.
package tools

import (
	_ "helm.sh/helm/v4/cmd/helm"
)
