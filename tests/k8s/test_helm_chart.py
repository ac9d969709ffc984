"""The Helm chart helm/korovod, with the pinned helm (scripts/build-testinfra.sh): `helm lint
--strict` and `helm template` with default and non-default values, the exact objects and their
key fields per case, a render free of key material and identical byte for byte each time, the
NetworkPolicy, the metrics Service and the ServiceMonitor (only when the API exists or a value
forces it), values.schema.json rejecting bad values, the CRD taken from crds/ (a symlink,
rendered and packaged), the rendered manifests accepted by a real kube-apiserver
(`kubectl apply --dry-run=server`), and the chart installed for real: korovod-operator run with
its ServiceAccount's token and the rendered Deployment's arguments runs a job, may not list or
watch Secrets, creates the webhook's CA, sets the caBundle that verifies the certificate it
serves, keeps it across a re-apply of the chart and a restart. test_operator_auth.py checks that
every call of the operator is granted by the chart's rules and every rule is used."""
import base64
import json
import os
import socket
import ssl
import tarfile
import uuid

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from cluster import free_port
from fake_kubelet import FakeKubelet
from helm_chart import CHART, by_kind_name, helm, helm_binary, template
from jobs import CRD  # the repository's CRD, the one source the chart's crds/ links to
from jobs import apply, crd, get_job, job_doc, ns, wait_phase  # noqa: F401
from operator_process import OperatorProcess

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
          ("Role", FULL + "-leader-election"), ("RoleBinding", FULL + "-leader-election"),
          ("NetworkPolicy", FULL), ("Service", FULL + "-metrics"), ("Service", FULL + "-elastic")}
WEBHOOK = {("Service", FULL + "-webhook"), ("MutatingWebhookConfiguration", FULL)}
# The operator's own webhook certificate (no cert-manager): rules for its Secret and for the
# caBundle, and no Secret rendered (the operator creates it).
OWN_CERT = {("Role", FULL + "-webhook"), ("RoleBinding", FULL + "-webhook"),
            ("ClusterRole", FULL + "-webhook"), ("ClusterRoleBinding", FULL + "-webhook")}
EXPECTED = {
    "default": COMMON | WEBHOOK | OWN_CERT | {("ClusterRole", FULL), ("ClusterRoleBinding", FULL),
                                              ("PodDisruptionBudget", FULL)},
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
        assert kind != "Secret", "the chart renders no key material: %s" % name
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
    svc = FULL + "-webhook"
    for a in ("--leader-elect", "--identity=$(POD_NAME)", "--leader-election-namespace=" + NS,
              "--sidecar-image=ghcr.io/korovod/sidecar:0.1.0",
              "--webhook-bind-address=0.0.0.0:9443", "--webhook-cert-dir=/etc/korovod/webhook",
              "--webhook-cert-secret=%s/%s-webhook-cert" % (NS, FULL),
              "--webhook-dns-names=%s,%s.%s,%s.%s.svc,%s.%s.svc.cluster.local"
              % (svc, svc, NS, svc, NS, svc, NS),
              "--webhook-configuration=" + FULL, "--webhook-setup-timeout=120",
              "--elastic-rendezvous-host=%s-elastic.%s.svc.cluster.local" % (FULL, NS),
              "--elastic-rendezvous-port=29400"):
        assert a in args, (a, args)
    assert not any(a.startswith("--namespace") for a in args), args
    # Elastic jobs' sidecars dial that name: headless over every replica (only the leader
    # listens, and they try each address), so a new leader is found under it.
    elastic = rendered["default"][("Service", FULL + "-elastic")]["spec"]
    assert elastic["clusterIP"] == "None" and elastic["publishNotReadyAddresses"] is True
    assert elastic["selector"] == d["spec"]["selector"]["matchLabels"], elastic
    assert "ports" not in elastic
    # The operator writes the serving pair it keeps in its Secret here (the root is read-only).
    assert c["volumeMounts"] == [{"name": "webhook-tls", "mountPath": "/etc/korovod/webhook",
                                  "readOnly": False}]
    assert pod["spec"]["volumes"] == [{"name": "webhook-tls",
                                       "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}}]
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
    # The elastic membership port is declared whatever the webhook (elastic jobs need it).
    assert "volumeMounts" not in c and [p["name"] for p in c["ports"]] == ["metrics", "elastic"]
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
    # The same rules as the ClusterRole of the default case, only namespaced, less nodes (a Role
    # cannot grant a cluster-scoped resource; elastic jobs then do without unready-node loss).
    nodes = {"apiGroups": [""], "resources": ["nodes"], "verbs": ["list", "watch"]}
    cluster_rules = rendered["default"][("ClusterRole", FULL)]["rules"]
    assert nodes in cluster_rules
    assert role["rules"] == [r for r in cluster_rules if r != nodes]


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
    # Never a caBundle in the manifest: the operator (or cert-manager's injector) sets it, and a
    # re-apply of the chart must not overwrite it.
    for h in hooks:
        assert "caBundle" not in h["clientConfig"], h
    if case == "default":
        assert "cert-manager.io/inject-ca-from" not in annotations
    else:
        assert annotations == {"cert-manager.io/inject-ca-from": NS + "/" + FULL + "-webhook"}


@pytest.mark.parametrize("case", list(CASES))
def test_render_is_deterministic(values_files, case):
    """Two renders are the same bytes: nothing is generated at render time, so a GitOps sync or
    `helm template | kubectl apply` never changes (or rotates) anything by itself."""
    args = ["template", "rel", CHART, "--namespace", NS, "--include-crds"]
    if values_files[case]:
        args += ["-f", values_files[case]]
    first, second = helm(*args).stdout, helm(*args).stdout
    assert first == second
    assert "PRIVATE KEY" not in first and "caBundle" not in first


def test_own_webhook_certificate_rbac(rendered):
    """The operator may create Secrets in its namespace and read and update only its certificate
    Secret there, and read and update only its own MutatingWebhookConfiguration."""
    objs = rendered["default"]
    role = objs[("Role", FULL + "-webhook")]
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]},
        {"apiGroups": [""], "resources": ["secrets"], "resourceNames": [FULL + "-webhook-cert"],
         "verbs": ["get", "update"]}]
    cluster_role = objs[("ClusterRole", FULL + "-webhook")]
    assert cluster_role["rules"] == [
        {"apiGroups": ["admissionregistration.k8s.io"],
         "resources": ["mutatingwebhookconfigurations"], "resourceNames": [FULL],
         "verbs": ["get", "update"]}]
    for kind in ("RoleBinding", "ClusterRoleBinding"):
        binding = objs[(kind, FULL + "-webhook")]
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": FULL, "namespace": NS}]
        assert binding["roleRef"]["name"] == FULL + "-webhook"
    # The job controller's rules: the key Secret by name, never a list or watch of Secrets.
    main = objs[("ClusterRole", FULL)]["rules"]
    secret_verbs = {v for r in main if "secrets" in r["resources"] for v in r["verbs"]}
    assert secret_verbs == {"get", "create"}, main


@pytest.mark.parametrize("case", ["default", "namespaced"])
def test_network_policy(rendered, case):
    objs = rendered[case]
    policy = objs[("NetworkPolicy", FULL)]
    deployment = objs[("Deployment", FULL)]
    assert policy["spec"]["podSelector"] == deployment["spec"]["selector"]
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    ingress_ports = [p["port"] for rule in policy["spec"]["ingress"] for p in rule["ports"]]
    # The webhook port from anywhere (the API server is no pod), the metrics/health port, and
    # the leader's one elastic membership port from HorovodJob worker pods only.
    assert ingress_ports == ([9443, 8080, 29400] if case == "default" else [8080, 29400]), policy
    assert all("from" not in rule for rule in policy["spec"]["ingress"][:-1]), policy
    elastic = policy["spec"]["ingress"][-1]
    assert elastic["ports"] == [{"protocol": "TCP", "port": 29400}]
    assert elastic["from"] == [{"namespaceSelector": {},
                                "podSelector": {"matchLabels": {"korovod.dev/role": "worker"}}}]
    api, dns = policy["spec"]["egress"]
    assert api["ports"] == [{"protocol": "TCP", "port": 443}, {"protocol": "TCP", "port": 6443}]
    assert dns["ports"] == [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]


def test_network_policy_values(tmp_path):
    values = tmp_path / "np.yaml"
    values.write_text(yaml.safe_dump({"networkPolicy": {
        "webhookFrom": [{"ipBlock": {"cidr": "10.0.0.0/24"}}],
        "metricsFrom": [{"namespaceSelector": {"matchLabels": {"name": "monitoring"}}}],
        "apiServer": {"ports": [6443], "cidrs": ["10.0.0.10/32"]},
        "dnsTo": [{"namespaceSelector": {}, "podSelector": {"matchLabels": {
            "k8s-app": "kube-dns"}}}]}}))
    policy = by_kind_name(template(str(values), NS))[("NetworkPolicy", FULL)]["spec"]
    webhook, metrics, _elastic = policy["ingress"]
    assert webhook["from"] == [{"ipBlock": {"cidr": "10.0.0.0/24"}}]
    assert metrics["from"] == [{"namespaceSelector": {"matchLabels": {"name": "monitoring"}}}]
    api, dns = policy["egress"]
    assert api == {"ports": [{"protocol": "TCP", "port": 6443}],
                   "to": [{"ipBlock": {"cidr": "10.0.0.10/32"}}]}
    assert dns["to"] == [{"namespaceSelector": {}, "podSelector": {"matchLabels": {
        "k8s-app": "kube-dns"}}}]
    off = by_kind_name(template(None, NS, extra=["--set", "networkPolicy.enabled=false"]))
    assert ("NetworkPolicy", FULL) not in off


def _worker_policy_rules(objs):
    return [r for r in objs[("ClusterRole", FULL)]["rules"]
            if "networkpolicies" in r["resources"]]


def test_worker_network_policy_value(rendered):
    # Off by default: no flag, and no rule for NetworkPolicies.
    default = rendered["default"]
    assert not [a for a in operator_container(default)["args"]
                if a.startswith("--worker-network-policy")]
    assert _worker_policy_rules(default) == []
    on = by_kind_name(template(None, NS, extra=["--set", "workerNetworkPolicy.enabled=true"]))
    args = [a for a in operator_container(on)["args"] if a.startswith("--worker-network-policy=")]
    assert len(args) == 1, operator_container(on)["args"]
    namespace, labels = args[0].split("=", 1)[1].split(":", 1)
    # The operator's own pods, by the labels its Deployment gives them, in its namespace.
    selector = dict(item.split("=", 1) for item in labels.split(","))
    pod_labels = on[("Deployment", FULL)]["spec"]["template"]["metadata"]["labels"]
    assert namespace == NS
    assert selector == on[("Deployment", FULL)]["spec"]["selector"]["matchLabels"]
    assert all(pod_labels[k] == v for k, v in selector.items()), (selector, pod_labels)
    rules = _worker_policy_rules(on)
    assert rules == [{"apiGroups": ["networking.k8s.io"], "resources": ["networkpolicies"],
                      "verbs": ["list", "watch", "create"]}], rules


def test_metrics_service_and_service_monitor(rendered):
    objs = rendered["default"]
    svc = objs[("Service", FULL + "-metrics")]
    deployment = objs[("Deployment", FULL)]
    assert svc["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    assert svc["spec"]["ports"] == [{"name": "metrics", "port": 8080, "targetPort": "metrics"}]
    assert svc["metadata"]["labels"]["app.kubernetes.io/component"] == "metrics"
    # No ServiceMonitor unless the API exists (helm sees none here)...
    assert not any(kind == "ServiceMonitor" for kind, _ in objs)
    # ...or is announced, or forced.
    for extra in (["--api-versions", "monitoring.coreos.com/v1/ServiceMonitor"],
                  ["--set", "metrics.serviceMonitor.force=true"]):
        with_api = by_kind_name(template(None, NS, extra=extra))
        sm = with_api[("ServiceMonitor", FULL)]
        assert sm["apiVersion"] == "monitoring.coreos.com/v1"
        assert sm["metadata"]["namespace"] == NS
        labels = with_api[("Service", FULL + "-metrics")]["metadata"]["labels"]
        assert all(labels.get(k) == v for k, v in sm["spec"]["selector"]["matchLabels"].items())
        assert sm["spec"]["namespaceSelector"] == {"matchNames": [NS]}
        assert sm["spec"]["endpoints"] == [{"port": "metrics", "path": "/metrics",
                                            "interval": "30s"}]
    off = by_kind_name(template(None, NS, extra=[
        "--api-versions", "monitoring.coreos.com/v1/ServiceMonitor",
        "--set", "metrics.serviceMonitor.enabled=false"]))
    assert not any(kind == "ServiceMonitor" for kind, _ in off)


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
    cluster.wait_established("crd/horovodjobs.korovod.dev")
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


# A stand-in for the Prometheus Operator's CRD (the test cluster has none): the group, version
# and kind the chart's ServiceMonitor needs, any fields.
SERVICE_MONITOR_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "servicemonitors.monitoring.coreos.com"},
    "spec": {"group": "monitoring.coreos.com", "scope": "Namespaced",
             "names": {"plural": "servicemonitors", "singular": "servicemonitor",
                       "kind": "ServiceMonitor", "listKind": "ServiceMonitorList"},
             "versions": [{"name": "v1", "served": True, "storage": True, "schema": {
                 "openAPIV3Schema": {"type": "object",
                                     "x-kubernetes-preserve-unknown-fields": True}}}]}}


def test_service_monitor_accepted_by_the_api_server(cluster, tmp_path):
    cluster.kubectl("apply", "-f", "-", input=json.dumps(SERVICE_MONITOR_CRD))
    cluster.wait_established("crd/servicemonitors.monitoring.coreos.com")
    if cluster.kubectl("get", "namespace", NS, check=False).returncode != 0:
        cluster.kubectl("create", "namespace", NS)
    docs = [d for d in template(None, NS, extra=["--api-versions",
                                                 "monitoring.coreos.com/v1/ServiceMonitor"])
            if d["kind"] in ("ServiceMonitor", "Service", "NetworkPolicy")]
    # Services: the webhook's, the metrics', the elastic membership name (headless, no ports).
    assert sorted(d["kind"] for d in docs) == ["NetworkPolicy", "Service", "Service", "Service",
                                              "ServiceMonitor"]
    path = tmp_path / "monitoring.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    r = cluster.kubectl("apply", "--dry-run=server", "-f", str(path))
    assert "servicemonitor.monitoring.coreos.com/%s created (server dry run)" % FULL in r.stdout, \
        r.stdout


def _ca_bundles(cluster, name):
    config = cluster.get("/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/"
                         + name)
    return [h["clientConfig"].get("caBundle") for h in config["webhooks"]]


def _served_certificate(port, ca_pem, hostname):
    """Shakes hands with the webhook on 127.0.0.1:port as the API server does: the chain must end
    at ca_pem and the certificate must name `hostname` (the Service's DNS name). Returns the
    served certificate (DER)."""
    ctx = ssl.create_default_context(cadata=ca_pem.decode())
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with ctx.wrap_socket(raw, server_hostname=hostname) as tls:
            return tls.getpeercert(binary_form=True)


def _operator_args(deployment, webhook_port, cert_dir):
    """The rendered Deployment's operator arguments, with what only a pod has replaced: its
    addresses (loopback ports), identity (OperatorProcess sets it) and the emptyDir (cert_dir)."""
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    own = ("--identity=", "--metrics-bind-address=", "--webhook-bind-address=",
           "--webhook-cert-dir=")
    kept = [a for a in args if not a.startswith(own)]
    assert len(kept) == len(args) - len(own), args
    return kept + ["--webhook-bind-address=127.0.0.1:%d" % webhook_port,
                   "--webhook-cert-dir=" + cert_dir]


def test_installed_chart_runs_jobs_and_owns_its_webhook_certificate(crd, ns, tmp_path):
    """The default rendering applied for real (`helm template | kubectl apply`, as a GitOps tool
    would), then korovod-operator run as the chart's ServiceAccount (a token from the TokenRequest
    API) with the rendered Deployment's arguments. It may not list or watch Secrets anywhere,
    runs a job to Succeeded (so the narrowed rules suffice), creates its webhook CA in its
    Secret, sets the caBundle on both webhooks, and serves a certificate that caBundle verifies
    for the Service's DNS name. Re-applying the chart (client-side, then server-side by another
    field manager) leaves the caBundle alone; a restarted operator reuses the Secret's CA, and puts
    the caBundle back when a `kubectl replace` of the chart's manifest removes it."""
    release, rel_ns = "live", "korovod-live-" + uuid.uuid4().hex[:6]
    full = release + "-korovod"
    sa = "system:serviceaccount:%s:%s" % (rel_ns, full)
    crd.kubectl("create", "namespace", rel_ns)
    docs = template(None, rel_ns, release=release)
    manifest = tmp_path / "chart.yaml"
    manifest.write_text(yaml.safe_dump_all(docs))
    crd.kubectl("apply", "-f", str(manifest))
    objs = by_kind_name(docs)

    def can_i(*args):
        r = crd.kubectl("auth", "can-i", *args, "--as", sa, check=False)
        return r.stdout.strip()

    # Least privilege on Secrets: no list or watch anywhere (RBAC cannot filter by label), get
    # and create for the job key Secrets, update only of its own certificate Secret.
    assert can_i("list", "secrets", "--all-namespaces") == "no"
    assert can_i("watch", "secrets", "--all-namespaces") == "no"
    assert can_i("list", "secrets", "-n", rel_ns) == "no"
    assert can_i("get", "secrets/j-key", "-n", ns) == "yes"
    assert can_i("create", "secrets", "-n", ns) == "yes"
    assert can_i("update", "secrets/%s-webhook-cert" % full, "-n", rel_ns) == "yes"
    assert can_i("update", "secrets/other", "-n", rel_ns) == "no"
    assert can_i("update", "secrets/j-key", "-n", ns) == "no"
    assert can_i("update", "mutatingwebhookconfigurations/" + full) == "yes"
    assert can_i("update", "mutatingwebhookconfigurations/other") == "no"
    assert can_i("list", "pods", "--all-namespaces") == "yes"

    token = crd.kubectl("create", "token", full, "-n", rel_ns, "--duration=1h").stdout.strip()
    kubeconfig = tmp_path / "sa.kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "sa",
        "clusters": [{"name": "c", "cluster": {"server": crd.server,
                                               "certificate-authority": crd.ca}}],
        "users": [{"name": "sa", "user": {"token": token}}],
        "contexts": [{"name": "sa", "context": {"cluster": "c", "user": "sa"}}]}))
    cert_dir = tmp_path / "webhook-tls"  # the Deployment's emptyDir
    cert_dir.mkdir()
    port = free_port()
    args = _operator_args(objs[("Deployment", full)], port, str(cert_dir))
    hostname = "%s-webhook.%s.svc" % (full, rel_ns)
    secret_path = "/api/v1/namespaces/%s/secrets/%s-webhook-cert" % (rel_ns, full)

    def start(name):
        op = OperatorProcess(crd, str(tmp_path), name, args, kubeconfig=str(kubeconfig)).start()
        crd.wait_for(lambda: "webhook: serving POST /inject" in op.log()
                     or op.proc.poll() is not None, "%s serving the webhook" % name, 60)
        assert op.proc.poll() is None, op.log()[-3000:]
        return op

    operator = start("operator-live")
    try:
        secret = crd.get(secret_path)
        assert secret and secret["type"] == "kubernetes.io/tls", secret
        assert set(secret["data"]) == {"ca.crt", "ca.key", "tls.crt", "tls.key"}
        ca_pem = base64.b64decode(secret["data"]["ca.crt"])
        bundles = _ca_bundles(crd, full)
        assert bundles == [secret["data"]["ca.crt"]] * 2, bundles
        served = _served_certificate(port, ca_pem, hostname)
        assert served == x509.load_pem_x509_certificate(
            base64.b64decode(secret["data"]["tls.crt"])).public_bytes(Encoding.DER)
        with pytest.raises(ssl.SSLCertVerificationError):
            _served_certificate(port, ca_pem, "other.%s.svc" % rel_ns)
        assert "new CA stored in Secret %s/%s-webhook-cert" % (rel_ns, full) in operator.log()

        # A job under the chart's rules, the key Secret read by name and created.
        crd.wait_for(lambda: operator.http("/readyz")[0] == 200, "operator ready", 60)
        outcome = {"v": "run"}
        with FakeKubelet(crd, ns, outcome=lambda pod: outcome["v"]):
            apply(crd, ns, job_doc("live", replicas=2))
            wait_phase(crd, ns, "live", "Running", 60)
            outcome["v"] = "succeed"
            wait_phase(crd, ns, "live", "Succeeded", 60)
        key = crd.get("/api/v1/namespaces/%s/secrets/live-key" % ns)
        assert key and key["metadata"]["ownerReferences"][0]["name"] == "live", key
        assert "HTTP 403" not in operator.log(), operator.log()[-3000:]

        # Re-applying the chart as GitOps would: the caBundle the operator set stays.
        crd.kubectl("apply", "-f", str(manifest))
        assert _ca_bundles(crd, full) == bundles
        webhook_doc = [d for d in docs if d["kind"] == "MutatingWebhookConfiguration"]
        crd.kubectl("apply", "--server-side", "--field-manager=gitops", "-f", "-",
                    input=json.dumps(webhook_doc[0]))
        assert _ca_bundles(crd, full) == bundles
    finally:
        assert operator.stop() == 0, operator.log()[-3000:]

    # A restart reuses the Secret: the same CA, the same caBundle, no write.
    version = crd.get(secret_path)["metadata"]["resourceVersion"]
    args.append("--webhook-ca-bundle-check-period=0.5")
    operator = start("operator-live-again")
    try:
        assert "using the CA in Secret %s/%s-webhook-cert" % (rel_ns, full) in operator.log()
        assert crd.get(secret_path)["metadata"]["resourceVersion"] == version
        assert _ca_bundles(crd, full) == bundles
        _served_certificate(port, ca_pem, hostname)
        # A replace with the chart's manifest (no caBundle, as a GitOps "replace" or a
        # delete-and-recreate does) is repaired by the running operator.
        crd.kubectl("replace", "-f", "-", input=json.dumps(webhook_doc[0]))
        crd.wait_for(lambda: _ca_bundles(crd, full) == bundles, "the caBundle restored", 30)
        # Which words depend on how long this replica has served (past 2 periods its restore also
        # retires other CAs); either says the removed caBundle was put back.
        assert ("was changed or removed: restored" in operator.log()
                or "(other CAs retired, or it had been removed)" in operator.log()), \
            operator.log()[-3000:]
    finally:
        assert operator.stop() == 0, operator.log()[-3000:]
        crd.kubectl("delete", "-f", str(manifest), "--ignore-not-found", "--wait=false")
