"""korovod-operator replicas against a real kube-apiserver: a restarted operator adopts what
exists (no duplicates), two replicas elect one leader on a Lease and the standby takes over.
Separate from test_operator.py so that no other operator runs beside these."""
import signal
import time

from fake_kubelet import FakeKubelet
from jobs import apply, crd, get_job, job_doc, ns, pods, wait_phase  # noqa: F401
from operator_process import OperatorProcess


def test_operator_restart_mid_job_creates_no_duplicates(crd, ns, tmp_path):
    kubelet = FakeKubelet(crd, ns)
    with kubelet:
        operator = OperatorProcess(crd, str(tmp_path), "operator-restart").start()
        try:
            apply(crd, ns, job_doc("steady", replicas=3))
            wait_phase(crd, ns, "steady", "Running")
        finally:
            operator.stop(signal.SIGKILL)
        before = {p["metadata"]["uid"] for p in pods(crd, ns, "steady")}
        operator = OperatorProcess(crd, str(tmp_path), "operator-restart-2").start()
        try:
            crd.wait_for(lambda: operator.http("/readyz")[0] == 200, "restarted operator ready", 60)
            time.sleep(2)
            after = {p["metadata"]["uid"] for p in pods(crd, ns, "steady")}
            assert after == before
            assert len(kubelet.seen) == 3
            assert get_job(crd, ns, "steady")["status"]["phase"] == "Running"
        finally:
            operator.stop()


def test_two_replicas_one_leader_and_failover(crd, ns, tmp_path):
    args = ["--leader-elect", "--leader-election-namespace", ns,
            "--leader-election-lease-duration", "3", "--leader-election-renew-deadline", "2",
            "--leader-election-retry-period", "0.5"]
    a = OperatorProcess(crd, str(tmp_path), "operator-a", args).start()
    b = OperatorProcess(crd, str(tmp_path), "operator-b", args).start()
    lease_path = "/apis/coordination.k8s.io/v1/namespaces/%s/leases/korovod-operator" % ns
    try:
        lease = crd.wait_for(lambda: (crd.get(lease_path) or {}).get("spec", {}).get(
            "holderIdentity"), "a leader", 30)
        leader, standby = (a, b) if lease == "operator-a" else (b, a)
        with FakeKubelet(crd, ns):
            apply(crd, ns, job_doc("ha", replicas=1))
            wait_phase(crd, ns, "ha", "Running")
            assert standby.metric("korovod_operator_leader") == 0
            assert leader.metric("korovod_operator_leader") == 1
            leader.stop(signal.SIGKILL)
            standby_name = "operator-b" if leader is a else "operator-a"
            crd.wait_for(lambda: crd.get(lease_path)["spec"]["holderIdentity"] == standby_name,
                         "failover to the standby", 30)
            crd.kubectl("-n", ns, "patch", "hvdjob", "ha", "--type=merge", "-p",
                        '{"spec":{"runPolicy":{"suspend":true}}}')
            wait_phase(crd, ns, "ha", "Suspended")
    finally:
        a.stop()
        b.stop()
