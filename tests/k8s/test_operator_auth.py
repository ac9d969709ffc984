"""korovod-operator authenticating with a client certificate under RBAC, against a real
kube-apiserver: without permissions it is not ready and its log names the 403 and the resource;
with exactly the rules of docs/operator.md it runs a job through to its TTL deletion (RBAC denies
everything else, so a call the rules miss would fail the job)."""
import json

from fake_kubelet import FakeKubelet
from jobs import apply, crd, get_job, job_doc, ns, wait_phase  # noqa: F401
from operator_process import OperatorProcess

# The operator's least-privilege rules (docs/operator.md, "Running the operator").
CLUSTER_ROLE = {
    "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
    "metadata": {"name": "korovod-operator-test"},
    "rules": [
        {"apiGroups": ["korovod.dev"], "resources": ["horovodjobs"],
         "verbs": ["get", "list", "watch", "delete"]},
        {"apiGroups": ["korovod.dev"], "resources": ["horovodjobs/status"], "verbs": ["update"]},
        {"apiGroups": [""], "resources": ["pods", "services", "configmaps", "secrets"],
         "verbs": ["get", "list", "watch", "create", "delete"]},
        {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
         "verbs": ["get", "create", "update"]},
        {"apiGroups": ["scheduling.volcano.sh", "scheduling.x-k8s.io"],
         "resources": ["podgroups"], "verbs": ["get", "create", "delete"]},
    ],
}
BINDING = {
    "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
    "metadata": {"name": "korovod-operator-test"},
    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                "name": "korovod-operator-test"},
    # The CN of the client certificate cluster.py issues.
    "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                  "name": "korovod-operator-cert"}],
}


def test_client_certificate_and_least_privilege_rbac(crd, ns, tmp_path):
    op = OperatorProcess(crd, str(tmp_path), "op-cert",
                         ["--leader-elect", "--leader-election-namespace", ns],
                         kubeconfig=crd.cert_kubeconfig).start()
    try:
        crd.wait_for(lambda: "HTTP 403" in op.log() and "horovodjobs" in op.log(),
                     "a 403 on horovodjobs in the operator log", 30)
        code, body = op.http("/readyz")
        assert code == 503 and "not synced" in body, (code, body)

        crd.kubectl("apply", "-f", "-", input=json.dumps(CLUSTER_ROLE))
        crd.kubectl("apply", "-f", "-", input=json.dumps(BINDING))
        crd.wait_for(lambda: op.http("/readyz")[0] == 200, "ready once RBAC allows it", 90)
        outcome = {"v": "run"}
        with FakeKubelet(crd, ns, outcome=lambda p: outcome["v"]):
            apply(crd, ns, job_doc("rbac", replicas=2,
                                   runPolicy={"ttlSecondsAfterFinished": 1}))
            wait_phase(crd, ns, "rbac", "Running", 60)
            outcome["v"] = "succeed"
            wait_phase(crd, ns, "rbac", "Succeeded", 60)
            crd.wait_for(lambda: get_job(crd, ns, "rbac") is None, "TTL deletion", 30)
        events = crd.get("/api/v1/namespaces/%s/events" % ns)["items"]
        assert any(e["source"].get("component") == "korovod-operator" for e in events), events
        lease = crd.get("/apis/coordination.k8s.io/v1/namespaces/%s/leases/korovod-operator" % ns)
        assert lease["spec"]["holderIdentity"] == "op-cert"
        # "HTTP 403", not "403": a timestamp such as 15:24:22.403Z is no denial.
        assert "HTTP 403" not in op.log().split("caches synced")[-1], op.log()[-3000:]
        assert "leading (Lease %s/korovod-operator)" % ns in op.log(), op.log()[-3000:]
    finally:
        assert op.stop() == 0, op.log()[-3000:]
        crd.kubectl("delete", "clusterrolebinding,clusterrole", "korovod-operator-test",
                    "--ignore-not-found")
