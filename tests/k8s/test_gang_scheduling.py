"""Gang scheduling of a HorovodJob by a real Coscheduling scheduler on a real node
(real_node.RealNodeCluster(coscheduling="beside"): the scheduler-plugins kube-scheduler as a second
scheduler beside the default one, and scheduler-plugins' PodGroup controller), with korovod-operator
on the machine (operator_process.OperatorProcess) creating the scheduling.x-k8s.io/v1alpha1
PodGroup and the labelled worker pods.

The node's allocatable CPU (A) is shared out: a blocker pod (default scheduler) requests 0.3 A and
each of the job's 3 workers 0.3 A, so 2 workers would fit beside the blocker and the third would
not. With minAvailable 3 none is bound (no spec.nodeName, PodScheduled False Unschedulable), the
PodGroup stays in phase Scheduling with no pod running, and the job's WorkersNotStarting condition
names the reason; once the blocker is deleted the 3 are bound together (their PodScheduled
transitions within a couple of seconds of each other), run, and the PodGroup turns Running.
Then a gang of 2, only one of whose workers would fit beside a running gang of 3, waits, none bound,
until that job is deleted, and is bound as a whole.

The images are tiny local ones (the machine's static busybox): the trainer sleeps and the sidecar
answers its probes (/healthz, /readyz on KOROVOD_METRICS_PORT) with busybox httpd; nothing of
Horovod runs, the assertion is the placement. Skipped without the binaries (build-testinfra.sh:
kube-scheduler-plugins and its controller; the real node's), root or busybox; failed instead under
KOROVOD_REQUIRE_K8S=1."""
import calendar
import json
import os
import shutil
import tempfile
import time
import uuid

import pytest

from cluster import require_binaries, unavailable
from jobs import CRD
from operator_process import OperatorProcess, operator_binary
from real_node import (COSCHEDULER_NAME, require_node_binaries, require_scheduler_plugins,
                       running, write_oci_image)

BUSYBOX = "docker.io/korovod-test/busybox:1"
SIDECAR = "docker.io/korovod-test/probe-sidecar:1"  # busybox httpd answering the probes
BUSYBOX_APPLETS = ("sh", "sleep", "httpd")
PODGROUPS = "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/%s/podgroups/%s"
JOBS = "/apis/korovod.dev/v1alpha1/namespaces/%s/horovodjobs/%s"
PERMIT_WAIT_S = 5  # Coscheduling permitWaitingTimeSeconds
HOLD_S = 25  # how long the blocked gang is watched for a pod bound alone (several permit waits)


def _require(fn, *args):
    try:
        return fn(*args)
    except RuntimeError as e:
        unavailable(str(e))


@pytest.fixture(scope="module")
def node():
    require_binaries()
    require_node_binaries()
    require_scheduler_plugins()
    _require(operator_binary)
    busybox = shutil.which("busybox")
    if not busybox:
        unavailable("no /bin/busybox (busybox-static) for the test images")
    with tempfile.TemporaryDirectory(prefix="korovod-gang-") as d:
        links = {"/bin/" + a: "busybox" for a in BUSYBOX_APPLETS}
        trainer = write_oci_image(os.path.join(d, "busybox.tar"), BUSYBOX,
                                  {"/bin/busybox": (busybox, 0o755)}, symlinks=links,
                                  cmd=["/bin/sh"])
        ok = os.path.join(d, "ok")
        with open(ok, "w") as f:
            f.write("ok\n")
        sidecar = write_oci_image(
            os.path.join(d, "sidecar.tar"), SIDECAR,
            {"/bin/busybox": (busybox, 0o755), "/www/healthz": (ok, 0o644),
             "/www/readyz": (ok, 0o644)}, symlinks=links,
            entrypoint=["/bin/sh", "-c", "exec httpd -f -p $KOROVOD_METRICS_PORT -h /www"])
        with running(d, images=[trainer, sidecar], coscheduling="beside",
                     permit_waiting_s=PERMIT_WAIT_S) as c:
            print("\nreal node with Coscheduling Ready in %.1f s" % c.start_seconds)
            c.kubectl("apply", "--server-side", "-f", CRD)
            c.wait_established("crd/horovodjobs.korovod.dev")
            op = OperatorProcess(c, d, "operator-gang").start()
            try:
                c.wait_for(lambda: op.http("/readyz")[0] == 200, "operator ready", 60)
                c.operator = op
                yield c
            finally:
                op.stop()


@pytest.fixture
def ns(node):
    """A namespace of the test's own, deleted afterwards with everything in it, its pods gone
    from the node (their CPU free for the next test) before the next test starts."""
    c = node
    name = "gang-" + uuid.uuid4().hex[:6]
    c.kubectl("create", "namespace", name)
    c.wait_for(lambda: c.get("/api/v1/namespaces/%s/serviceaccounts/default" % name),
               "service account default in " + name, 60)
    yield name
    c.kubectl("delete", "namespace", name, "--wait=false")
    c.wait_alive(lambda: not c.get("/api/v1/namespaces/%s/pods" % name)["items"],
                 "the pods of namespace %s gone" % name, 120, "kubelet")


def _millicpu(q):
    return int(q[:-1]) if q.endswith("m") else int(float(q) * 1000)


def _pods(c, ns, job):
    items = c.get("/api/v1/namespaces/%s/pods?labelSelector=korovod.dev/job-name=%s"
                  % (ns, job))["items"]
    return sorted(items, key=lambda p: p["metadata"]["name"])


def _cond(obj, type_):
    return next((x for x in obj.get("status", {}).get("conditions") or [] if x["type"] == type_),
                None)


def _ts(s):
    return calendar.timegm(time.strptime(s, "%Y-%m-%dT%H:%M:%SZ"))


def _state(c, ns, job):
    """What the scheduler, the PodGroup controller and the operator say, for failures."""
    pods = [(p["metadata"]["name"], p["spec"].get("nodeName"), p["status"].get("phase"),
             _cond(p, "PodScheduled")) for p in _pods(c, ns, job)]
    ev = c.kubectl("-n", ns, "get", "events", "--sort-by=.lastTimestamp", check=False).stdout
    return "pods: %s\npodgroup: %s\njob status: %s\nevents:\n%s" % (
        json.dumps(pods, indent=1), json.dumps((c.get(PODGROUPS % (ns, job)) or {}).get("status")),
        json.dumps((c.get(JOBS % (ns, job)) or {}).get("status"), indent=1), ev[-4000:])


def _blocker(name, cpu_m):
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {
        "terminationGracePeriodSeconds": 0, "restartPolicy": "Never",
        "containers": [{"name": "main", "image": BUSYBOX, "imagePullPolicy": "Never",
                        "command": ["sleep", "3600"],
                        "resources": {"requests": {"cpu": "%dm" % cpu_m}}}]}}


def _gang_job(name, replicas, cpu_m):
    return {"apiVersion": "korovod.dev/v1alpha1", "kind": "HorovodJob",
            "metadata": {"name": name},
            "spec": {"replicas": replicas,
                     "sidecar": {"image": SIDECAR},
                     "schedulingPolicy": {"schedulerName": COSCHEDULER_NAME,
                                          "gang": {"enabled": True,
                                                   "provider": "scheduler-plugins",
                                                   "minAvailable": replicas}},
                     "template": {"spec": {"terminationGracePeriodSeconds": 0, "containers": [
                         {"name": "trainer", "image": BUSYBOX, "imagePullPolicy": "Never",
                          "command": ["sleep", "3600"],
                          "resources": {"requests": {"cpu": "%dm" % cpu_m}}}]}}}}


def test_gang_stays_pending_until_all_fit_then_binds_together(node, ns):
    c = node
    # The PodGroup CRD was served when the operator started: it watches PodGroups rather than
    # reading the job's by name at each reconcile.
    assert "watching scheduling.x-k8s.io/v1alpha1 podgroups" in c.operator.log(), \
        c.operator.log()[-3000:]
    alloc = _millicpu(c.get("/api/v1/nodes/" + c.node)["status"]["allocatable"]["cpu"])
    share = alloc * 3 // 10
    print("node allocatable cpu %dm: blocker and each worker request %dm" % (alloc, share))

    # The blocker, placed by the default scheduler (the two schedulers share the node).
    code, body = c.request("POST", "/api/v1/namespaces/%s/pods" % ns, _blocker("blocker", share))
    assert code == 201, body
    c.wait_pod_phase("blocker", ("Running",), namespace=ns, deadline_s=120)

    job = "gang"
    t0 = time.monotonic()
    c.kubectl("-n", ns, "apply", "-f", "-", input=json.dumps(_gang_job(job, 3, share)))

    def blocked():
        ps = _pods(c, ns, job)
        conds = [_cond(p, "PodScheduled") for p in ps]
        pg = c.get(PODGROUPS % (ns, job)) or {}
        j = c.get(JOBS % (ns, job)) or {}
        wns = _cond(j, "WorkersNotStarting")
        if (len(ps) == 3 and all(x and x["status"] == "False" and x["reason"] == "Unschedulable"
                                 for x in conds)
                and pg.get("status", {}).get("phase") == "Scheduling"
                and wns and wns["status"] == "True"):
            return ps, pg, wns
        return None
    try:
        ps, pg, wns = c.wait_alive(blocked, "3 gang pods Unschedulable, PodGroup Scheduling, "
                                   "WorkersNotStarting", 120, "kube-scheduler-plugins")
    except AssertionError as e:
        raise AssertionError("%s\n%s" % (e, _state(c, ns, job))) from None
    print("gang blocked in %.1f s; PodGroup %s; pod %s PodScheduled: %s; WorkersNotStarting: "
          "%s: %s" % (time.monotonic() - t0, json.dumps(pg["status"]), ps[0]["metadata"]["name"],
                      _cond(ps[0], "PodScheduled")["message"], wns["reason"], wns["message"]))
    assert pg["spec"]["minMember"] == 3, pg
    assert all(p["spec"].get("schedulerName") == COSCHEDULER_NAME and
               p["metadata"]["labels"].get("scheduling.x-k8s.io/pod-group") == job
               for p in ps), [p["metadata"] for p in ps]
    assert wns["reason"] == "Unschedulable", wns
    assert "Unschedulable" in wns["message"] and "(and 2 more worker pods)" in wns["message"], wns
    # Coscheduling's word (the scheduler's FailedScheduling events): the gang was placed as far
    # as it went and rejected as a whole.
    rejected = "PodGroup %s/%s gets rejected" % (ns, job)
    failed = c.wait_for(lambda: [e["message"] for e in c.get(
        "/api/v1/namespaces/%s/events?fieldSelector=reason%%3DFailedScheduling" % ns)["items"]
        if rejected in e["message"]], "a FailedScheduling event '%s...'" % rejected, 30)
    print("FailedScheduling: %s" % failed[0])

    # Two would fit beside the blocker: the gang holds them back, across several permit waits.
    end = time.monotonic() + HOLD_S
    while time.monotonic() < end:
        ps = _pods(c, ns, job)
        bound = [p["metadata"]["name"] for p in ps if p["spec"].get("nodeName")]
        assert not bound, "gang pods bound while the gang cannot fit: %s\n%s" % (
            bound, _state(c, ns, job))
        pg = c.get(PODGROUPS % (ns, job))
        assert pg["status"].get("phase") == "Scheduling" and not pg["status"].get("running"), pg
        time.sleep(0.5)

    # Room for all three: they are bound together.
    code, body = c.request("DELETE", "/api/v1/namespaces/%s/pods/blocker" % ns)
    assert code == 200, body
    t1 = time.monotonic()

    def all_bound():
        ps = _pods(c, ns, job)
        return ps if len(ps) == 3 and all(p["spec"].get("nodeName") == c.node for p in ps) \
            else None
    try:
        ps = c.wait_alive(all_bound, "the 3 gang pods bound", 90, "kube-scheduler-plugins")
    except AssertionError as e:
        raise AssertionError("%s\n%s" % (e, _state(c, ns, job))) from None
    times = [_ts(_cond(p, "PodScheduled")["lastTransitionTime"]) for p in ps]
    print("gang bound %.1f s after the blocker's deletion; PodScheduled times spread over %d s"
          % (time.monotonic() - t1, max(times) - min(times)))
    assert all(_cond(p, "PodScheduled")["status"] == "True" for p in ps), ps
    assert max(times) - min(times) <= 2, times

    def group_running():
        pg = c.get(PODGROUPS % (ns, job)) or {}
        j = c.get(JOBS % (ns, job)) or {}
        wns = _cond(j, "WorkersNotStarting")
        return (pg if pg.get("status", {}).get("phase") == "Running"
                and pg["status"].get("running") == 3 and wns and wns["status"] == "False"
                else None)
    try:
        pg = c.wait_alive(group_running, "PodGroup Running with 3 and WorkersNotStarting False",
                          120, "kubelet")
    except AssertionError as e:
        raise AssertionError("%s\n%s" % (e, _state(c, ns, job))) from None
    print("PodGroup %s" % json.dumps(pg["status"]))


def test_gang_of_two_waits_for_a_running_gang_to_leave(node, ns):
    """A running 3-worker gang leaves room for one worker of a second, 2-worker gang: neither of
    the two is bound until the first job is deleted (the operator's pods garbage-collected),
    then both are, together."""
    c = node
    alloc = _millicpu(c.get("/api/v1/nodes/" + c.node)["status"]["allocatable"]["cpu"])
    share = alloc * 3 // 10
    small = alloc - 3 * share  # exactly what the first gang leaves: one fits, not two
    c.kubectl("-n", ns, "apply", "-f", "-", input=json.dumps(_gang_job("first", 3, share)))
    try:
        c.wait_alive(lambda: (lambda pg: pg.get("status", {}).get("phase") == "Running")(
            c.get(PODGROUPS % (ns, "first")) or {}), "gang first Running", 120, "kubelet")
    except AssertionError as e:
        raise AssertionError("%s\n%s" % (e, _state(c, ns, "first"))) from None
    c.kubectl("-n", ns, "apply", "-f", "-", input=json.dumps(_gang_job("second", 2, small)))

    def blocked():
        ps = _pods(c, ns, "second")
        conds = [_cond(p, "PodScheduled") for p in ps]
        return ps if len(ps) == 2 and all(x and x["reason"] == "Unschedulable"
                                          for x in conds) else None
    try:
        c.wait_alive(blocked, "the 2 pods of gang second Unschedulable", 120,
                     "kube-scheduler-plugins")
    except AssertionError as e:
        raise AssertionError("%s\n%s" % (e, _state(c, ns, "second"))) from None
    end = time.monotonic() + HOLD_S
    while time.monotonic() < end:
        bound = [p["metadata"]["name"] for p in _pods(c, ns, "second") if p["spec"].get("nodeName")]
        assert not bound, "pods of gang second bound alone: %s (%dm each, %dm free)\n%s" % (
            bound, small, small, _state(c, ns, "second"))
        time.sleep(0.5)

    t0 = time.monotonic()
    c.kubectl("-n", ns, "delete", "hvdjob", "first", "--wait=false")

    def all_bound():
        ps = _pods(c, ns, "second")
        return ps if len(ps) == 2 and all(p["spec"].get("nodeName") for p in ps) else None
    try:
        ps = c.wait_alive(all_bound, "the 2 pods of gang second bound", 120,
                          "kube-scheduler-plugins")
    except AssertionError as e:
        raise AssertionError("%s\n%s" % (e, _state(c, ns, "second"))) from None
    times = [_ts(_cond(p, "PodScheduled")["lastTransitionTime"]) for p in ps]
    print("gang second bound %.1f s after gang first's deletion; PodScheduled times spread over "
          "%d s" % (time.monotonic() - t0, max(times) - min(times)))
    assert max(times) - min(times) <= 2, times
