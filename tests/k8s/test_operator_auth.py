"""korovod-operator authenticating with a client certificate under RBAC, against a real
kube-apiserver: without permissions it is not ready and its log names the 403 and the resource;
with exactly the Helm chart's rules (helm/korovod: the ClusterRole and the leader-election Role,
from `helm template`, bound to the certificate's user instead of the chart's ServiceAccount) it
runs a job through to its TTL deletion (RBAC denies everything else, so a call the rules miss
would fail the job). The API server's audit log then shows least privilege both ways: every call
the operator made is granted by the chart, and every grant of the chart was used (podgroups
aside: only gang jobs create them)."""
import json
import os
import re

from fake_kubelet import FakeKubelet
from helm_chart import by_kind_name, template
from jobs import apply, crd, get_job, job_doc, ns, wait_phase  # noqa: F401
from operator_process import OperatorProcess

# The CN of the client certificate cluster.py issues.
USER = "korovod-operator-cert"
DOCS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                    "docs", "operator.md")


def chart_rbac(ns, extra=()):
    """The chart's ClusterRole, leader-election Role (in `ns`, the release namespace and the
    Lease's) and their bindings, with the certificate's user as the only subject."""
    objs = by_kind_name(template(namespace=ns, release="auth", extra=extra))
    docs = [objs[("ClusterRole", "auth-korovod")], objs[("ClusterRoleBinding", "auth-korovod")],
            objs[("Role", "auth-korovod-leader-election")],
            objs[("RoleBinding", "auth-korovod-leader-election")]]
    for d in docs:
        if d["kind"].endswith("Binding"):
            d["subjects"] = [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                              "name": USER}]
    return docs


def grants(rules):
    """(verb, apiGroup, resource) of each rule, expanded."""
    return {(v, g, r) for rule in rules for g in rule["apiGroups"] for r in rule["resources"]
            for v in rule["verbs"]}


def calls(events):
    """(verb, apiGroup, resource[/subresource]) of each audited resource request."""
    out = set()
    for e in events:
        ref = e.get("objectRef")
        if not ref or "resource" not in ref:
            continue  # discovery and other non-resource URLs (system:discovery grants them)
        res = ref["resource"] + ("/" + ref["subresource"] if ref.get("subresource") else "")
        out.add((e["verb"], ref.get("apiGroup", ""), res))
    return out


def docs_rbac_table():
    """The RBAC table of docs/operator.md as grants."""
    rows = set()
    with open(DOCS) as f:
        text = f.read()
    table = text[text.index("| API group | resources | verbs |"):].split("\n\n")[0]
    for line in table.splitlines()[2:]:
        group, resources, verbs = [c.strip() for c in line.strip("|").split("|")]
        groups = ["" if g == "core" else g.strip("`") for g in group.split(", ")]
        resources = [r.strip("` ") for r in resources.split(",")]
        verbs = [v.strip() for v in re.sub(r"\(.*?\)", "", verbs).split(",")]
        rows |= {(v, g, r) for g in groups for r in resources for v in verbs}
    return rows


def test_client_certificate_and_least_privilege_rbac(crd, ns, tmp_path):
    operator = OperatorProcess(crd, str(tmp_path), "operator-cert",
                               ["--leader-elect", "--leader-election-namespace", ns],
                               kubeconfig=crd.cert_kubeconfig).start()
    try:
        crd.wait_for(lambda: "HTTP 403" in operator.log() and "horovodjobs" in operator.log(),
                     "a 403 on horovodjobs in the operator log", 30)
        code, body = operator.http("/readyz")
        assert code == 503 and "not synced" in body, (code, body)

        rbac = chart_rbac(ns)
        for doc in rbac:
            crd.kubectl("apply", "-f", "-", input=json.dumps(doc))
        crd.wait_for(lambda: operator.http("/readyz")[0] == 200, "ready once RBAC allows it", 90)
        ready_at = len(crd.audit_events(USER))
        outcome = {"v": "run"}

        def kubelet(pod):
            # Worker 1 of the first epoch fails: a restart deletes the pods and the old epoch's
            # ConfigMap (the delete grants), then the second epoch runs and succeeds.
            labels = pod["metadata"]["labels"]
            if labels["korovod.dev/epoch"] == "1" and labels["korovod.dev/replica-index"] == "1":
                return "fail:1"
            return outcome["v"]

        with FakeKubelet(crd, ns, outcome=kubelet):
            apply(crd, ns, job_doc("rbac", replicas=2,
                                   runPolicy={"ttlSecondsAfterFinished": 5, "backoffLimit": 1}))
            crd.wait_for(lambda: (get_job(crd, ns, "rbac") or {}).get("status", {}).get("epoch")
                         == 2, "the restart into epoch 2", 60)
            wait_phase(crd, ns, "rbac", "Running", 60)
            outcome["v"] = "succeed"
            wait_phase(crd, ns, "rbac", "Succeeded", 60)
            crd.wait_for(lambda: get_job(crd, ns, "rbac") is None, "TTL deletion", 30)
        events = crd.get("/api/v1/namespaces/%s/events" % ns)["items"]
        assert any(e["source"].get("component") == "korovod-operator" for e in events), events
        lease = crd.get("/apis/coordination.k8s.io/v1/namespaces/%s/leases/korovod-operator" % ns)
        assert lease["spec"]["holderIdentity"] == "operator-cert"
        # "HTTP 403", not "403": a timestamp such as 15:24:22.403Z is no denial.
        assert "HTTP 403" not in operator.log().split("caches synced")[-1], operator.log()[-3000:]
        assert "leading (Lease %s/korovod-operator)" % ns in operator.log(), operator.log()[-3000:]
    finally:
        assert operator.stop() == 0, operator.log()[-3000:]
        crd.kubectl("delete", "clusterrolebinding,clusterrole", "auth-korovod",
                    "--ignore-not-found")

    # Least privilege, from the API server's audit log of the certificate's user.
    events = crd.audit_events(USER)
    made = calls(events)
    granted = grants(rbac[0]["rules"]) | grants(rbac[2]["rules"])
    assert made <= granted, "calls the chart does not grant: %s" % sorted(made - granted)
    # podgroups: gang jobs only; horovodjobs/finalizers: an authorization check of admission
    # (OwnerReferencesPermissionEnforcement, on in conftest's cluster), never a request.
    # Kueue's (kueue.x-k8s.io, priorityclasses): queued jobs only, exercised in test_kueue.py.
    # nodes: watched only while an elastic job exists (job_controller_nodes_test.cc); this job
    # is static, so the operator must not have listed them at all.
    # Event patches: only when an event repeats, which this job's run does not make happen.
    assert ("list", "", "nodes") not in made, "nodes listed without an elastic job"
    unused = {g for g in granted - made
              if g[2] not in ("podgroups", "nodes")
              and g[1] not in ("kueue.x-k8s.io", "scheduling.k8s.io")
              and g != ("update", "korovod.dev", "horovodjobs/finalizers")
              and g != ("patch", "", "events")  # a repeated event only (test_operator.py)
              # A job is read by name only to recompute its status after a 409 (reconciles read
              # the watch cache): test_operator.py's conflicting writers.
              and g != ("get", "korovod.dev", "horovodjobs")}
    assert not unused, "grants of the chart the operator never used: %s" % sorted(unused)
    denied = [(e["verb"], e["requestURI"]) for e in events[ready_at:]
              if e.get("responseStatus", {}).get("code") == 403]
    assert not denied, "refused once ready: %s" % denied


def test_docs_rbac_table_matches_chart():
    """docs/operator.md's RBAC table lists exactly the chart's rules (both namespaces' Roles),
    opt-in rules included (the worker NetworkPolicy's)."""
    rbac = chart_rbac("default", extra=["--set", "workerNetworkPolicy.enabled=true"])
    assert docs_rbac_table() == grants(rbac[0]["rules"]) | grants(rbac[2]["rules"])
