"""korovod-operator against a real kube-apiserver: the children it creates, the job lifecycle
(run, succeed, fail and restart, backoff, suspend, deadline, TTL, cleanup), bad specs, operator
restarts, watch expiry, conflicts, leader election and its endpoints. FakeKubelet plays the node."""
import json
import time

import pytest

from fake_kubelet import FakeKubelet
from operator_process import OperatorProcess

from jobs import (apply, condition, crd, events, get_job, job_doc, ns, pods,  # noqa: F401
                  wait_phase)


@pytest.fixture(scope="module")
def operator(crd, tmp_path_factory):
    logdir = str(tmp_path_factory.mktemp("operator"))
    process = OperatorProcess(crd, logdir, "operator-main").start()
    crd.wait_for(lambda: process.http("/readyz")[0] == 200, "operator /readyz", 60)
    yield process
    assert process.stop() == 0, process.log()[-3000:]


def test_creates_exactly_the_expected_children(operator, crd, ns):
    with FakeKubelet(crd, ns, outcome=lambda p: "pending"):
        apply(crd, ns, job_doc("digits", replicas=3, worker={"rdma": {"count": 1}}))
        crd.wait_for(lambda: len(pods(crd, ns, "digits")) == 3, "3 worker pods", 60)
        time.sleep(1.5)  # later reconciles must not add anything
        ps = pods(crd, ns, "digits")
        assert [p["metadata"]["name"] for p in ps] == ["digits-worker-0", "digits-worker-1",
                                                      "digits-worker-2"]
        job = get_job(crd, ns, "digits")
        for p in ps:
            owners = p["metadata"]["ownerReferences"]
            assert owners == [{"apiVersion": "korovod.dev/v1alpha1", "kind": "HorovodJob",
                               "name": "digits", "uid": job["metadata"]["uid"],
                               "controller": True, "blockOwnerDeletion": True}]
            side = p["spec"]["initContainers"][0]
            assert side["name"] == "korovod-sidecar" and side["restartPolicy"] == "Always"
            assert side["securityContext"]["capabilities"]["add"] == ["IPC_LOCK"]
            assert side["resources"]["limits"]["rdma/hca"] == "1"
            env = {e["name"]: e.get("value") for e in p["spec"]["containers"][0]["env"]}
            index = p["metadata"]["labels"]["korovod.dev/replica-index"]
            assert env["KOROVOD_RANK"] == index and env["KOROVOD_SIZE"] == "3"
            assert env["KOROVOD_COORDINATOR"].startswith("digits-worker-0.digits.%s.svc" % ns)
        svc = crd.get("/api/v1/namespaces/%s/services/digits" % ns)
        assert svc["spec"]["clusterIP"] == "None"
        assert crd.get("/api/v1/namespaces/%s/configmaps/digits-world" % ns) is not None
        key = crd.get("/api/v1/namespaces/%s/secrets/digits-key" % ns)
        assert key is not None and len(key["data"]["key"]) > 0
        assert job["status"]["phase"] == "Pending"
        assert job["status"]["epoch"] == 1


def test_job_runs_to_success_with_counts_and_events(operator, crd, ns):
    outcome = {"v": "run"}
    with FakeKubelet(crd, ns, outcome=lambda p: outcome["v"]):
        apply(crd, ns, job_doc("ok", replicas=2))
        job = wait_phase(crd, ns, "ok", "Running")
        crd.wait_for(lambda: get_job(crd, ns, "ok")["status"].get("readyWorkers") == 2,
                     "readyWorkers 2", 30)
        out = crd.kubectl("-n", ns, "get", "hvdjob", "ok").stdout
        row = out.splitlines()[1].split()
        assert row[:4] == ["ok", "Running", "2", "2"], out  # NAME PHASE READY WORKERS
        # -o wide adds the epoch, the restarts and the ranks in each state.
        crd.wait_for(lambda: get_job(crd, ns, "ok")["status"].get("rankSummary") == "Ready:0-1",
                     "status.rankSummary Ready:0-1", 30)
        wide = crd.kubectl("-n", ns, "get", "hvdjob", "ok", "-o", "wide").stdout.splitlines()
        assert wide[0].split() == ["NAME", "PHASE", "READY", "WORKERS", "AGE", "EPOCH",
                                   "RESTARTS", "RANKS"], wide
        row = wide[1].split()
        assert row[5:] == ["1", "0", "Ready:0-1"], wide
        # status.workers lists only ranks that are not Ready: none.
        assert "workers" not in get_job(crd, ns, "ok")["status"]
        assert get_job(crd, ns, "ok")["status"]["worldSize"] == 2
        outcome["v"] = "succeed"
        job = wait_phase(crd, ns, "ok", "Succeeded")
        st = job["status"]
        assert st["succeededWorkers"] == 2 and st.get("completionTime") and st.get("startTime")
        assert condition(job, "Succeeded")["status"] == "True"
        assert st["observedGeneration"] == job["metadata"]["generation"]
    reasons = {e["reason"] for e in events(crd, ns)}
    assert reasons, "the operator recorded no events"


def test_failure_restarts_with_new_epoch_then_fails_after_backoff(operator, crd, ns):
    with FakeKubelet(crd, ns, outcome=lambda p: "fail:3"
                     if p["metadata"]["labels"]["korovod.dev/replica-index"] == "1" else "run"):
        apply(crd, ns, job_doc("flaky", replicas=2, runPolicy={"backoffLimit": 1}))
        job = wait_phase(crd, ns, "flaky", "Failed", 90)
    st = job["status"]
    assert st["restartCount"] == 1 and st["epoch"] == 2
    failed = condition(job, "Failed")
    assert failed["reason"] == "BackoffLimitExceeded"
    assert "flaky-worker-1" in failed["message"] and "3" in failed["message"], failed
    warnings = [e for e in events(crd, ns) if e["type"] == "Warning"]
    assert any("flaky-worker-1" in e["message"] for e in warnings), warnings


def test_suspend_deletes_pods_and_resume_recreates_them(operator, crd, ns):
    with FakeKubelet(crd, ns):
        apply(crd, ns, job_doc("sus", replicas=2))
        wait_phase(crd, ns, "sus", "Running")
        first = {p["metadata"]["uid"] for p in pods(crd, ns, "sus")}
        crd.kubectl("-n", ns, "patch", "hvdjob", "sus", "--type=merge", "-p",
                    '{"spec":{"runPolicy":{"suspend":true}}}')
        wait_phase(crd, ns, "sus", "Suspended")
        crd.wait_for(lambda: not pods(crd, ns, "sus"), "pods deleted on suspend", 30)
        crd.kubectl("-n", ns, "patch", "hvdjob", "sus", "--type=merge", "-p",
                    '{"spec":{"runPolicy":{"suspend":false}}}')
        job = wait_phase(crd, ns, "sus", "Running")
        again = {p["metadata"]["uid"] for p in pods(crd, ns, "sus")}
        assert len(again) == 2 and not (again & first)
        assert condition(job, "Suspended")["status"] == "False"


def test_active_deadline_fails_the_job_and_removes_pods(operator, crd, ns):
    with FakeKubelet(crd, ns):
        apply(crd, ns, job_doc("late", replicas=2, runPolicy={"activeDeadlineSeconds": 3}))
        job = wait_phase(crd, ns, "late", "Failed", 60)
        assert condition(job, "Failed")["reason"] == "DeadlineExceeded"
        crd.wait_for(lambda: not pods(crd, ns, "late"), "pods removed after the deadline", 30)


@pytest.mark.parametrize("policy,left", [("Running", 1), ("All", 0), ("None", 2)])
def test_clean_pod_policy(operator, crd, ns, policy, left):
    # Worker 0 fails at once, worker 1 keeps running: after the failure only running pods are
    # cleaned up by Running, every pod by All, none by None.
    with FakeKubelet(crd, ns, outcome=lambda p: "fail:1" if p["metadata"]["name"].endswith("-0")
                     else "run"):
        apply(crd, ns, job_doc("clean", replicas=2,
                               runPolicy={"backoffLimit": 0, "cleanPodPolicy": policy}))
        wait_phase(crd, ns, "clean", "Failed", 60)
        crd.wait_for(lambda: len(pods(crd, ns, "clean")) == left,
                     "%d pods left with cleanPodPolicy %s" % (left, policy), 30)
        time.sleep(1)
        assert len(pods(crd, ns, "clean")) == left


def test_ttl_deletes_the_finished_job(operator, crd, ns):
    with FakeKubelet(crd, ns, outcome=lambda p: "succeed"):
        apply(crd, ns, job_doc("ttl", replicas=1, runPolicy={"ttlSecondsAfterFinished": 4}))
        wait_phase(crd, ns, "ttl", "Succeeded")
        crd.wait_for(lambda: get_job(crd, ns, "ttl") is None, "job deleted by its TTL", 30)


def test_bad_spec_gets_a_condition_and_the_operator_keeps_serving(operator, crd, ns):
    with FakeKubelet(crd, ns):
        apply(crd, ns, job_doc("bad", replicas=2, schedulingPolicy={
            "gang": {"enabled": True, "provider": "volcano", "minAvailable": 5}}))
        apply(crd, ns, job_doc("good", replicas=1))
        job = wait_phase(crd, ns, "bad", "Failed")
        valid = condition(job, "SpecValid")
        assert valid["status"] == "False" and valid["reason"] == "GangMinAvailableExceedsReplicas"
        assert not pods(crd, ns, "bad")
        wait_phase(crd, ns, "good", "Running")


def test_endpoints_and_metrics(operator, crd, ns):
    assert operator.http("/healthz")[0] == 200
    assert operator.http("/readyz")[0] == 200
    with FakeKubelet(crd, ns):
        apply(crd, ns, job_doc("m", replicas=1))
        wait_phase(crd, ns, "m", "Running")
        crd.wait_for(lambda: (operator.metric("korovod_operator_jobs", 'phase="Running"') or 0)
                     >= 1, "jobs{phase=Running} metric", 30)
    assert operator.metric("korovod_operator_reconcile_duration_seconds_count") > 0
    assert operator.metric("korovod_operator_workqueue_depth") is not None
    assert operator.metric("korovod_operator_reconcile_errors_total") is not None


def test_conflicting_writers_do_not_stop_status_updates(operator, crd, ns):
    # Another writer keeps changing the job while the operator writes its status: the
    # operator's stale writes get 409 Conflict and must re-read and retry.
    with FakeKubelet(crd, ns):
        apply(crd, ns, job_doc("busy", replicas=2))
        end = time.monotonic() + 6
        i = 0
        while time.monotonic() < end:
            crd.kubectl("-n", ns, "label", "--overwrite", "hvdjob", "busy", "touch=%d" % i)
            i += 1
        wait_phase(crd, ns, "busy", "Running")
        crd.wait_for(lambda: get_job(crd, ns, "busy")["status"].get("readyWorkers") == 2,
                     "readyWorkers 2 despite the concurrent writer", 30)
        assert get_job(crd, ns, "busy")["metadata"]["labels"]["touch"] == str(i - 1)


# A stand-in for Volcano's PodGroup CRD (the real one's schema is not needed to store objects).
VOLCANO_PODGROUP_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "podgroups.scheduling.volcano.sh"},
    "spec": {"group": "scheduling.volcano.sh", "scope": "Namespaced",
             "names": {"plural": "podgroups", "singular": "podgroup", "kind": "PodGroup"},
             "versions": [{"name": "v1beta1", "served": True, "storage": True,
                           "schema": {"openAPIV3Schema": {
                               "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}]},
}


def test_gang_job_gets_a_volcano_pod_group(operator, crd, ns):
    crd.kubectl("apply", "-f", "-", input=json.dumps(VOLCANO_PODGROUP_CRD))
    crd.wait_established("crd/podgroups.scheduling.volcano.sh")
    with FakeKubelet(crd, ns):
        apply(crd, ns, job_doc("gang", replicas=3, schedulingPolicy={
            "gang": {"enabled": True, "provider": "volcano", "minAvailable": 3}}))
        wait_phase(crd, ns, "gang", "Running")
    pg = crd.get("/apis/scheduling.volcano.sh/v1beta1/namespaces/%s/podgroups/gang" % ns)
    assert pg is not None and pg["spec"]["minMember"] == 3, pg
    assert pg["metadata"]["ownerReferences"][0]["name"] == "gang"
    for p in pods(crd, ns, "gang"):
        assert p["metadata"]["annotations"]["scheduling.k8s.io/group-name"] == "gang"
        assert p["spec"]["schedulerName"] == "volcano"


def test_gang_job_pod_group_follows_a_resize(operator, crd, ns):
    # A PodGroup keeping the old world's minMember after a scale-down would never let the gang
    # scheduler bind the smaller epoch's pods (the job would fail its start-up timeout).
    crd.kubectl("apply", "-f", "-", input=json.dumps(VOLCANO_PODGROUP_CRD))
    crd.wait_established("crd/podgroups.scheduling.volcano.sh")
    path = "/apis/scheduling.volcano.sh/v1beta1/namespaces/%s/podgroups/resized" % ns
    with FakeKubelet(crd, ns):
        apply(crd, ns, job_doc("resized", replicas=3, schedulingPolicy={
            "gang": {"enabled": True, "provider": "volcano"}}))
        wait_phase(crd, ns, "resized", "Running")
        assert crd.get(path)["spec"]["minMember"] == 3
        crd.kubectl("-n", ns, "patch", "hvdjob", "resized", "--type=merge",
                    "-p", '{"spec": {"replicas": 2}}')
        crd.wait_for(lambda: (get_job(crd, ns, "resized")["status"].get("epoch") == 2 and
                              get_job(crd, ns, "resized")["status"].get("phase") == "Running"),
                     "epoch 2 of the resized job Running", 90)
    pg = crd.get(path)
    assert pg is not None and pg["spec"]["minMember"] == 2, pg
    live = [p for p in pods(crd, ns, "resized") if not p["metadata"].get("deletionTimestamp")]
    assert sorted(p["metadata"]["labels"]["korovod.dev/epoch"] for p in live) == ["2", "2"], live


def test_gang_job_without_its_scheduler_is_named_in_the_log(operator, crd, ns):
    # scheduler-plugins' PodGroup CRD is not installed in the test cluster.
    with FakeKubelet(crd, ns):
        apply(crd, ns, job_doc("nogang", replicas=2, schedulingPolicy={
            "gang": {"enabled": True, "provider": "scheduler-plugins"}}))
        crd.wait_for(lambda: "scheduling.x-k8s.io/v1alpha1 podgroups is not served" in
                     operator.log(), "the missing PodGroup API named in the log", 30)
        assert not pods(crd, ns, "nogang")  # workers wait for their PodGroup
    crd.kubectl("-n", ns, "delete", "hvdjob", "nogang")


def test_recreated_job_does_not_adopt_its_namesakes_pods(operator, crd, ns):
    # This cluster has no garbage collector, so a deleted job's pods stay, as orphaned or still
    # terminating pods would. A new job of the same name is another owner (uid): it must not
    # count them (nor report their success), and runs once its own pods can be created.
    with FakeKubelet(crd, ns, outcome=lambda p: "succeed"):
        apply(crd, ns, job_doc("again", replicas=2, runPolicy={"cleanPodPolicy": "None"}))
        old_uid = wait_phase(crd, ns, "again", "Succeeded")["metadata"]["uid"]
        assert len(pods(crd, ns, "again")) == 2
        crd.kubectl("-n", ns, "delete", "hvdjob", "again")
        apply(crd, ns, job_doc("again", replicas=2, runPolicy={"cleanPodPolicy": "None"}))
        job = crd.wait_for(lambda: (get_job(crd, ns, "again") or {}).get("status", {}).get(
            "phase") and get_job(crd, ns, "again"), "the new job reconciled", 30)
        assert job["metadata"]["uid"] != old_uid
        time.sleep(1.5)  # later reconciles must not adopt them either
        st = get_job(crd, ns, "again")["status"]
        assert st["phase"] != "Succeeded" and st.get("succeededWorkers", 0) == 0, st
        assert all(p["metadata"]["ownerReferences"][0]["uid"] == old_uid
                   for p in pods(crd, ns, "again"))
        # Play the garbage collector: the new job then creates and runs its own workers.
        crd.kubectl("-n", ns, "delete", "pods", "-l", "korovod.dev/job-name=again")
        job = wait_phase(crd, ns, "again", "Succeeded", 60)
        assert job["status"]["succeededWorkers"] == 2
        owners = {p["metadata"]["ownerReferences"][0]["uid"] for p in pods(crd, ns, "again")}
        assert owners == {job["metadata"]["uid"]}


def test_workers_that_never_start_fail_the_job_naming_them(operator, crd, ns):
    # Worker 1 never leaves Pending: past startupTimeoutSeconds the job fails and says which
    # rank never came, instead of staying Pending while its sidecars crash-loop.
    with FakeKubelet(crd, ns, outcome=lambda p: "pending"
                     if p["metadata"]["name"].endswith("-1") else "run"):
        apply(crd, ns, job_doc("stuck", replicas=2, runPolicy={"startupTimeoutSeconds": 3}))
        job = wait_phase(crd, ns, "stuck", "Failed", 60)
    failed = condition(job, "Failed")
    assert failed["reason"] == "StartupTimeout", failed
    assert "1 of 2 workers of epoch 1 did not start within" in failed["message"], failed
    assert "rank 1 (stuck-worker-1: Pending" in failed["message"], failed
    assert "rank 0" not in failed["message"], failed
    # cleanPodPolicy Running removes them (in the reconcile that fails the job, or the next one
    # once the pod cache has caught up); any left over are terminating.
    crd.wait_for(lambda: all(p["metadata"].get("deletionTimestamp")
                             for p in pods(crd, ns, "stuck") or []),
                 "the failed job's running workers deleted", 30)


RESTRICTED_TRAINER = {"name": "trainer", "image": "korovod/trainer:test",
                      "command": ["python3", "train.py"],
                      "securityContext": {"runAsNonRoot": True, "runAsUser": 1000,
                                          "allowPrivilegeEscalation": False,
                                          "capabilities": {"drop": ["ALL"]},
                                          "seccompProfile": {"type": "RuntimeDefault"}}}


def test_dra_claim_is_shared_by_trainer_and_sidecar(operator, crd, ns):
    """The Dynamic Resource Allocation form (resource.k8s.io/v1): a ResourceClaimTemplate, a job
    whose pods claim from it and whose trainer names the claim. The API server accepts the
    template and the operator's pods, where the sidecar names the same claim (ADR 0012); the
    workers run and the job succeeds."""
    crd.kubectl("-n", ns, "apply", "-f", "-", input=json.dumps({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
        "metadata": {"name": "two-gpus"},
        "spec": {"spec": {"devices": {"requests": [{
            "name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 2}}]}}}}))
    doc = json.loads(job_doc("dra", replicas=2))
    tspec = doc["spec"]["template"]["spec"]
    tspec["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": "two-gpus"}]
    tspec["containers"][0]["resources"] = {"claims": [{"name": "gpus"}]}
    with FakeKubelet(crd, ns, outcome=lambda p: "succeed"):
        apply(crd, ns, json.dumps(doc))
        job = wait_phase(crd, ns, "dra", "Succeeded")
        assert job["status"]["succeededWorkers"] == 2, job["status"]
    for p in pods(crd, ns, "dra"):
        assert p["spec"]["resourceClaims"] == tspec["resourceClaims"], p["spec"]
        side = p["spec"]["initContainers"][0]
        assert side["name"] == "korovod-sidecar", side
        assert side["resources"]["claims"] == [{"name": "gpus"}], side
        assert p["spec"]["containers"][0]["resources"]["claims"] == [{"name": "gpus"}]


def test_worker_pods_pass_pod_security_restricted(operator, crd, ns):
    # The API server's PodSecurity admission enforces "restricted" in this namespace: every
    # worker pod (sidecar included) must pass it when RDMA is off; with RDMA (IPC_LOCK) it may not.
    crd.kubectl("label", "namespace", ns, "pod-security.kubernetes.io/enforce=restricted",
                "pod-security.kubernetes.io/enforce-version=latest")
    with FakeKubelet(crd, ns):
        apply(crd, ns, json.dumps({
            "apiVersion": "korovod.dev/v1alpha1", "kind": "HorovodJob",
            "metadata": {"name": "strict"},
            "spec": {"replicas": 2, "sidecar": {"image": "korovod/sidecar:test"},
                     "template": {"spec": {"containers": [RESTRICTED_TRAINER]}}}}))
        wait_phase(crd, ns, "strict", "Running", 60)
        assert len(pods(crd, ns, "strict")) == 2
        side = pods(crd, ns, "strict")[0]["spec"]["initContainers"][0]["securityContext"]
        assert side["seccompProfile"] == {"type": "RuntimeDefault"} and side["runAsGroup"] == 65532

        # The same job with RDMA asks for IPC_LOCK: refused by the namespace, and the job says so.
        apply(crd, ns, json.dumps({
            "apiVersion": "korovod.dev/v1alpha1", "kind": "HorovodJob",
            "metadata": {"name": "rdma"},
            "spec": {"replicas": 1, "sidecar": {"image": "korovod/sidecar:test"},
                     "worker": {"rdma": {"count": 1}},
                     "template": {"spec": {"containers": [RESTRICTED_TRAINER]}}}}))
        crd.wait_for(lambda: any("violates PodSecurity" in e.get("message", "")
                                 for e in events(crd, ns)),
                     "an event naming the PodSecurity violation", 30)
        assert not pods(crd, ns, "rdma")


def test_a_succeeded_rank_whose_pod_is_gone_is_not_restarted(operator, crd, ns):
    """A rank that succeeded keeps its end in status.finishedRanks: once its pod is gone (PodGC,
    a removed node) the job neither restarts nor recreates it, and succeeds with the others."""
    outcome = {"v": "run"}
    first = lambda p: p["metadata"]["labels"]["korovod.dev/replica-index"] == "0"  # noqa: E731
    with FakeKubelet(crd, ns, outcome=lambda p: "succeed" if first(p) else outcome["v"]):
        apply(crd, ns, job_doc("gc", replicas=2))
        crd.wait_for(lambda: get_job(crd, ns, "gc").get("status", {}).get("finishedRanks") == [
            {"ranks": "0", "state": "Succeeded", "reason": "Completed"}],
            "rank 0 recorded Succeeded", 60)
        code, body = crd.request("DELETE", "/api/v1/namespaces/%s/pods/gc-worker-0" % ns,
                                 {"gracePeriodSeconds": 0})
        assert code == 200, body
        crd.wait_for(lambda: [p["metadata"]["name"] for p in pods(crd, ns, "gc")] == [
            "gc-worker-1"], "gc-worker-0 gone", 30)
        outcome["v"] = "succeed"
        job = wait_phase(crd, ns, "gc", "Succeeded")
    st = job["status"]
    assert st["restartCount"] == 0 and st["epoch"] == 1, st
    assert st["succeededWorkers"] == 2, st
    assert st["finishedRanks"] == [{"ranks": "0-1", "state": "Succeeded", "reason": "Completed"}]
    # Never recreated: the only worker-0 the cluster saw was the first.
    assert [p["metadata"]["name"] for p in pods(crd, ns, "gc")] == ["gc-worker-1"]
    created = [e for e in events(crd, ns) if e["reason"] == "WorkersCreated"]
    assert sum(e.get("count", 1) for e in created) == 1, created


def test_a_repeated_failure_is_one_event_with_a_count(operator, crd, ns):
    """Worker pods that keep failing to be created (a namespace quota that is used up refuses
    every pod) are retried: each retry's FailedCreate for the same pod and cause is counted on one
    Event (client-go's aggregation), not a new Event per retry."""
    crd.kubectl("-n", ns, "create", "quota", "no-pods", "--hard=pods=1")
    # The resource quota controller's part (there is no controller-manager): the quota is used.
    path = "/api/v1/namespaces/%s/resourcequotas/no-pods" % ns
    quota = crd.get(path)
    quota["status"] = {"hard": {"pods": "1"}, "used": {"pods": "1"}}
    code, body = crd.request("PUT", path + "/status", quota)
    assert code == 200, body
    apply(crd, ns, job_doc("refused", replicas=1))

    def repeated():
        failed = [e for e in events(crd, ns) if e["reason"] == "FailedCreate"]
        return failed if any(e.get("count", 1) > 1 for e in failed) else None
    try:
        failed = crd.wait_for(repeated, "a FailedCreate event with count > 1", 90)
    except AssertionError as e:
        seen = [(x["reason"], x.get("count"), x["message"][:160]) for x in events(crd, ns)]
        raise AssertionError("%s; events: %s; pods: %s; operator log: %s" % (
            e, seen, [p["metadata"]["name"] for p in pods(crd, ns, "refused")],
            operator.log()[-2000:])) from e
    messages = [e["message"] for e in failed]
    assert len(messages) == len(set(messages)), messages  # one Event per distinct message
    assert any("refused-worker-0" in m and "quota" in m for m in messages), messages
    crd.kubectl("-n", ns, "delete", "hvdjob", "refused")  # it would retry for ever
