"""The worker NetworkPolicy (opt-in: --worker-network-policy, the chart's
workerNetworkPolicy.enabled) against a real kube-apiserver: korovod-operator creates one
NetworkPolicy "<job>-workers" per HorovodJob, owned by the job, selecting that job's worker pods
and admitting only the same job's workers and the operator's pods in its namespace; one deleted by
someone comes back; without the flag there is none. The test cluster runs no CNI plugin, so
nothing enforces the policy here: what is tested is the object the operator writes."""
import pytest

from fake_kubelet import FakeKubelet
from jobs import apply, crd, get_job, job_doc, ns, pods  # noqa: F401
from operator_process import OperatorProcess

OPERATOR_NS = "korovod-system"
LABELS = "app.kubernetes.io/name=korovod,app.kubernetes.io/instance=rel"


@pytest.fixture(scope="module")
def operator(crd, tmp_path_factory):
    logdir = str(tmp_path_factory.mktemp("operator"))
    process = OperatorProcess(crd, logdir, "operator-np", [
        "--worker-network-policy", "%s:%s" % (OPERATOR_NS, LABELS)]).start()
    crd.wait_for(lambda: process.http("/readyz")[0] == 200, "operator /readyz", 60)
    yield process
    assert process.stop() == 0, process.log()[-3000:]


def _policy(cluster, namespace, name):
    return cluster.get("/apis/networking.k8s.io/v1/namespaces/%s/networkpolicies/%s"
                       % (namespace, name))


def test_no_policy_without_the_flag(crd, ns, tmp_path):
    # First in the file: the module's operator with the flag (which would create one) is not
    # started yet.
    plain = OperatorProcess(crd, str(tmp_path), "operator-plain").start()
    try:
        crd.wait_for(lambda: plain.http("/readyz")[0] == 200, "operator /readyz", 60)
        with FakeKubelet(crd, ns, outcome=lambda p: "pending"):
            apply(crd, ns, job_doc("plain", replicas=1))
            crd.wait_for(lambda: len(pods(crd, ns, "plain")) == 1, "1 worker pod", 60)
        assert _policy(crd, ns, "plain-workers") is None
    finally:
        assert plain.stop() == 0, plain.log()[-3000:]


def test_each_job_gets_its_workers_policy(operator, crd, ns):
    with FakeKubelet(crd, ns, outcome=lambda p: "pending"):
        apply(crd, ns, job_doc("np", replicas=2))
        crd.wait_for(lambda: _policy(crd, ns, "np-workers") is not None,
                     "NetworkPolicy np-workers", 60)
        policy = _policy(crd, ns, "np-workers")
        job = get_job(crd, ns, "np")
        assert policy["metadata"]["ownerReferences"] == [{
            "apiVersion": "korovod.dev/v1alpha1", "kind": "HorovodJob", "name": "np",
            "uid": job["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}]
        assert policy["metadata"]["labels"]["korovod.dev/job-name"] == "np"
        workers = {"matchLabels": {"korovod.dev/job-name": "np", "korovod.dev/role": "worker"}}
        spec = policy["spec"]
        assert spec["podSelector"] == workers
        assert spec["policyTypes"] == ["Ingress"]
        assert spec["ingress"] == [{"from": [
            {"podSelector": workers},
            {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": OPERATOR_NS}},
             "podSelector": {"matchLabels": {"app.kubernetes.io/name": "korovod",
                                             "app.kubernetes.io/instance": "rel"}}}]}]
        # The policy selects exactly the job's worker pods, by the labels they carry.
        crd.wait_for(lambda: len(pods(crd, ns, "np")) == 2, "2 worker pods", 60)
        for p in pods(crd, ns, "np"):
            labels = p["metadata"]["labels"]
            assert all(labels.get(k) == v for k, v in workers["matchLabels"].items()), labels

        # Deleted by someone: the operator puts it back.
        uid = policy["metadata"]["uid"]
        code, body = crd.request("DELETE", "/apis/networking.k8s.io/v1/namespaces/%s/"
                                 "networkpolicies/np-workers" % ns)
        assert code == 200, body
        crd.wait_for(lambda: (_policy(crd, ns, "np-workers") or {}).get("metadata", {})
                     .get("uid") not in (None, uid), "np-workers re-created", 60)
        assert "HTTP 403" not in operator.log()
