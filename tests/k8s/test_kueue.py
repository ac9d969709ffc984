"""Kueue (tests/k8s/kueue.py: the manager pinned in tests/k8s/testinfra/kueue) against the test
cluster, with its built-in batch/v1 Job integration: a suspended Job labelled
kueue.x-k8s.io/queue-name gets a Workload (kueue.x-k8s.io/v1beta2) owned by the Job, which the
ClusterQueue admits (QuotaReserved and Admitted true, status.admission naming the ClusterQueue and
the ResourceFlavor), and Kueue unsuspends the Job with the flavor's nodeLabels in its pod
template's nodeSelector; a second Job waits suspended (QuotaReserved false, reason Pending) while
the first holds the quota; deactivating the first Workload evicts it (Evicted, reason
Deactivated), Kueue suspends its Job again and clears its quota reservation, and the second is
admitted. There is no kube-controller-manager: the Jobs never make pods, and spec.suspend and the
Workloads' conditions tell what Kueue did. This is the contract the operator follows for
HorovodJobs (an external framework: HorovodJob.v1alpha1.korovod.dev), which
test_external_framework_workload plays by hand: Workloads owned by HorovodJobs, one preempted by
a higher-priority one and its quota handed back through the Workload's status, as the operator
must, and Finished releasing the quota."""
import json
import time
import uuid

import pytest

from fake_kubelet import FakeKubelet
from jobs import apply, crd, job_doc, pods, wait_phase  # noqa: F401  (crd: the CRD fixture)
from jobs import condition as hvd_condition
from jobs import get_job as get_hvdjob
from operator_process import OperatorProcess
from test_operator_auth import USER, calls, chart_rbac
from kueue import API, JOB_UID_LABEL, QUEUE_LABEL, condition, condition_true
from kueue import kueue  # noqa: F401  (the module-scoped fixture)

JOBS = "/apis/batch/v1/namespaces/%s/jobs"
NODE_LABELS = {"korovod.dev/test-pool": "kueue-a"}


@pytest.fixture
def ns(cluster):
    name = "kq-" + uuid.uuid4().hex[:8]
    cluster.kubectl("create", "namespace", name)
    return name


@pytest.fixture
def queue(kueue, ns):  # noqa: F811
    """A ResourceFlavor with nodeLabels, a ClusterQueue of 2 CPUs and 2Gi on it, and a
    LocalQueue `lq` in ns; returns (cluster queue, flavor)."""
    suffix = uuid.uuid4().hex[:6]
    flavor, cq = "flavor-" + suffix, "cq-" + suffix
    kueue.resource_flavor(flavor, node_labels=NODE_LABELS)
    kueue.cluster_queue(cq, flavor, cpu="2", memory="2Gi")
    kueue.local_queue(ns, "lq", cq)
    kueue.wait_queue_active(ns, "lq", cq)
    return cq, flavor


def create_job(cluster, ns, name, cpu="1500m", memory="1Gi", queue="lq"):
    doc = {"apiVersion": "batch/v1", "kind": "Job",
           "metadata": {"name": name, "labels": {QUEUE_LABEL: queue}},
           # Suspended at creation: Kueue's Job webhook (not registered here) would do that.
           "spec": {"suspend": True, "parallelism": 1, "completions": 1, "backoffLimit": 0,
                    "template": {"spec": {"restartPolicy": "Never", "containers": [{
                        "name": "main", "image": "busybox:test", "command": ["true"],
                        "resources": {"requests": {"cpu": cpu, "memory": memory}}}]}}}}
    code, body = cluster.request("POST", JOBS % ns, doc)
    assert code == 201, (code, body)
    return body


def get_job(cluster, ns, name):
    return cluster.get((JOBS % ns) + "/" + name)


def admitted(wl):
    return condition_true(wl, "QuotaReserved") and condition_true(wl, "Admitted")


def pending(wl):
    c = condition(wl, "QuotaReserved")
    return bool(c) and c["status"] == "False" and c["reason"] == "Pending"


def test_kueue_ready(kueue):  # noqa: F811
    assert kueue.alive()
    code, _ = kueue.http("/healthz")
    assert code == 200
    print("kueue started in %.1fs" % kueue.start_seconds)


def test_jobs_admitted_through_cluster_queue(cluster, kueue, ns, queue):  # noqa: F811
    cq, flavor = queue
    a = create_job(cluster, ns, "job-a")

    # The Workload: owned (controller) by the Job, labelled with its UID, in the LocalQueue.
    wl_a = kueue.wait_workload(ns, a["metadata"]["uid"], "admitted", admitted)
    meta = wl_a["metadata"]
    assert meta["labels"][JOB_UID_LABEL] == a["metadata"]["uid"]
    assert meta["name"].startswith("job-job-a-")
    assert "kueue.x-k8s.io/resource-in-use" in meta.get("finalizers", [])
    owner = meta["ownerReferences"][0]
    assert (owner["apiVersion"], owner["kind"], owner["name"], owner.get("controller")) == \
        ("batch/v1", "Job", "job-a", True)
    assert wl_a["spec"]["queueName"] == "lq"
    assert [(p["name"], p["count"]) for p in wl_a["spec"]["podSets"]] == [("main", 1)]
    admission = wl_a["status"]["admission"]
    assert admission["clusterQueue"] == cq
    psa = admission["podSetAssignments"][0]
    assert psa["name"] == "main" and psa["count"] == 1
    assert psa["flavors"] == {"cpu": flavor, "memory": flavor}
    assert psa["resourceUsage"] == {"cpu": "1500m", "memory": "1Gi"}
    assert condition(wl_a, "QuotaReserved")["reason"] == "QuotaReserved"
    assert condition(wl_a, "Admitted")["reason"] == "Admitted"

    # Kueue starts the Job: unsuspended, the flavor's nodeLabels in its nodeSelector.
    job_a = cluster.wait_for(lambda: (lambda j: j if j and not j["spec"]["suspend"] else None)(
        get_job(cluster, ns, "job-a")), "job-a unsuspended by Kueue", 30)
    assert job_a["spec"]["template"]["spec"]["nodeSelector"] == NODE_LABELS

    # A second Job does not fit beside the first (1.5 + 1.5 CPUs > 2): it stays suspended.
    b = create_job(cluster, ns, "job-b")
    wl_b = kueue.wait_workload(ns, b["metadata"]["uid"], "pending (QuotaReserved False)", pending)
    assert "admission" not in wl_b["status"]
    assert not condition_true(wl_b, "Admitted")
    time.sleep(2)
    assert get_job(cluster, ns, "job-b")["spec"]["suspend"] is True
    assert admitted(kueue.workload_of(ns, a["metadata"]["uid"]))

    # Deactivating the first Workload evicts it: Kueue suspends job-a again, clears the quota
    # reservation (jobframework's StopJob, then UnsetQuotaReservation) and admits job-b.
    code, body = cluster.request(
        "PATCH", API + "/namespaces/%s/workloads/%s" % (ns, wl_a["metadata"]["name"]),
        {"spec": {"active": False}}, content_type="application/merge-patch+json")
    assert code == 200, (code, body)
    wl_a = kueue.wait_workload(
        ns, a["metadata"]["uid"], "evicted and its quota released",
        lambda wl: condition_true(wl, "Evicted") and not condition_true(wl, "QuotaReserved"))
    assert condition(wl_a, "Evicted")["reason"] == "Deactivated"
    assert condition(wl_a, "QuotaReserved")["reason"] == "Pending"
    assert condition(wl_a, "Admitted")["status"] == "False"
    assert condition(wl_a, "Requeued")["status"] == "False"
    assert "admission" not in wl_a["status"]
    job_a = get_job(cluster, ns, "job-a")
    assert job_a["spec"]["suspend"] is True
    assert not job_a["spec"]["template"]["spec"].get("nodeSelector")  # restored

    kueue.wait_workload(ns, b["metadata"]["uid"], "admitted after job-a's eviction", admitted)
    cluster.wait_for(lambda: not get_job(cluster, ns, "job-b")["spec"]["suspend"],
                     "job-b unsuspended by Kueue", 30)
    assert kueue.alive()


def put_status(cluster, wl, mutate):
    """What an external framework's controller does to a Workload's status: GET, change, PUT
    /status with the resourceVersion read (a conflict means: read again)."""
    path = API + "/namespaces/%s/workloads/%s" % (wl["metadata"]["namespace"],
                                                   wl["metadata"]["name"])
    for _ in range(10):
        cur = cluster.get(path)
        mutate(cur["status"], cur)
        code, body = cluster.request("PUT", path + "/status", cur)
        if code == 200:
            return body
        assert code == 409, (code, body)
    raise AssertionError("status of %s kept conflicting" % path)


def set_condition(status, wl, type_, value, reason, message):
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    conds = [c for c in status.setdefault("conditions", []) if c["type"] != type_]
    old = condition(wl, type_)
    same = old and old["status"] == ("True" if value else "False")
    conds.append({"type": type_, "status": "True" if value else "False", "reason": reason,
                  "message": message, "observedGeneration": wl["metadata"]["generation"],
                  "lastTransitionTime": old["lastTransitionTime"] if same else now})
    status["conditions"] = conds


def reserving(cluster, cq):
    return (cluster.get(API + "/clusterqueues/" + cq).get("status") or {}).get(
        "reservingWorkloads", 0)


def horovod_workload(cluster, ns, name, replicas, cpu, queue, priority_class=None,
                     priority=0):
    """A HorovodJob `name` (no operator runs here) and the Workload its controller would make:
    v1beta2, owned by the job, one PodSet `worker` of `replicas` pods of `cpu` each."""
    apply(cluster, ns, job_doc(name, replicas=replicas))
    uid = cluster.get("/apis/korovod.dev/v1alpha1/namespaces/%s/horovodjobs/%s"
                      % (ns, name))["metadata"]["uid"]
    spec = {"queueName": queue, "priority": priority,
            "podSets": [{"name": "worker", "count": replicas, "template": {"spec": {
                "restartPolicy": "Never", "containers": [{
                    "name": "trainer", "image": "korovod/trainer:test",
                    "resources": {"requests": {"cpu": cpu, "memory": "256Mi"}}}]}}}]}
    if priority_class:
        spec["priorityClassRef"] = {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass",
                                    "name": priority_class}
    wl = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
          "metadata": {"name": "horovodjob-%s-%s" % (name, uid[:5]), "namespace": ns,
                       "labels": {JOB_UID_LABEL: uid},
                       "finalizers": ["kueue.x-k8s.io/resource-in-use"],
                       "ownerReferences": [{"apiVersion": "korovod.dev/v1alpha1",
                                            "kind": "HorovodJob", "name": name, "uid": uid,
                                            "controller": True, "blockOwnerDeletion": True}]},
          "spec": spec}
    code, body = cluster.request("POST", API + "/namespaces/%s/workloads" % ns, wl)
    assert code == 201, (code, body)
    assert body["spec"]["active"] is True  # the CRD's default
    return uid


def release_quota(status, cur):
    """The controller's part after an eviction, once its job has stopped (jobframework:
    SetRequeuedCondition + UnsetQuotaReservationWithCondition)."""
    ev = condition(cur, "Evicted")
    set_condition(status, cur, "Requeued", ev["reason"] in ("Preempted", "NodeFailures"),
                  ev["reason"], ev["message"])
    set_condition(status, cur, "QuotaReserved", False, "Pending", ev["message"])
    set_condition(status, cur, "Admitted", False, "NoReservation",
                  "The workload has no reservation")
    status.pop("admission", None)


def test_external_framework_workload(cluster, crd, kueue, ns, queue):  # noqa: F811
    """The Kueue half of the HorovodJob contract, with the test playing the operator: Workloads
    (v1beta2) owned by HorovodJobs are admitted without any webhook; preempted by a
    higher-priority one, a Workload only gets Evicted=True (reason Preempted) and Preempted=True:
    its quota stays reserved, and the preemptor waits, until the job's controller (having
    stopped the job) clears status.admission and sets QuotaReserved/Admitted False and Requeued
    True; Finished=True releases the quota and the preempted Workload is admitted again."""
    _, flavor = queue
    cq = "cq-p-" + uuid.uuid4().hex[:6]
    kueue.cluster_queue(cq, flavor, cpu="2", memory="2Gi",
                        preemption={"withinClusterQueue": "LowerPriority"})
    kueue.local_queue(ns, "lq-p", cq)
    kueue.wait_queue_active(ns, "lq-p", cq)
    if not cluster.get(API + "/workloadpriorityclasses/korovod-test-high"):
        kueue.workload_priority_class("korovod-test-high", 1000)

    low = horovod_workload(cluster, ns, "low", 2, "1", "lq-p")
    wl = kueue.wait_workload(ns, low, "admitted", admitted)
    psa = wl["status"]["admission"]["podSetAssignments"]
    assert [(p["name"], p["count"], p["flavors"]["cpu"], p["resourceUsage"]["cpu"])
            for p in psa] == [("worker", 2, flavor, "2")]
    cluster.wait_for(lambda: reserving(cluster, cq) == 1, "ClusterQueue %s reserving" % cq, 30)

    high = horovod_workload(cluster, ns, "high", 2, "1", "lq-p",
                            priority_class="korovod-test-high", priority=1000)
    wl = kueue.wait_workload(ns, low, "preempted", lambda w: condition_true(w, "Evicted"))
    assert condition(wl, "Evicted")["reason"] == "Preempted"
    assert condition_true(wl, "Preempted")
    assert condition(wl, "Preempted")["reason"] == "InClusterQueue"
    time.sleep(2)
    wl = kueue.workload_of(ns, low)
    assert condition_true(wl, "QuotaReserved") and wl["status"].get("admission")
    assert not condition_true(kueue.workload_of(ns, high), "QuotaReserved")

    put_status(cluster, wl, release_quota)
    kueue.wait_workload(ns, high, "admitted after the release", admitted)
    wl = kueue.workload_of(ns, low)
    assert condition_true(wl, "Requeued") and condition(wl, "Requeued")["reason"] == "Preempted"
    assert not condition_true(wl, "QuotaReserved") and "admission" not in wl["status"]

    # The preemptor finishes: Finished=True alone releases its quota (status.admission stays),
    # and the preempted Workload is admitted again, Evicted and Preempted turned False.
    put_status(cluster, kueue.workload_of(ns, high), lambda status, cur: set_condition(
        status, cur, "Finished", True, "Succeeded", "HorovodJob high succeeded"))
    wl = kueue.wait_workload(ns, low, "admitted again", admitted)
    for type_ in ("Evicted", "Preempted"):
        c = condition(wl, type_)
        assert c["status"] == "False" and c["reason"] == "QuotaReserved", c
        assert c["message"].startswith("Previously: ")
    assert kueue.workload_of(ns, high)["status"]["admission"]["clusterQueue"] == cq
    assert kueue.alive()


def horovod_job(name, queue, cpu, priority_class=None, replicas=2):
    doc = json.loads(job_doc(name, replicas=replicas))
    doc["metadata"]["labels"] = {QUEUE_LABEL: queue}
    if priority_class:
        doc["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] = priority_class
    doc["spec"]["template"]["spec"]["containers"][0]["resources"] = {
        "requests": {"cpu": cpu, "memory": "100Mi"}}
    return json.dumps(doc)


def test_operator_runs_horovodjobs_through_kueue(cluster, crd, kueue, ns, queue,  # noqa: F811
                                                 tmp_path_factory):
    """The korovod operator with a real Kueue: a HorovodJob in a LocalQueue stays Suspended
    (no pods) until Kueue admits the Workload the operator created for it; admitted, its pods
    carry the flavor's node labels and run; a higher-priority job preempts it: its workers are
    stopped (Suspended, reason EvictedByKueue, not a failure: restartCount 0), its quota is handed
    back, the preemptor runs, and when the preemptor succeeds (its Workload Finished) the first
    job is admitted again and runs as a new epoch."""
    _, flavor = queue
    cq = "cq-hj-" + uuid.uuid4().hex[:6]
    kueue.cluster_queue(cq, flavor, cpu="2", memory="2Gi",
                        preemption={"withinClusterQueue": "LowerPriority"})
    kueue.local_queue(ns, "lq-hj", cq)
    kueue.wait_queue_active(ns, "lq-hj", cq)
    for name, value in (("korovod-hj-low", 10), ("korovod-hj-high", 1000)):
        if not cluster.get(API + "/workloadpriorityclasses/" + name):
            kueue.workload_priority_class(name, value)

    # Pods need the namespace's default ServiceAccount (no controller-manager makes it here).
    crd.wait_for(lambda: crd.request("POST", "/api/v1/namespaces/%s/serviceaccounts" % ns,
                                     {"metadata": {"name": "default"}})[0] in (201, 409),
                 "service account default in " + ns, 30)
    # The operator runs as the certificate's user under the chart's own RBAC: its Kueue grants
    # suffice, and each is used (the audit log below).
    for doc in chart_rbac(ns):
        crd.kubectl("apply", "-f", "-", input=json.dumps(doc))
    logdir = str(tmp_path_factory.mktemp("operator-kueue"))
    # Only this namespace: test_external_framework_workload's HorovodJobs are its own.
    operator = OperatorProcess(crd, logdir, "operator-kueue", ["--namespace", ns],
                               kubeconfig=crd.cert_kubeconfig).start()
    outcome = {"high": "run"}
    try:
        crd.wait_for(lambda: operator.http("/readyz")[0] == 200, "operator /readyz", 60)
        with FakeKubelet(crd, ns, outcome=lambda p: outcome["high"] if p["metadata"]["name"]
                         .startswith("high-") else "run"):
            started = time.monotonic()
            apply(crd, ns, horovod_job("low", "lq-hj", "500m", "korovod-hj-low"))
            low = crd.wait_for(lambda: get_hvdjob(crd, ns, "low"), "HorovodJob low", 10)
            uid = low["metadata"]["uid"]
            wl = kueue.wait_workload(ns, uid, "admitted", admitted)
            assert wl["metadata"]["ownerReferences"][0]["kind"] == "HorovodJob"
            assert wl["spec"]["priority"] == 10
            assert wl["spec"]["podSets"][0]["count"] == 2
            low = wait_phase(crd, ns, "low", "Running", 60)
            print("kueue: apply to Running through admission %.1fs" % (time.monotonic() - started))
            for p in pods(crd, ns, "low"):
                assert p["spec"]["nodeSelector"] == NODE_LABELS, p["spec"].get("nodeSelector")
                assert p["metadata"]["annotations"]["kueue.x-k8s.io/workload"] == \
                    wl["metadata"]["name"]

            # A higher-priority job that does not fit beside it (2 x 1 CPU): Kueue preempts low.
            apply(crd, ns, horovod_job("high", "lq-hj", "1", "korovod-hj-high"))
            low = wait_phase(crd, ns, "low", "Suspended", 60)
            assert hvd_condition(low, "Suspended")["reason"] == "EvictedByKueue", low["status"]
            assert "Preempted" in hvd_condition(low, "Suspended")["message"]
            assert low["status"]["restartCount"] == 0
            crd.wait_for(lambda: not pods(crd, ns, "low"), "low's pods deleted", 30)
            wl = kueue.wait_workload(ns, uid, "quota released and requeued",
                                     lambda w: condition_true(w, "Requeued")
                                     and not condition_true(w, "QuotaReserved"))
            assert "admission" not in wl["status"]
            wait_phase(crd, ns, "high", "Running", 60)
            assert hvd_condition(get_hvdjob(crd, ns, "low"), "Failed") is None

            # The preemptor succeeds: its Workload is Finished, and low runs again (epoch 2).
            outcome["high"] = "succeed"
            high = wait_phase(crd, ns, "high", "Succeeded", 60)
            kueue.wait_workload(ns, high["metadata"]["uid"], "Finished",
                                lambda w: condition_true(w, "Finished"))
            low = wait_phase(crd, ns, "low", "Running", 90)
            assert low["status"]["epoch"] == 2 and low["status"]["restartCount"] == 0
            assert hvd_condition(low, "Suspended")["reason"] == "AdmittedByKueue"
        made = calls(crd.audit_events(USER))
        # Workloads are watched, not read by name each reconcile (nor polled every 2 s / 5 s).
        assert ("get", "kueue.x-k8s.io", "workloads") not in made, "a Workload read by name"
        assert "watching kueue.x-k8s.io/v1beta2 workloads" in operator.log()
        for grant in [("create", "kueue.x-k8s.io", "workloads"),
                      ("list", "kueue.x-k8s.io", "workloads"),
                      ("watch", "kueue.x-k8s.io", "workloads"),
                      ("update", "kueue.x-k8s.io", "workloads/status"),
                      ("get", "kueue.x-k8s.io", "resourceflavors"),
                      ("get", "kueue.x-k8s.io", "workloadpriorityclasses")]:
            assert grant in made, "the operator never made %s" % (grant,)
        assert "HTTP 403" not in operator.log().split("caches synced")[-1], operator.log()[-3000:]
    finally:
        assert operator.stop() == 0, operator.log()[-3000:]
    assert kueue.alive()
