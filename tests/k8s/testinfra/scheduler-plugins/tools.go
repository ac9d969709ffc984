//go:build tools

// Pins the scheduler-plugins kube-scheduler (sigs.k8s.io/scheduler-plugins/cmd/scheduler: the
// upstream kube-scheduler with Coscheduling and the other out-of-tree plugins registered) and its
// controller (cmd/controller: sets PodGroups' status) that scripts/build-testinfra.sh builds for
// the gang-scheduling tests on a real node (tests/k8s/real_node.py,
// tests/k8s/test_gang_scheduling.py), and whose CRDs it copies from the module cache. A module of
// its own: its dependency graph stays out of the kube-apiserver module next door. v0.35.4-devel is
// the scheduler-plugins tag built on k8s.io/kubernetes v1.35.4, the release
// tests/k8s/testinfra/go.mod pins.
package tools

import (
	_ "sigs.k8s.io/scheduler-plugins/cmd/controller"
	_ "sigs.k8s.io/scheduler-plugins/cmd/scheduler"
)
