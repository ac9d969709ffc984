"""korovod-operator under control-plane faults, against a real kube-apiserver + etcd (issue 31):

1. the leader SIGSTOPped in the middle of creating a 64-worker epoch, past its lease, then resumed:
   the standby takes over and finishes the epoch; the old leader, whose worker resumes in the
   middle of that reconcile, makes no write after the new Lease's acquireTime (read from the API
   server's audit log: each replica authenticates with its own client certificate) and exits 1;
2. the leader SIGKILLed in the middle of creating a 64-worker epoch: the standby finishes it, with
   exactly 64 pods of distinct indices, all owned by the job, the epoch counted once, no restart,
   and no pod created twice (the audit log's successful pod creates);
3. kube-apiserver killed and restarted in the middle of a 32-worker epoch's creates: the operator
   stays up and ready, reconnects its watches, finishes the job without duplicates and acts on a
   job created after;
4. the new leader's clock 2 h ahead (libfaketime): a finished job's ttlSecondsAfterFinished, a
   running job's activeDeadlineSeconds and a terminating pod's grace period are timed from when
   it observed them, so none of them ends early.

"In the middle" is made certain by a ResourceQuota of 40 pods: the leader is stopped or killed as
soon as its first pods appear, and cannot have created all 64 before. Each test runs on this
module's own API server (its audit policy names the two replicas' users, and test 3 restarts it).
Every wait has a deadline and names what it waited for."""
import datetime
import json
import os
import signal
import subprocess
import tempfile
import time
import uuid

import pytest

from cluster import Cluster, _kubeconfig, issue_cert, require_binaries, unavailable
from fake_kubelet import FakeKubelet
from jobs import CRD, apply, get_job, job_doc, pods, wait_phase
from operator_process import OperatorProcess

USERS = {"a": "korovod-chaos-a", "b": "korovod-chaos-b"}
LEASE = "/apis/coordination.k8s.io/v1/namespaces/%s/leases/korovod-operator"
WRITE_VERBS = {"create", "update", "patch", "delete", "deletecollection"}
FAKETIME_LIB = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1"
# Short leases keep each failover to a few seconds (the flags' defaults are 15/10/2).
ELECTION = ["--leader-election-lease-duration", "3", "--leader-election-renew-deadline", "2",
            "--leader-election-retry-period", "0.5"]


class ChaosCluster(Cluster):
    """A Cluster with one client certificate (and kubeconfig) per operator replica, in group
    system:masters, so that the audit log tells the replicas' requests apart by user."""

    def _issue_more_certs(self, pki):
        for key, user in USERS.items():
            issue_cert(pki, "chaos-" + key, "/CN=%s/O=system:masters" % user)

    def kubeconfig_of(self, key):
        path = os.path.join(self.dir, "chaos-%s.kubeconfig" % key)
        if not os.path.exists(path):
            pki = os.path.join(self.dir, "pki")
            with open(path, "w") as f:
                f.write(_kubeconfig(self.server, self.ca, {
                    "client-certificate": os.path.join(pki, "chaos-%s.crt" % key),
                    "client-key": os.path.join(pki, "chaos-%s.key" % key)}))
        return path


@pytest.fixture(scope="module")
def chaos():
    require_binaries()
    with tempfile.TemporaryDirectory(prefix="korovod-k8s-chaos-") as d:
        c = ChaosCluster(d, audit_users=list(USERS.values()))
        try:
            c.start()
            c.kubectl("apply", "-f", CRD)
            c.wait_established("crd/horovodjobs.korovod.dev")
            yield c
        finally:
            c.stop()


@pytest.fixture
def ns(chaos):
    name = "chaos-" + uuid.uuid4().hex[:8]
    chaos.kubectl("create", "namespace", name)
    chaos.wait_for(lambda: chaos.request("POST", "/api/v1/namespaces/%s/serviceaccounts" % name,
                                         {"metadata": {"name": "default"}})[0] in (201, 409),
                   "service account default in " + name, 30)
    return name


def replica(c, ns, tmp_path, key, extra=(), env_prefix=()):
    """Operator replica `key` ("a" or "b") with leader election in `ns`, authenticated as
    USERS[key]; env_prefix: argv put before the binary (e.g. env LD_PRELOAD=...)."""
    op = OperatorProcess(c, str(tmp_path), "operator-" + key,
                         ["--namespace", ns, "--leader-elect", *ELECTION, *extra],
                         kubeconfig=c.kubeconfig_of(key))
    op.argv = [*env_prefix, *op.argv]
    return op.start()


def lease_spec(c, ns):
    return (c.get(LEASE % ns) or {}).get("spec", {})


def wait_leader(c, ns, not_of=None, deadline=30):
    """The replica key ("a"/"b") holding the lease, once one (other than `not_of`) does."""
    def holder():
        h = lease_spec(c, ns).get("holderIdentity", "")
        return h if h.startswith("operator-") and h != "operator-%s" % not_of else None
    return c.wait_for(holder, "a leader other than %s" % not_of if not_of else "a leader",
                      deadline)[len("operator-"):]


def parse_time(rfc3339):
    """An RFC 3339 time (the Lease's microseconds or the audit log's) as an aware datetime."""
    s = rfc3339.rstrip("Z")
    if "." in s:
        head, frac = s.split(".")
        s = head + "." + (frac + "000000")[:6]
    else:
        s += ".000000"
    return datetime.datetime.strptime(s, "%Y-%m-%dT%H:%M:%S.%f").replace(
        tzinfo=datetime.timezone.utc)


def writes(c, key, since=None):
    """(time, verb, URI, code) of USERS[key]'s write requests the API server received after
    `since` (a datetime; None: all)."""
    out = []
    for e in c.audit_events(USERS[key]):
        if e["verb"] not in WRITE_VERBS:
            continue
        at = parse_time(e["requestReceivedTimestamp"])
        if since is None or at > since:
            out.append((e["requestReceivedTimestamp"], e["verb"], e["requestURI"],
                        e.get("responseStatus", {}).get("code")))
    return out


def pod_creates(c, ns):
    """Successful pod creates in `ns` by either replica, from the audit log."""
    path = "/api/v1/namespaces/%s/pods" % ns
    return [w for k in USERS for w in writes(c, k)
            if w[1] == "create" and w[2].split("?")[0] == path and w[3] == 201]


def check_one_world(c, ns, name, replicas):
    """The job's pods are exactly `replicas` workers of epoch 1 with distinct indices, all
    controlled by the job, and the job ran its first epoch without a restart."""
    job = get_job(c, ns, name)
    got = pods(c, ns, name)
    indices = sorted(int(p["metadata"]["labels"]["korovod.dev/replica-index"]) for p in got)
    assert indices == list(range(replicas)), "pod indices %s, want 0..%d" % (indices, replicas - 1)
    epochs = {p["metadata"]["labels"]["korovod.dev/epoch"] for p in got}
    assert epochs == {"1"}, "pods of epochs %s, want only 1" % epochs
    owners = {(r["uid"], r.get("controller")) for p in got
              for r in p["metadata"].get("ownerReferences", [])}
    assert owners == {(job["metadata"]["uid"], True)}, "owners %s, want the job %s" % (
        owners, job["metadata"]["uid"])
    status = job["status"]
    assert status.get("epoch") == 1, "status.epoch %s, want 1: %s" % (status.get("epoch"),
                                                                       json.dumps(status)[:2000])
    assert status.get("restartCount", 0) == 0, json.dumps(status)[:2000]


def cap_pods(c, ns, limit):
    """A ResourceQuota of `limit` pods in `ns`, with the status the quota controller (not running
    here) would write, so that admission counts against it at once. Returns its path."""
    path = "/api/v1/namespaces/%s/resourcequotas" % ns
    code, quota = c.request("POST", path, {"apiVersion": "v1", "kind": "ResourceQuota",
                                           "metadata": {"name": "cap"},
                                           "spec": {"hard": {"pods": str(limit)}}})
    assert code == 201, quota
    quota["status"] = {"hard": {"pods": str(limit)}, "used": {"pods": "0"}}
    code, body = c.request("PUT", path + "/cap/status", quota)
    assert code == 200, body
    return path + "/cap"


def late_writes(c, key, since):
    """USERS[key]'s write requests after `since`, but a Lease update refused with 409: a
    replica paused between its GET and PUT of the Lease sends a stale renewal, which the
    resourceVersion it carries fences (the Lease's own protection)."""
    lease = "/apis/coordination.k8s.io/v1/namespaces/"
    return [w for w in writes(c, key, since)
            if not (w[1] == "update" and w[2].startswith(lease) and w[3] == 409)]


def start_wide_job(c, ns, ops, name, replicas, cap):
    """Applies a `replicas`-worker job under a quota of `cap` pods and returns (leader key, quota
    path) once the leader's first pods exist: the leader is then in the middle of the epoch's
    creates, and the quota keeps it there (it cannot create more than `cap`)."""
    old = wait_leader(c, ns)
    c.wait_for(lambda: ops[old].http("/readyz")[0] == 200, "leader %s ready" % old, 30)
    quota = cap_pods(c, ns, cap)
    apply(c, ns, job_doc(name, replicas=replicas))
    c.wait_for(lambda: len(pods(c, ns, name)) or None, "the leader's first pods of job " + name,
               30, interval=0.02)
    return old, quota


def test_leader_sigstopped_past_its_lease_writes_nothing_after_the_takeover(chaos, ns, tmp_path):
    c = chaos
    replicas, cap = 64, 40
    # One worker: one reconcile in flight when the leader is frozen (below).
    ops = {k: replica(c, ns, tmp_path, k, ["--workers", "1"]) for k in USERS}
    try:
        with FakeKubelet(c, ns) as kubelet:
            old, quota = start_wide_job(c, ns, ops, "wide", replicas, cap)
            ops[old].proc.send_signal(signal.SIGSTOP)
            new = "b" if old == "a" else "a"
            try:
                at_stop = len(pods(c, ns, "wide"))
                assert 0 < at_stop <= cap, at_stop
                assert wait_leader(c, ns, not_of=old, deadline=30) == new
                acquired = parse_time(lease_spec(c, ns)["acquireTime"])
                code, body = c.request("DELETE", quota)
                assert code == 200, body
                # The new leader finishes the epoch the frozen one was creating.
                wait_phase(c, ns, "wide", "Running", 90)
            finally:
                ops[old].proc.send_signal(signal.SIGCONT)
            # Resumed, the old leader's worker is still in that epoch's reconcile: its next
            # creates, events and status write would race the new leader's. It finds its lease
            # lost and exits (so that a fresh replica stands by).
            try:
                code = ops[old].proc.wait(30)
            except subprocess.TimeoutExpired:
                code = None
            assert code == 1, "old leader %s: exit %s, want 1; log: %s" % (
                old, code, ops[old].log()[-3000:])
            assert "lost the lease" in ops[old].log(), ops[old].log()[-3000:]
            # Requests the frozen worker had already begun (past the fence, their TLS handshake
            # under way) reach the API server once it resumes: nothing on the client can recall
            # them, and Kubernetes has no fencing token for pod writes. Pod creates go out in
            # slow-start batches (at most 16 at once), so that is one batch of pod creates and at
            # most one other request; every later one is refused at the client.
            late = late_writes(c, old, acquired)
            pod_path = "/api/v1/namespaces/%s/pods" % ns
            creates = [w for w in late if w[1] == "create" and w[2].split("?")[0] == pod_path]
            assert len(creates) <= 16 and len(late) - len(creates) <= 1, (
                "the deposed leader %s sent %d writes after %s took the lease at %s (at most the "
                "ones in flight when it was frozen may arrive: a batch of pod creates and one "
                "other): %s" % (USERS[old], len(late), USERS[new], acquired, late[:20]))
            # The new leader goes on alone: one world, nothing created twice.
            check_one_world(c, ns, "wide", replicas)
            creates = pod_creates(c, ns)
            assert len(creates) == replicas, "%d pods created (want %d; %d at the stop)" % (
                len(creates), replicas, at_stop)
            apply(c, ns, job_doc("after", replicas=2))
            wait_phase(c, ns, "after", "Running")
            check_one_world(c, ns, "after", 2)
            assert len(kubelet.seen) == replicas + 2, "the kubelet saw %d pods" % len(kubelet.seen)
            assert ops[new].proc.poll() is None, ops[new].log()[-3000:]
            print("stopped the leader with %d of %d pods created; %d write(s) in flight then "
                  "arrived after the takeover" % (at_stop, replicas, len(late)))
    finally:
        for op in ops.values():
            op.stop()


def test_leader_killed_mid_epoch_creation_standby_finishes_it(chaos, ns, tmp_path):
    c = chaos
    replicas, cap = 64, 40
    ops = {k: replica(c, ns, tmp_path, k) for k in USERS}
    try:
        with FakeKubelet(c, ns) as kubelet:
            # The quota makes "in the middle" certain: the leader is killed as soon as its first
            # pods appear, and if it is quicker than that, it cannot get past 40 of the 64.
            old, quota = start_wide_job(c, ns, ops, "wide", replicas, cap)
            ops[old].proc.send_signal(signal.SIGKILL)
            ops[old].proc.wait(10)
            at_kill = len(pods(c, ns, "wide"))
            assert 0 < at_kill <= cap, at_kill
            code, body = c.request("DELETE", quota)
            assert code == 200, body
            new = wait_leader(c, ns, not_of=old)
            wait_phase(c, ns, "wide", "Running", 90)
            check_one_world(c, ns, "wide", replicas)
            # Every pod object there ever was (uids, as the kubelet saw them): none twice.
            assert len(kubelet.seen) == replicas, "the kubelet saw %d pods" % len(kubelet.seen)
            # The audit log agrees, except that a create in flight when its client was killed
            # (pods go out in batches of up to 16) can be stored without a 201 in the log (seen:
            # 62 of 64).
            creates = pod_creates(c, ns)
            assert len(creates) <= replicas, "%d pods created (want %d; %d at the kill): %s" % (
                len(creates), replicas, at_kill, creates)
            assert ops[new].proc.poll() is None, ops[new].log()[-3000:]
            print("killed the leader with %d of %d pods created" % (at_kill, replicas))
    finally:
        for op in ops.values():
            op.stop()


def test_apiserver_restart_mid_reconcile(chaos, ns, tmp_path):
    c = chaos
    replicas = 32
    op = OperatorProcess(c, str(tmp_path), "operator-alone", ["--namespace", ns],
                         kubeconfig=c.kubeconfig_of("a")).start()
    try:
        c.wait_for(lambda: op.http("/readyz")[0] == 200, "operator ready", 30)
        with FakeKubelet(c, ns) as kubelet:
            apply(c, ns, job_doc("mid", replicas=replicas))
            c.wait_for(lambda: len(pods(c, ns, "mid")) or None, "the first pods of job mid", 30,
                       interval=0.02)
            c.restart_apiserver(kill=True)
            wait_phase(c, ns, "mid", "Running", 90)
            # Created after the restart: only a watch that reconnected (or a re-list) sees it.
            apply(c, ns, job_doc("after", replicas=2))
            wait_phase(c, ns, "after", "Running", 60)
            check_one_world(c, ns, "mid", replicas)
            check_one_world(c, ns, "after", 2)
            # Every pod object there ever was (uids, as the kubelet saw them): none created twice.
            assert len(kubelet.seen) == replicas + 2, "the kubelet saw %d pods" % len(kubelet.seen)
            # The audit log agrees, but creates in flight when kube-apiserver was killed (a
            # slow-start batch, up to 16) can be stored in etcd without their audit entries
            # (written when the response completes): seen 33 and fewer of 34.
            creates = pod_creates(c, ns)
            assert len(creates) <= replicas + 2, creates
        assert op.proc.poll() is None, "the operator exited (%s) over the restart: %s" % (
            op.proc.returncode, op.log()[-3000:])
        assert op.http("/readyz")[0] == 200, op.http("/readyz")
    finally:
        code = op.stop()
    assert code == 0, op.log()[-3000:]


class HoldingKubelet(FakeKubelet):
    """A FakeKubelet that never finishes deleting the pods `hold(pod)` names (their containers
    go on running: a kubelet still within the grace period)."""

    def __init__(self, cluster, namespace, outcome, hold):
        super().__init__(cluster, namespace, outcome=outcome)
        self.hold = hold

    def finish_deletion(self, pod):
        if not self.hold(pod):
            super().finish_deletion(pod)


def test_new_leader_clock_two_hours_ahead_ends_nothing_early(chaos, ns, tmp_path):
    if not os.path.exists(FAKETIME_LIB):
        unavailable("libfaketime missing (%s): scripts/install-deps.sh --k8s" % FAKETIME_LIB)
    c = chaos
    a = replica(c, ns, tmp_path, "a")
    b = None
    try:
        assert wait_leader(c, ns) == "a"
        b = replica(c, ns, tmp_path, "b",
                    env_prefix=["env", "LD_PRELOAD=" + FAKETIME_LIB, "FAKETIME=+2h",
                               # Wall clock only, as on a node whose clock is off (a monotonic
                               # clock has no absolute value to be wrong).
                               "FAKETIME_DONT_FAKE_MONOTONIC=1"])

        def outcome(pod):
            return "succeed" if pod["metadata"]["labels"]["korovod.dev/job-name"] == "ttl" \
                else "run"

        def hold(pod):
            return pod["metadata"]["labels"]["korovod.dev/job-name"] == "grace"

        with HoldingKubelet(c, ns, outcome, hold):
            apply(c, ns, job_doc("ttl", replicas=1, runPolicy={"ttlSecondsAfterFinished": 600}))
            apply(c, ns, job_doc("deadline", replicas=1,
                                 runPolicy={"activeDeadlineSeconds": 600}))
            apply(c, ns, job_doc("grace", replicas=1))
            wait_phase(c, ns, "ttl", "Succeeded")
            wait_phase(c, ns, "deadline", "Running")
            wait_phase(c, ns, "grace", "Running")
            # The grace job's worker terminates with 600 s of grace: the job restarts its epoch
            # and waits for the pod to go.
            victim = pods(c, ns, "grace")[0]["metadata"]["name"]
            code, body = c.request("DELETE", "/api/v1/namespaces/%s/pods/%s" % (ns, victim),
                                   {"kind": "DeleteOptions", "apiVersion": "v1",
                                    "gracePeriodSeconds": 600})
            assert code == 200, body
            c.wait_for(lambda: (get_job(c, ns, "grace") or {}).get("status", {}).get(
                "epoch") == 2, "job grace restarting (epoch 2) over its terminating worker", 30)
            assert wait_leader(c, ns) == "a"

            a.stop(signal.SIGKILL)
            assert wait_leader(c, ns, not_of="a") == "b"
            skewed = parse_time(lease_spec(c, ns)["renewTime"]) - datetime.datetime.now(
                datetime.timezone.utc)
            assert skewed > datetime.timedelta(hours=1, minutes=50), (
                "libfaketime did not move the new leader's clock: renewTime %s" % skewed)
            # Proof that b reconciles: a job created now runs. b queued every job it knew when it
            # started leading, so the three above were reconciled before the probe's first; the
            # actions of those reconciles (a delete, a status write) are done by then. A few more
            # seconds let the requeues and the kubelet's writes reconcile them again.
            apply(c, ns, job_doc("probe", replicas=1))
            wait_phase(c, ns, "probe", "Running", 60)
            time.sleep(3)
            assert get_job(c, ns, "ttl") is not None, (
                "job ttl (ttlSecondsAfterFinished 600) deleted at once by the leader whose clock "
                "is 2 h ahead: %s" % b.log()[-3000:])
            deadline = get_job(c, ns, "deadline")["status"]
            assert deadline["phase"] == "Running", (
                "job deadline (activeDeadlineSeconds 600) %s under the leader 2 h ahead: %s"
                % (deadline["phase"], json.dumps(deadline.get("conditions"))))
            held = c.get("/api/v1/namespaces/%s/pods/%s" % (ns, victim))
            assert held is not None and held["metadata"].get("deletionTimestamp"), (
                "pod %s (600 s of grace) force-deleted by the leader 2 h ahead: %s"
                % (victim, b.log()[-3000:]))
            assert b.proc.poll() is None, b.log()[-3000:]
    finally:
        a.stop()
        if b is not None:
            b.stop()
