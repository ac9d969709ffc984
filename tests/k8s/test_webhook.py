"""The sidecar injection webhook, called by a real kube-apiserver over HTTPS: the
MutatingWebhookConfiguration that helm/korovod renders (a pod-label entry and a namespace-label
entry) points at korovod-operator's --webhook-bind-address. Pods of a StatefulSet
that opt in are stored with the sidecar and the trainer's rendezvous env, and NodeAgent trains the
digits example with them; pods that cannot be ranked are refused with the reason in kubectl's
error; pods that did not opt in are untouched; a rotated certificate is picked up without a
restart."""
import base64
import json
import os
import re
import shutil
import subprocess
import uuid

import pytest

from cluster import REPO, free_port
from helm_chart import template
from jobs import crd  # noqa: F401
from node_agent import NodeAgent
from operator_process import OperatorProcess


def _openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def _issue(d, name):
    """A serving certificate for IP 127.0.0.1 signed by the test CA in d, as d/name.{crt,key}."""
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    _openssl("req", *ec, "-keyout", name + ".key", "-out", name + ".csr", "-subj", "/CN=" + name,
             cwd=d)
    _openssl("x509", "-req", "-in", name + ".csr", "-CA", "ca.crt", "-CAkey", "ca.key",
             "-CAcreateserial", "-out", name + ".crt", "-days", "1", "-extfile", "san.ext", cwd=d)


def _project(vol, d, name):
    """Writes d/name.{crt,key} into the Secret-volume-like folder vol the way the kubelet does:
    a fresh folder, then an atomic swap of the ..data symlink."""
    gen = os.path.join(vol, ".." + name)
    os.makedirs(gen)
    shutil.copy(os.path.join(d, name + ".crt"), os.path.join(gen, "tls.crt"))
    shutil.copy(os.path.join(d, name + ".key"), os.path.join(gen, "tls.key"))
    tmp = os.path.join(vol, "..data_tmp")
    os.symlink(".." + name, tmp)
    os.replace(tmp, os.path.join(vol, "..data"))
    for f in ("tls.crt", "tls.key"):
        if not os.path.islink(os.path.join(vol, f)):
            os.symlink(os.path.join("..data", f), os.path.join(vol, f))


def _fingerprint(d, name):
    out = subprocess.run(["openssl", "x509", "-noout", "-fingerprint", "-sha256", "-in",
                          os.path.join(d, name + ".crt")], capture_output=True, text=True,
                         check=True).stdout
    return out.split("=", 1)[1].strip().replace(":", "").lower()


def _webhook_configuration(name, port, ca_pem):
    """The MutatingWebhookConfiguration helm/korovod installs (rendered by the pinned helm), with a
    URL instead of its Service (the test cluster routes no Services) and the test's CA."""
    rendered = [d for d in template() if d["kind"] == "MutatingWebhookConfiguration"]
    assert len(rendered) == 1, rendered
    doc = rendered[0]
    doc["metadata"] = {"name": name}
    for e in doc["webhooks"]:
        path = e["clientConfig"]["service"]["path"]
        e["clientConfig"] = {"url": "https://127.0.0.1:%d%s" % (port, path),
                             "caBundle": base64.b64encode(ca_pem).decode()}
    assert [e["name"] for e in doc["webhooks"]] == ["pod.inject.korovod.dev",
                                                   "namespace.inject.korovod.dev"], doc
    return doc


def _statefulset_pod(sts, ordinal, size, trainer, labels=None):
    """A pod as the StatefulSet controller creates it (the test cluster runs no controllers)."""
    lab = {"app": sts["metadata"]["name"], "apps.kubernetes.io/pod-index": str(ordinal),
           "statefulset.kubernetes.io/pod-name": "%s-%d" % (sts["metadata"]["name"], ordinal)}
    lab.update(labels if labels is not None else {"korovod.dev/inject": "true"})
    name = sts["metadata"]["name"]
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "%s-%d" % (name, ordinal), "labels": lab,
                     "annotations": {"korovod.dev/world-size": str(size)},
                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet",
                                          "name": name, "uid": sts["metadata"]["uid"],
                                          "controller": True, "blockOwnerDeletion": True}]},
        "spec": {"hostname": "%s-%d" % (name, ordinal), "subdomain": name,
                 "restartPolicy": "Never", "containers": [trainer]},
    }


@pytest.fixture
def webhook(crd, tmp_path):
    d = str(tmp_path / "pki")
    os.makedirs(d)
    with open(os.path.join(d, "san.ext"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n")
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
             "-nodes", "-keyout", "ca.key", "-out", "ca.crt", "-subj", "/CN=korovod-webhook-ca",
             "-days", "1", cwd=d)
    for n in ("first", "second"):
        _issue(d, n)
    vol = str(tmp_path / "webhook-tls")
    os.makedirs(vol)
    _project(vol, d, "first")
    port = free_port()
    operator = OperatorProcess(crd, str(tmp_path), "operator-webhook", [
        "--webhook-bind-address", "127.0.0.1:%d" % port, "--webhook-cert-dir", vol,
        "--sidecar-image", "korovod/sidecar:dev"]).start()
    name = "korovod-test-" + uuid.uuid4().hex[:6]
    try:
        crd.wait_for(lambda: "webhook: serving POST /inject" in operator.log(),
                     "the webhook serving", 30)
        with open(os.path.join(d, "ca.crt"), "rb") as f:
            crd.kubectl("apply", "-f", "-",
                        input=json.dumps(_webhook_configuration(name, port, f.read())))
        yield {"operator": operator, "pki": d, "vol": vol}
    finally:
        crd.kubectl("delete", "mutatingwebhookconfiguration", name, "--ignore-not-found")
        assert operator.stop() == 0, operator.log()[-3000:]


def _namespace(cluster, labels=None):
    ns = "w-" + uuid.uuid4().hex[:8]
    doc = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns,
                                                                "labels": labels or {}}}
    cluster.kubectl("apply", "-f", "-", input=json.dumps(doc))
    cluster.wait_for(lambda: cluster.request("POST", "/api/v1/namespaces/%s/serviceaccounts" % ns,
                                             {"metadata": {"name": "default"}})[0] in (201, 409),
                     "service account default in " + ns, 30)
    return ns


def _create(cluster, ns, doc, check=True):
    return cluster.kubectl("-n", ns, "create", "-f", "-", input=json.dumps(doc), check=check)


def _statefulset(cluster, ns, name, replicas):
    doc = {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": name},
           "spec": {"replicas": replicas, "serviceName": name,
                    "selector": {"matchLabels": {"app": name}},
                    "template": {"metadata": {"labels": {"app": name,
                                                         "korovod.dev/inject": "true"},
                                              "annotations": {"korovod.dev/world-size":
                                                              str(replicas)}},
                                 "spec": {"containers": [{"name": "trainer", "image": "t"}]}}}}
    _create(cluster, ns, doc)
    return cluster.get("/apis/apps/v1/namespaces/%s/statefulsets/%s" % (ns, name))


def _env(container):
    return {e["name"]: e.get("value", "<ref>") for e in container.get("env", [])}


def test_statefulset_pods_are_injected_and_train(crd, webhook, tmp_path):
    build = os.environ["KOROVOD_BUILD_DIR"]
    ns = _namespace(crd)
    sts = _statefulset(crd, ns, "bert", 2)
    _create(crd, ns, {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "bert"},
                      "spec": {"clusterIP": "None", "selector": {"app": "bert"}}})
    _create(crd, ns, {"apiVersion": "v1", "kind": "Secret",
                      "metadata": {"name": "bert-korovod-key"},
                      "stringData": {"key": uuid.uuid4().hex + uuid.uuid4().hex}})
    trainer = {"name": "trainer", "image": "korovod/trainer:dev",
               "command": ["/usr/bin/python3", os.path.join(REPO, "examples", "pytorch_digits.py"),
                           "--epochs", "3", "--checkpoint", str(tmp_path / "digits.pt")],
               "env": [{"name": "PYTHONPATH", "value": "%s:%s" % (
                   os.path.join(REPO, "python"), os.path.join(build, "python"))}]}
    agent = NodeAgent(crd, str(tmp_path), {"korovod/sidecar": [os.path.join(build, "bin",
                                                                            "korovod-sidecar")]},
                      namespace=ns)
    with agent:
        for i in range(2):
            _create(crd, ns, _statefulset_pod(sts, i, 2, trainer))
        stored = [crd.get("/api/v1/namespaces/%s/pods/bert-%d" % (ns, i)) for i in range(2)]
        for i, pod in enumerate(stored):
            sidecars = pod["spec"]["initContainers"]
            assert [c["name"] for c in sidecars] == ["korovod-sidecar"], pod["spec"]
            assert sidecars[0]["restartPolicy"] == "Always"
            assert sidecars[0]["image"] == "korovod/sidecar:dev"
            key_ref = [e for e in sidecars[0]["env"] if e["name"] == "KOROVOD_JOB_KEY"][0]
            assert key_ref["valueFrom"]["secretKeyRef"]["name"] == "bert-korovod-key"
            env = _env(pod["spec"]["containers"][0])
            assert env["KOROVOD_RANK"] == str(i) and env["KOROVOD_SIZE"] == "2", env
            assert env["KOROVOD_COORDINATOR"].startswith("bert-0.bert.%s.svc." % ns), env
            # torchrun's variables (init_process_group("korovod") with env://), as stored.
            assert (env["RANK"], env["WORLD_SIZE"], env["LOCAL_RANK"], env["GROUP_RANK"]) == \
                (str(i), "2", "0", str(i)), env
            assert env["MASTER_ADDR"] + ":28500" == env["KOROVOD_COORDINATOR"], env
            assert env["MASTER_PORT"] == "29500", env
            assert "KOROVOD_JOB_KEY" not in env
            assert {v["name"] for v in pod["spec"]["volumes"]} >= {"korovod-socket", "dshm"}
            # The workload's own service-account token (mounted before the webhook ran) stays.
            assert any(v["name"].startswith("kube-api-access-") for v in pod["spec"]["volumes"])
        done = crd.wait_for(lambda: all(
            (crd.get("/api/v1/namespaces/%s/pods/bert-%d" % (ns, i)) or {}).get(
                "status", {}).get("phase") in ("Succeeded", "Failed") for i in range(2)),
            "both injected pods finished", 300)
        assert done
        trainer0 = agent.log("bert-0", "trainer")
        phases = [crd.get("/api/v1/namespaces/%s/pods/bert-%d" % (ns, i))["status"]["phase"]
                  for i in range(2)]
        assert phases == ["Succeeded", "Succeeded"], (phases, agent.errors, trainer0[-2000:])
        accuracies = [float(a) for a in re.findall(r"test accuracy ([0-9.]+)%", trainer0)]
        assert len(accuracies) == 3 and accuracies[-1] > 80.0, trainer0
        assert "rank 0/2" in agent.log("bert-0", "korovod-sidecar")
    log = webhook["operator"].log()
    assert "injected: StatefulSet %s/bert rank 1 of 2" % ns in log, log[-3000:]
    assert webhook["operator"].metric("korovod_operator_webhook_reviews_total",
                                      'outcome="injected"') == 2


def test_refusals_opt_outs_and_rotation(crd, webhook):
    operator = webhook["operator"]
    ns = _namespace(crd)
    trainer = {"name": "trainer", "image": "t"}
    # Opted in, but no workload gives it a rank: refused, and kubectl shows why.
    lone = {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "lone", "labels": {"korovod.dev/inject": "true"},
                         "annotations": {"korovod.dev/world-size": "2"}},
            "spec": {"containers": [trainer]}}
    r = _create(crd, ns, lone, check=False)
    assert r.returncode != 0
    assert "korovod sidecar injection: cannot determine the rank" in r.stderr, r.stderr
    assert crd.get("/api/v1/namespaces/%s/pods/lone" % ns) is None
    # A StatefulSet pod without the world size: refused, naming the annotation.
    sts = _statefulset(crd, ns, "gpt", 2)
    bad = _statefulset_pod(sts, 0, 2, trainer)
    del bad["metadata"]["annotations"]["korovod.dev/world-size"]
    r = _create(crd, ns, bad, check=False)
    assert r.returncode != 0 and "korovod.dev/world-size" in r.stderr, r.stderr
    # Not opted in (no label, and inject=false in a labelled namespace): stored unchanged.
    plain = _statefulset_pod(sts, 1, 2, trainer, labels={})
    _create(crd, ns, plain)
    assert "initContainers" not in crd.get("/api/v1/namespaces/%s/pods/gpt-1" % ns)["spec"]
    opted_ns = _namespace(crd, {"korovod.dev/inject": "true"})
    sts2 = _statefulset(crd, opted_ns, "t5", 2)
    _create(crd, opted_ns, _statefulset_pod(sts2, 0, 2, trainer, labels={}))  # by namespace
    _create(crd, opted_ns, _statefulset_pod(sts2, 1, 2, trainer,
                                            labels={"korovod.dev/inject": "false"}))
    # A namespace opt-in leaves pods that name no world alone (not training pods).
    _create(crd, opted_ns, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "debug"},
                            "spec": {"containers": [trainer]}})
    assert "initContainers" not in crd.get("/api/v1/namespaces/%s/pods/debug" % opted_ns)["spec"]
    by_ns = crd.get("/api/v1/namespaces/%s/pods/t5-0" % opted_ns)["spec"]
    assert [c["name"] for c in by_ns["initContainers"]] == ["korovod-sidecar"], by_ns
    assert "initContainers" not in crd.get("/api/v1/namespaces/%s/pods/t5-1" % opted_ns)["spec"]
    # A pod that already carries the sidecar is left as it is (idempotent).
    again = crd.get("/api/v1/namespaces/%s/pods/t5-0" % opted_ns)
    copy = {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "t5-copy", "labels": again["metadata"]["labels"],
                         "annotations": again["metadata"]["annotations"],
                         "ownerReferences": again["metadata"]["ownerReferences"]},
            "spec": {k: again["spec"][k] for k in ("containers", "initContainers", "volumes",
                                                   "subdomain")}}
    _create(crd, opted_ns, copy)
    stored = crd.get("/api/v1/namespaces/%s/pods/t5-copy" % opted_ns)["spec"]
    assert stored["initContainers"] == by_ns["initContainers"]
    assert stored["containers"][0]["env"] == by_ns["containers"][0]["env"]
    assert "unchanged: already has korovod-sidecar" in operator.log(), operator.log()[-3000:]

    # Rotation: the kubelet swaps the Secret volume; the next TLS handshake presents the new
    # certificate (same CA, so the API server's caBundle still verifies it). The API server keeps
    # its connection to the webhook alive, and the webhook closes a connection after 5 requests or
    # 5 s idle, so within a few pods it must have shaken hands again.
    _project(webhook["vol"], webhook["pki"], "second")
    new = _fingerprint(webhook["pki"], "second")[:16]
    for n in range(8):
        after = _statefulset_pod(sts2, 1, 2, trainer, labels={})
        after["metadata"]["name"] = "t5-after-%d" % n
        _create(crd, opted_ns, after)
        stored = crd.get("/api/v1/namespaces/%s/pods/t5-after-%d" % (opted_ns, n))["spec"]
        assert "initContainers" in stored, stored
        if new in operator.log():
            break
    log = operator.log()
    assert "webhook certificate reloaded" in log and new in log, log[-3000:]
    assert operator.metric("korovod_operator_webhook_reviews_total", 'outcome="denied"') == 2
