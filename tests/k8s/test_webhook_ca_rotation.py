"""The webhook CA rotation as docs/install.md documents it (delete the CA Secret, restart the
operator), with several replicas, against a real kube-apiserver that calls each replica (issue
31). Two replicas run; the Secret is deleted and a third replica starts, as a rolling restart's
first new pod does, and creates a new CA. Throughout, a pod created through each replica's
webhook (failurePolicy Fail) must be admitted: the API server must trust every replica's serving
certificate, old CA or new. The replicas must not rewrite each other's caBundle: it goes from the
old CA, to both, to the new one alone, and then stays. Before, each replica kept setting the
caBundle to the CA it had loaded at its start, so they overwrote each other every period and the
API server refused one side's certificate in turn."""
import base64
import time
import uuid

from cluster import free_port
from jobs import crd, ns  # noqa: F401
from operator_process import OperatorProcess

PERIOD_S = 0.5  # --webhook-ca-bundle-check-period


def _configuration(name, ports):
    """One webhook per replica (a pod labelled rotation-replica=<r> goes to replica r), each by URL:
    the test cluster routes no Services. No caBundle: the operators set it."""
    hooks = []
    for replica, port in ports.items():
        hooks.append({
            "name": "%s.rotation.korovod.dev" % replica,
            "clientConfig": {"url": "https://localhost:%d/inject" % port},
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                       "resources": ["pods"], "scope": "Namespaced"}],
            "objectSelector": {"matchLabels": {"rotation-replica": replica}},
            "failurePolicy": "Fail", "sideEffects": "None", "timeoutSeconds": 10,
            "admissionReviewVersions": ["v1"]})
    return {"apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration", "metadata": {"name": name},
            "webhooks": hooks}


def _bundle(cluster, name):
    """The caBundle's certificates (PEM bodies, in order) and the configuration's generation;
    every webhook must hold the same bundle."""
    config = cluster.get("/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/"
                         + name)
    bundles = {h["clientConfig"].get("caBundle", "") for h in config["webhooks"]}
    assert len(bundles) == 1, bundles
    pem = base64.b64decode(bundles.pop()).decode()
    certs = ["".join(block.split("-----END CERTIFICATE-----")[0].split())
             for block in pem.split("-----BEGIN CERTIFICATE-----")[1:]]
    return certs, config["metadata"]["generation"]


def _ca_of(cluster, secret_path):
    secret = cluster.get(secret_path)
    if secret is None:
        return None
    pem = base64.b64decode(secret["data"]["ca.crt"]).decode()
    return "".join(pem.split("-----BEGIN CERTIFICATE-----")[1]
                   .split("-----END CERTIFICATE-----")[0].split())


def _admitted(cluster, namespace, replica):
    """Creates a pod through `replica`'s webhook; returns (admitted, the API server's answer)."""
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "p-%s-%s" % (replica, uuid.uuid4().hex[:8]),
                        "labels": {"rotation-replica": replica}},
           "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
    code, body = cluster.request("POST", "/api/v1/namespaces/%s/pods" % namespace, pod)
    return code == 201, body


def test_replicas_keep_both_cas_through_a_rotation_and_never_undo_each_other(crd, ns, tmp_path):
    rel_ns = "korovod-rot-" + uuid.uuid4().hex[:6]
    crd.kubectl("create", "namespace", rel_ns)
    name = "rot-" + uuid.uuid4().hex[:6]
    ports = {r: free_port() for r in ("a", "b", "c")}
    code, body = crd.request("POST", "/apis/admissionregistration.k8s.io/v1/"
                             "mutatingwebhookconfigurations", _configuration(name, ports))
    assert code == 201, body
    secret_path = "/api/v1/namespaces/%s/secrets/webhook-cert" % rel_ns
    operators = {}

    def start(replica):
        cert_dir = tmp_path / ("tls-" + replica)
        cert_dir.mkdir()
        op = OperatorProcess(crd, str(tmp_path), "operator-" + replica, [
            "--leader-elect", "--leader-election-namespace", rel_ns,
            "--webhook-bind-address", "127.0.0.1:%d" % ports[replica],
            "--webhook-cert-dir", str(cert_dir),
            "--webhook-cert-secret", rel_ns + "/webhook-cert",
            "--webhook-dns-names", "localhost",
            "--webhook-configuration", name,
            "--webhook-ca-bundle-check-period", str(PERIOD_S)]).start()
        operators[replica] = op
        crd.wait_for(lambda: "serving POST /inject" in op.log() or op.proc.poll() is not None,
                     "replica %s serving the webhook" % replica, 60)
        assert op.proc.poll() is None, op.log()[-3000:]

    def refusals(replicas):
        out = []
        for r in replicas:
            ok, answer = _admitted(crd, ns, r)
            if not ok:
                out.append((r, str(answer)[:300]))
        return out

    try:
        start("a")
        start("b")
        old_ca = _ca_of(crd, secret_path)
        assert _bundle(crd, name)[0] == [old_ca]
        assert refusals("ab") == []

        # The documented rotation: delete the Secret, restart. The rollout's first new pod (c)
        # creates the new CA while a and b still serve certificates of the old one.
        code, body = crd.request("DELETE", secret_path)
        assert code == 200, body
        start("c")
        new_ca = _ca_of(crd, secret_path)
        assert new_ca and new_ca != old_ca
        # A pod through every replica, every half period, for 16 periods: the old replicas'
        # keepers switch to the new certificate and the new one retires the old CA meanwhile.
        seen, refused = [], []
        end = time.monotonic() + 16 * PERIOD_S
        while time.monotonic() < end:
            certs, generation = _bundle(crd, name)
            if not seen or seen[-1][0] != certs:
                seen.append((certs, generation))
            refused += refusals("abc")
            time.sleep(PERIOD_S / 2)
        logs = {r: op.log()[-2000:] for r, op in operators.items()}
        assert refused == [], (refused, seen, logs)
        # Old, both (new first), new alone: the bundles seen are a sub-sequence of that, and
        # the configuration was written at most twice more after c's start (no back and forth).
        allowed = [[old_ca], [new_ca, old_ca], [new_ca]]
        assert all(certs in allowed for certs, _ in seen), (seen, logs)
        order = [allowed.index(certs) for certs, _ in seen]
        assert order == sorted(order), (seen, logs)
        assert seen[-1][0] == [new_ca], (seen, logs)
        generation = _bundle(crd, name)[1]
        time.sleep(4 * PERIOD_S)
        assert _bundle(crd, name) == ([new_ca], generation), "the caBundle moved again"
        for r in "ab":
            assert "holds a new CA (rotated)" in operators[r].log(), operators[r].log()[-2000:]
    finally:
        for op in operators.values():
            op.stop()
        crd.request("DELETE", "/apis/admissionregistration.k8s.io/v1/"
                    "mutatingwebhookconfigurations/" + name)
