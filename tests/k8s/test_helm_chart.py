"""The Helm chart helm/korovod, with the pinned helm (scripts/build-testinfra.sh): `helm lint
--strict` and `helm template` with default and non-default values, the exact objects and their
key fields per case, the webhook's generated CA and serving certificate, values.schema.json
rejecting bad values, the CRD taken from crds/ (a symlink, rendered and packaged), and the
rendered manifests accepted by a real kube-apiserver (`kubectl apply --dry-run=server`). The RBAC
rules themselves are exercised by test_operator_auth.py, which runs the operator under exactly
the chart's rules."""
import base64
import datetime
import os
import subprocess
import tarfile

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from cluster import REPO
from helm_chart import CHART, by_kind_name, helm, helm_binary, template
from jobs import CRD  # the repository's CRD, the one source the chart's crds/ links to

NS = "korovod-system"
FULL = "rel-korovod"

# Non-default values files, one per case (defaults: {}).
CASES = {
    "default": {},
    # One replica (no PDB), one watched namespace (Role instead of ClusterRole), no webhook, and
    # every pod-level knob set.
    "namespaced": {
        "operator": {
            "replicas": 1, "watchNamespace": "team-a",
            "image": {"repository": "registry.example.com/korovod/operator", "tag": "1.2.3",
                      "pullPolicy": "Always"},
            "imagePullSecrets": [{"name": "regcred"}],
            "nodeSelector": {"kubernetes.io/os": "linux", "pool": "system"},
            "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "system",
                             "effect": "NoSchedule"}],
            "podAnnotations": {"prometheus.io/scrape": "true"},
            "podLabels": {"team": "ml"},
        },
        "sidecar": {"image": {"repository": "registry.example.com/korovod/sidecar",
                              "tag": "1.2.3"}},
        "webhook": {"enabled": False},
    },
    # The webhook certificate from cert-manager (a self-signed Issuer of the chart's own).
    "certmanager": {
        "operator": {"replicas": 3},
        "webhook": {"failurePolicy": "Ignore", "timeoutSeconds": 5,
                    "certManager": {"enabled": True}},
    },
    # cert-manager with an existing ClusterIssuer: no Issuer of the chart's own.
    "certmanager-issuer": {
        "webhook": {"certManager": {"enabled": True, "issuerRef": {
            "name": "corp-ca", "kind": "ClusterIssuer", "group": "cert-manager.io"}}},
    },
}

COMMON = {("ServiceAccount", FULL), ("Deployment", FULL),
          ("Role", FULL + "-leader-election"), ("RoleBinding", FULL + "-leader-election")}
WEBHOOK = {("Service", FULL + "-webhook"), ("MutatingWebhookConfiguration", FULL)}
EXPECTED = {
    "default": COMMON | WEBHOOK | {("ClusterRole", FULL), ("ClusterRoleBinding", FULL),
                                   ("PodDisruptionBudget", FULL),
                                   ("Secret", FULL + "-webhook-tls")},
    "namespaced": COMMON | {("Role", FULL), ("RoleBinding", FULL)},
    "certmanager": COMMON | WEBHOOK | {("ClusterRole", FULL), ("ClusterRoleBinding", FULL),
                                       ("PodDisruptionBudget", FULL),
                                       ("Certificate", FULL + "-webhook"),
                                       ("Issuer", FULL + "-selfsigned")},
    "certmanager-issuer": COMMON | WEBHOOK | {("ClusterRole", FULL), ("ClusterRoleBinding", FULL),
                                              ("PodDisruptionBudget", FULL),
                                              ("Certificate", FULL + "-webhook")},
}


@pytest.fixture(scope="module")
def values_files(tmp_path_factory):
    helm_binary()  # skip (or fail under KOROVOD_REQUIRE_K8S=1) without helm
    d = tmp_path_factory.mktemp("values")
    files = {}
    for name, values in CASES.items():
        if values:
            files[name] = str(d / (name + ".yaml"))
            with open(files[name], "w") as f:
                yaml.safe_dump(values, f)
        else:
            files[name] = None
    return files


@pytest.fixture(scope="module")
def rendered(values_files):
    return {name: by_kind_name(template(f, NS)) for name, f in values_files.items()}


def operator_container(objs):
    return objs[("Deployment", FULL)]["spec"]["template"]["spec"]["containers"][0]


@pytest.mark.parametrize("case", list(CASES))
def test_lint_strict(values_files, case):
    args = ["lint", "--strict", CHART, "--namespace", NS]
    if values_files[case]:
        args += ["-f", values_files[case]]
    out = helm(*args).stdout
    assert "0 chart(s) failed" in out, out


@pytest.mark.parametrize("case", list(CASES))
def test_exact_objects(rendered, case):
    assert set(rendered[case]) == EXPECTED[case]
    for (kind, name), o in rendered[case].items():
        cluster_scoped = kind in ("ClusterRole", "ClusterRoleBinding",
                                  "MutatingWebhookConfiguration")
        want_ns = None if cluster_scoped else ("team-a" if case == "namespaced" and name == FULL
                                               and kind in ("Role", "RoleBinding") else NS)
        assert o["metadata"].get("namespace") == want_ns, (kind, name)
        assert o["metadata"]["labels"]["app.kubernetes.io/instance"] == "rel", (kind, name)


def test_deployment_defaults(rendered):
    d = rendered["default"][("Deployment", FULL)]
    assert d["spec"]["replicas"] == 2
    pod = d["spec"]["template"]
    assert pod["metadata"]["labels"]["korovod.dev/inject"] == "false"
    c = operator_container(rendered["default"])
    assert c["image"] == "ghcr.io/korovod/operator:0.1.0"
    args = c["args"]
    for a in ("--leader-elect", "--identity=$(POD_NAME)", "--leader-election-namespace=" + NS,
              "--sidecar-image=ghcr.io/korovod/sidecar:0.1.0",
              "--webhook-bind-address=0.0.0.0:9443", "--webhook-cert-dir=/etc/korovod/webhook"):
        assert a in args, (a, args)
    assert not any(a.startswith("--namespace") for a in args), args
    assert c["volumeMounts"] == [{"name": "webhook-tls", "mountPath": "/etc/korovod/webhook",
                                  "readOnly": True}]
    assert pod["spec"]["volumes"] == [{"name": "webhook-tls",
                                       "secret": {"secretName": FULL + "-webhook-tls"}}]
    assert {"name": "webhook", "containerPort": 9443} in c["ports"]
    pdb = rendered["default"][("PodDisruptionBudget", FULL)]
    assert pdb["spec"]["minAvailable"] == 1
    assert pdb["spec"]["selector"] == d["spec"]["selector"]
    svc = rendered["default"][("Service", FULL + "-webhook")]
    assert svc["spec"]["selector"] == d["spec"]["selector"]["matchLabels"]
    assert svc["spec"]["ports"] == [{"name": "https", "port": 443, "targetPort": "webhook"}]


@pytest.mark.parametrize("case", list(CASES))
def test_security_contexts(rendered, case):
    spec = rendered[case][("Deployment", FULL)]["spec"]["template"]["spec"]
    psc = spec["securityContext"]
    assert psc["runAsNonRoot"] is True and psc["runAsUser"] != 0, psc
    assert psc["seccompProfile"] == {"type": "RuntimeDefault"}
    csc = spec["containers"][0]["securityContext"]
    assert csc == {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                   "capabilities": {"drop": ["ALL"]}}, csc
    assert spec["serviceAccountName"] == FULL


def test_namespaced_values(rendered):
    objs = rendered["namespaced"]
    c = operator_container(objs)
    assert c["image"] == "registry.example.com/korovod/operator:1.2.3"
    assert c["imagePullPolicy"] == "Always"
    args = c["args"]
    assert "--leader-elect" in args and "--namespace=team-a" in args, args
    assert "--sidecar-image=registry.example.com/korovod/sidecar:1.2.3" in args
    assert not any(a.startswith("--webhook") for a in args), args
    assert "volumeMounts" not in c and [p["name"] for p in c["ports"]] == ["metrics"]
    pod = objs[("Deployment", FULL)]["spec"]["template"]
    assert objs[("Deployment", FULL)]["spec"]["replicas"] == 1
    assert "volumes" not in pod["spec"]
    assert pod["spec"]["nodeSelector"] == CASES["namespaced"]["operator"]["nodeSelector"]
    assert pod["spec"]["tolerations"] == CASES["namespaced"]["operator"]["tolerations"]
    assert pod["spec"]["imagePullSecrets"] == [{"name": "regcred"}]
    assert pod["metadata"]["annotations"] == {"prometheus.io/scrape": "true"}
    assert pod["metadata"]["labels"]["team"] == "ml"
    role, binding = objs[("Role", FULL)], objs[("RoleBinding", FULL)]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                  "name": FULL}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": FULL, "namespace": NS}]
    # The same rules as the ClusterRole of the default case, only namespaced.
    assert role["rules"] == rendered["default"][("ClusterRole", FULL)]["rules"]


def test_leader_election_role_in_release_namespace(rendered):
    role = rendered["default"][("Role", FULL + "-leader-election")]
    assert role["rules"] == [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                              "verbs": ["get", "create", "update"]}]
    binding = rendered["default"][("RoleBinding", FULL + "-leader-election")]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": FULL, "namespace": NS}]
    crb = rendered["default"][("ClusterRoleBinding", FULL)]
    assert crb["subjects"] == binding["subjects"]
    assert crb["roleRef"]["kind"] == "ClusterRole" and crb["roleRef"]["name"] == FULL


def webhooks_of(objs):
    return objs[("MutatingWebhookConfiguration", FULL)]["webhooks"]


@pytest.mark.parametrize("case", ["default", "certmanager"])
def test_mutating_webhook_configuration(rendered, case):
    objs = rendered[case]
    hooks = webhooks_of(objs)
    assert [h["name"] for h in hooks] == ["pod.inject.korovod.dev", "namespace.inject.korovod.dev"]
    policy, timeout = ("Fail", 10) if case == "default" else ("Ignore", 5)
    for h in hooks:
        assert h["admissionReviewVersions"] == ["v1"]
        assert h["sideEffects"] == "None"
        assert h["failurePolicy"] == policy and h["timeoutSeconds"] == timeout
        assert h["rules"] == [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                               "resources": ["pods"], "scope": "Namespaced"}]
        assert h["clientConfig"]["service"] == {"name": FULL + "-webhook", "namespace": NS,
                                                "path": "/inject", "port": 443}
    pod_hook, ns_hook = hooks
    # Pods that opt in by label, whatever their namespace...
    assert pod_hook["objectSelector"] == {"matchLabels": {"korovod.dev/inject": "true"}}
    assert "namespaceSelector" not in pod_hook
    # ...or pods in a namespace that opts in, unless the pod itself says true (the first entry
    # has it) or false (opted out; the operator's own pods are).
    assert ns_hook["namespaceSelector"] == {"matchLabels": {"korovod.dev/inject": "true"}}
    assert ns_hook["objectSelector"] == {"matchExpressions": [
        {"key": "korovod.dev/inject", "operator": "NotIn", "values": ["true", "false"]}]}
    annotations = objs[("MutatingWebhookConfiguration", FULL)]["metadata"].get("annotations", {})
    if case == "default":
        assert "cert-manager.io/inject-ca-from" not in annotations
        for h in hooks:
            assert h["clientConfig"]["caBundle"], h
    else:
        assert annotations == {"cert-manager.io/inject-ca-from": NS + "/" + FULL + "-webhook"}
        for h in hooks:
            assert "caBundle" not in h["clientConfig"], h


def test_ca_bundle_verifies_serving_certificate(rendered, tmp_path):
    objs = rendered["default"]
    hooks = webhooks_of(objs)
    bundle = hooks[0]["clientConfig"]["caBundle"]
    assert hooks[1]["clientConfig"]["caBundle"] == bundle
    ca_pem = base64.b64decode(bundle, validate=True)
    assert ca_pem.startswith(b"-----BEGIN CERTIFICATE-----"), ca_pem[:40]
    ca = x509.load_pem_x509_certificate(ca_pem)
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is True
    secret = objs[("Secret", FULL + "-webhook-tls")]
    assert secret["type"] == "kubernetes.io/tls"
    data = {k: base64.b64decode(v, validate=True) for k, v in secret["data"].items()}
    assert set(data) == {"ca.crt", "tls.crt", "tls.key"}
    assert data["ca.crt"] == ca_pem
    cert = x509.load_pem_x509_certificate(data["tls.crt"])
    key = serialization.load_pem_private_key(data["tls.key"], password=None)
    assert key.public_key().public_numbers() == cert.public_key().public_numbers()
    host = "%s-webhook.%s.svc" % (FULL, NS)
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert host in sans.get_values_for_type(x509.DNSName), sans
    assert (cert.not_valid_after - datetime.datetime.utcnow()).days > 365
    # What the API server does when it calls the webhook: a chain to the caBundle, for a TLS
    # server, with the Service's DNS name.
    for name in ("ca.crt", "tls.crt"):
        (tmp_path / name).write_bytes(data[name])
    r = subprocess.run(["openssl", "verify", "-CAfile", str(tmp_path / "ca.crt"), "-purpose",
                        "sslserver", "-verify_hostname", host, str(tmp_path / "tls.crt")],
                       capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip().endswith(": OK"), r.stdout + r.stderr
    r = subprocess.run(["openssl", "verify", "-CAfile", str(tmp_path / "ca.crt"),
                        "-verify_hostname", "other.%s.svc" % NS, str(tmp_path / "tls.crt")],
                       capture_output=True, text=True)
    assert r.returncode != 0, r.stdout


@pytest.mark.parametrize("case", ["certmanager", "certmanager-issuer"])
def test_cert_manager_certificate(rendered, case):
    objs = rendered[case]
    cert = objs[("Certificate", FULL + "-webhook")]
    assert cert["apiVersion"] == "cert-manager.io/v1"
    assert cert["spec"]["secretName"] == FULL + "-webhook-tls"
    assert "%s-webhook.%s.svc" % (FULL, NS) in cert["spec"]["dnsNames"]
    if case == "certmanager":
        assert cert["spec"]["issuerRef"] == {"name": FULL + "-selfsigned", "kind": "Issuer"}
        assert objs[("Issuer", FULL + "-selfsigned")]["spec"] == {"selfSigned": {}}
    else:
        assert cert["spec"]["issuerRef"] == CASES[case]["webhook"]["certManager"]["issuerRef"]
    # The Deployment mounts the Secret cert-manager writes.
    pod = objs[("Deployment", FULL)]["spec"]["template"]["spec"]
    assert pod["volumes"] == [{"name": "webhook-tls",
                               "secret": {"secretName": FULL + "-webhook-tls"}}]


@pytest.mark.parametrize("setting,field", [
    ("operator.replicas=abc", "/operator/replicas"),
    ("operator.replicas=0", "/operator/replicas"),
    ("webhook.failurePolicy=Maybe", "/webhook/failurePolicy"),
    ("webhook.timeoutSeconds=31", "/webhook/timeoutSeconds"),
    ("operator.image.pullPolicy=Sometimes", "/operator/image/pullPolicy"),
    ("webhook.enabled=yes", "/webhook/enabled"),
    ("operator.replica=2", "replica"),  # a typo: no additional properties
])
def test_schema_rejects(values_files, setting, field):
    r = helm("template", "rel", CHART, "--set", setting, check=False)
    assert r.returncode != 0, r.stdout[:500]
    assert "schema" in r.stderr and field in r.stderr, r.stderr


def test_leader_election_timings_checked(values_files):
    r = helm("template", "rel", CHART, "--set", "operator.leaderElection.retryPeriod=12",
             check=False)
    assert r.returncode != 0 and "retryPeriod < renewDeadline < leaseDuration" in r.stderr, r.stderr


def test_chart_crd_comes_from_the_repository_crd(tmp_path):
    """The CRD exists once, in crds/: the chart's crds/ holds only a symlink to it, helm renders
    that file (`--include-crds`, what `helm install` applies), and `helm package` puts its bytes
    into the chart archive as a regular file, so a published chart does not depend on the
    repository around it."""
    chart_crds = os.path.join(CHART, "crds")
    assert os.listdir(chart_crds) == ["korovod.dev_horovodjobs.yaml"]
    link = os.path.join(chart_crds, "korovod.dev_horovodjobs.yaml")
    assert os.path.islink(link), "%s should be a symlink to %s" % (link, CRD)
    assert os.readlink(link) == "../../../crds/korovod.dev_horovodjobs.yaml"
    assert os.path.samefile(link, CRD)

    with open(CRD) as f:
        source = yaml.safe_load(f)
    rendered = [d for d in template(extra=["--include-crds"])
                if d["kind"] == "CustomResourceDefinition"]
    assert rendered == [source]

    helm("package", CHART, "--destination", str(tmp_path))
    (archive,) = tmp_path.glob("korovod-*.tgz")
    with tarfile.open(archive) as tar:
        members = [m for m in tar.getmembers() if "/crds/" in m.name]
        assert [(m.name, m.isfile()) for m in members] == [
            ("korovod/crds/korovod.dev_horovodjobs.yaml", True)]
        packaged = tar.extractfile(members[0]).read()
    with open(CRD, "rb") as f:
        assert packaged == f.read()


@pytest.mark.parametrize("case", ["default", "namespaced"])
def test_rendered_manifests_accepted_by_the_api_server(cluster, values_files, case, tmp_path):
    """The CRD (helm's crds/, as `helm install` applies it) for real, then every other object
    with a server-side dry run: API validation, defaulting and admission, PodSecurity included
    (the release namespace enforces `restricted`)."""
    docs = template(values_files[case], NS, extra=["--include-crds"])
    crds = [d for d in docs if d["kind"] == "CustomResourceDefinition"]
    rest = [d for d in docs if d["kind"] != "CustomResourceDefinition"]
    assert [c["metadata"]["name"] for c in crds] == ["horovodjobs.korovod.dev"]
    with open(CRD) as f:
        assert crds == [yaml.safe_load(f)]  # what the API server gets is crds/, the one source
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(crds))
    cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                    "crd/horovodjobs.korovod.dev")
    for ns in (NS, "team-a"):
        if cluster.kubectl("get", "namespace", ns, check=False).returncode != 0:
            cluster.kubectl("create", "namespace", ns)
    cluster.kubectl("label", "--overwrite", "namespace", NS,
                    "pod-security.kubernetes.io/enforce=restricted",
                    "pod-security.kubernetes.io/warn=restricted")
    path = tmp_path / "rendered.yaml"
    path.write_text(yaml.safe_dump_all(rest))
    r = cluster.kubectl("apply", "--dry-run=server", "-f", str(path))
    assert "Warning" not in r.stderr, r.stderr
    created = [line for line in r.stdout.splitlines() if line.endswith("(server dry run)")]
    assert len(created) == len(rest), r.stdout
