"""A real Kueue (sigs.k8s.io/kueue, the manager `cmd/kueue`) against the test cluster.

scripts/build-testinfra.sh builds the manager pinned in tests/k8s/testinfra/kueue/go.mod into
.testinfra/bin/kueue and copies that module's CRDs (config/components/crd/bases) into
.testinfra/kueue-crds. Kueue(cluster, workdir).start() applies the CRDs, writes a Configuration
and starts the manager with the admin kubeconfig, on free loopback ports; helpers create
ResourceFlavors, ClusterQueues and LocalQueues and read Workloads (kueue.x-k8s.io/v1beta2, the
version this Kueue stores and prefers). Every wait has a deadline and names what it waited for.

How it differs from a Kueue installed by its manifests:
- None of Kueue's webhook configurations is registered with the API server, so nothing defaults
  or validates Kueue objects or Jobs on admission: objects must be complete when created (e.g. a
  Job must be created with spec.suspend: true; Kueue's Job webhook would set it).
- internalCertManagement stays on (its default). With it off, the manager insists on a metrics
  certificate at the fixed path /etc/kueue/metrics/certs and exits without one. On, it keeps its
  webhook certificate in the Secret kueue-webhook-server-cert of the namespace kueue-system
  (both created here, as Kueue's manifests do), which start() copies into a temporary certDir
  (as the kubelet would, the Secret being mounted there); at start-up Kueue waits until it has
  put its CA into the conversion webhook of the CRDs workloads, clusterqueues, localqueues,
  cohorts and multikueueclusters; so those CRDs get the conversion stanza of Kueue's own
  manifests (service kueue-webhook-service.kueue-system, path /convert). No such Service exists
  and the API server could not reach the webhook anyway: a request in v1beta1 for one of these
  kinds fails (the conversion webhook is unreachable); v1beta2, the storage version, never
  needs conversion. Use v1beta2.
- VisibilityOnDemand is off (its API server would need the aggregation layer).
"""
import base64
import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request

import pytest

from cluster import REPO, binaries, free_port, require_binaries, unavailable

KUEUE_CRDS = os.environ.get("KOROVOD_KUEUE_CRDS", os.path.join(REPO, ".testinfra", "kueue-crds"))
NAMESPACE = "kueue-system"
GROUP = "kueue.x-k8s.io"
VERSION = "v1beta2"
API = "/apis/%s/%s" % (GROUP, VERSION)
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
HOROVOD_FRAMEWORK = "HorovodJob.v1alpha1.korovod.dev"
# The CRDs that Kueue's manifests give a conversion webhook (config/components/crd/kustomization).
CONVERSION_WEBHOOK_CRDS = ("workloads", "clusterqueues", "localqueues", "cohorts",
                           "multikueueclusters")


def crd_files():
    """The CRD YAMLs scripts/build-testinfra.sh copied into .testinfra/kueue-crds (sorted)."""
    if not os.path.isdir(KUEUE_CRDS):
        return []
    return sorted(os.path.join(KUEUE_CRDS, f) for f in os.listdir(KUEUE_CRDS)
                  if f.endswith(".yaml"))


def require_kueue():
    """Skips the calling test when the cluster binaries, the kueue binary or its CRDs are missing,
    or fails it under KOROVOD_REQUIRE_K8S=1 (like cluster.require_binaries)."""
    paths = require_binaries("kueue")
    if not any(os.path.basename(f) == "kueue.x-k8s.io_workloads.yaml" for f in crd_files()):
        unavailable("missing Kueue's CRDs in %s: run scripts/build-testinfra.sh" % KUEUE_CRDS)
    return paths


def crd_documents():
    """Kueue's CRDs as dicts, with the conversion webhook of Kueue's manifests on the kinds that
    have one (see the module docstring)."""
    import yaml
    docs = []
    for path in crd_files():
        with open(path) as f:
            for doc in yaml.safe_load_all(f):
                if not doc:
                    continue
                plural = doc["spec"]["names"]["plural"]
                if plural in CONVERSION_WEBHOOK_CRDS:
                    doc["spec"]["conversion"] = {
                        "strategy": "Webhook",
                        "webhook": {"conversionReviewVersions": ["v1"], "clientConfig": {
                            "service": {"namespace": NAMESPACE, "name": "kueue-webhook-service",
                                        "path": "/convert"}}}}
                docs.append(doc)
    return docs


def apply_crds(cluster, deadline_s=60):
    """Applies Kueue's CRDs (server-side: the workloads CRD is too large for the
    last-applied-configuration annotation) and waits until they are Established."""
    docs = crd_documents()
    if not docs:
        raise RuntimeError("no Kueue CRDs in %s: run scripts/build-testinfra.sh" % KUEUE_CRDS)
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "--field-manager=korovod-test",
                    "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List",
                                                 "items": docs}))
    cluster.wait_established(*["crd/" + d["metadata"]["name"] for d in docs],
                             deadline_s=deadline_s)
    return [d["metadata"]["name"] for d in docs]


def condition(obj, type_):
    """The condition `type_` of obj's status (a dict), or None."""
    for c in ((obj or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") == type_:
            return c
    return None


def condition_true(obj, type_):
    c = condition(obj, type_)
    return bool(c) and c.get("status") == "True"


class Kueue:
    def __init__(self, cluster, workdir, frameworks=("batch/job",),
                 external_frameworks=(HOROVOD_FRAMEWORK,), feature_gates=None, extra_config=None,
                 log_level=None):
        """frameworks: Kueue's built-in integrations to enable (each needs its CRDs; batch/job
        needs none); external_frameworks: Kind.version.group of jobs whose Workloads their own
        controller manages; feature_gates: merged over {"VisibilityOnDemand": False};
        extra_config: merged into the Configuration's top level; log_level: zap level (e.g. 2
        logs each admission)."""
        self.cluster = cluster
        self.dir = workdir
        paths, why = binaries(("kueue",))
        if not paths:
            raise RuntimeError(why)
        self.binary = paths["kueue"]
        self.frameworks = list(frameworks)
        self.external_frameworks = list(external_frameworks)
        self.feature_gates = {"VisibilityOnDemand": False, **(feature_gates or {})}
        self.extra_config = dict(extra_config or {})
        self.log_level = log_level
        self.proc = None
        self.log_path = os.path.join(workdir, "kueue.log")
        self.config_path = os.path.join(workdir, "kueue-config.yaml")
        self.cert_dir = os.path.join(workdir, "kueue-webhook-certs")
        self.health_port = self.metrics_port = self.webhook_port = None
        self.start_seconds = None

    def config(self):
        cfg = {
            "apiVersion": "config.kueue.x-k8s.io/v1beta2",
            "kind": "Configuration",
            "namespace": NAMESPACE,
            "manageJobsWithoutQueueName": False,
            "leaderElection": {"leaderElect": False},
            "health": {"healthProbeBindAddress": "127.0.0.1:%d" % self.health_port},
            "metrics": {"bindAddress": "127.0.0.1:%d" % self.metrics_port},
            "webhook": {"host": "127.0.0.1", "port": self.webhook_port,
                        "certDir": self.cert_dir},
            "internalCertManagement": {"enable": True,
                                       "webhookServiceName": "kueue-webhook-service",
                                       "webhookSecretName": "kueue-webhook-server-cert"},
            # No waitForPodsReady: the block's presence turns it on.
            "integrations": {"frameworks": self.frameworks,
                             "externalFrameworks": self.external_frameworks},
            "featureGates": self.feature_gates,
        }
        cfg.update(self.extra_config)
        return cfg

    # --- lifecycle -------------------------------------------------------------------------
    def start(self, deadline_s=120):
        t0 = time.monotonic()
        apply_crds(self.cluster)
        code, body = self.cluster.request("POST", "/api/v1/namespaces",
                                          {"metadata": {"name": NAMESPACE}})
        if code not in (201, 409):
            raise RuntimeError("creating namespace %s: %s %s" % (NAMESPACE, code, body))
        # The cert rotator fills this Secret but does not create it (Kueue's manifests do).
        code, body = self.cluster.request("POST", "/api/v1/namespaces/%s/secrets" % NAMESPACE,
                                          {"metadata": {"name": "kueue-webhook-server-cert"}})
        if code not in (201, 409):
            raise RuntimeError("creating Secret %s/kueue-webhook-server-cert: %s %s"
                               % (NAMESPACE, code, body))
        os.makedirs(self.cert_dir, exist_ok=True)
        self.health_port, self.metrics_port = free_port(), free_port()
        self.webhook_port = free_port()
        with open(self.config_path, "w") as f:
            json.dump(self.config(), f, indent=1)  # JSON is YAML
        argv = [self.binary, "--config", self.config_path,
                "--kubeconfig", self.cluster.admin_kubeconfig,
                "--visibility-server-port", str(free_port())]
        if self.log_level is not None:
            argv.append("--zap-log-level=%s" % self.log_level)
        self._log = open(self.log_path, "a")
        self.proc = subprocess.Popen(argv, stdout=self._log, stderr=subprocess.STDOUT, cwd=self.dir)
        self.mount_webhook_cert(deadline_s - (time.monotonic() - t0))
        self.wait_ready(deadline_s - (time.monotonic() - t0))
        self.start_seconds = time.monotonic() - t0
        return self

    def mount_webhook_cert(self, deadline_s):
        """Plays the kubelet's Secret volume: Kueue's cert rotator puts the webhook certificate
        into the Secret kueue-webhook-server-cert and then waits for it to appear in certDir
        (tls.crt, tls.key), where a Deployment mounts that Secret."""
        end = time.monotonic() + max(deadline_s, 1)
        path = "/api/v1/namespaces/%s/secrets/kueue-webhook-server-cert" % NAMESPACE
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise RuntimeError("kueue exited with %s during start-up; log:\n%s"
                                   % (self.proc.returncode, self.tail(60)))
            data = (self.cluster.get(path) or {}).get("data") or {}
            if data.get("tls.crt") and data.get("tls.key"):
                # tls.crt last: the rotator waits for that file.
                for name in sorted(data, key=lambda n: n == "tls.crt"):
                    tmp = os.path.join(self.cert_dir, "." + name)
                    with open(tmp, "wb") as f:
                        f.write(base64.b64decode(data[name]))
                    os.replace(tmp, os.path.join(self.cert_dir, name))
                return
            time.sleep(0.3)
        raise RuntimeError("Secret %s/kueue-webhook-server-cert without tls.crt/tls.key after "
                           "%.0fs (kueue's cert rotator fills it); log:\n%s"
                           % (NAMESPACE, deadline_s, self.tail(60)))

    def http(self, path, port=None):
        try:
            with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port or self.health_port, path),
                                        timeout=5) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()
        except OSError as e:
            return 0, str(e)

    def wait_ready(self, deadline_s):
        end = time.monotonic() + max(deadline_s, 1)
        last = ""
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise RuntimeError("kueue exited with %s during start-up; log:\n%s"
                                   % (self.proc.returncode, self.tail(60)))
            code, body = self.http("/readyz")
            if code == 200:
                return
            last = "%s %s" % (code, body.strip()[:200])
            time.sleep(0.3)
        raise RuntimeError("kueue /readyz on 127.0.0.1:%d not ready after %.0fs (last: %s); "
                           "log:\n%s" % (self.health_port, deadline_s, last, self.tail(60)))

    def log(self):
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def tail(self, n=40):
        return "".join(self.log().splitlines(True)[-n:])

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout=20):
        """Stops the manager (SIGTERM, then SIGKILL after `timeout`). Returns None when it ran
        until now and stopped cleanly, else its log (it had exited, or exited with an error)."""
        if self.proc is None:
            return None
        died_before = self.proc.poll() is not None
        if not died_before:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        rc = self.proc.returncode
        self.proc = None
        if died_before or rc not in (0, -signal.SIGTERM):
            return "kueue exited with %s%s; log:\n%s" % (
                rc, " before stop()" if died_before else "", self.log())
        return None

    # --- objects ---------------------------------------------------------------------------
    def _create(self, path, doc):
        code, body = self.cluster.request("POST", path, doc)
        if code != 201:
            raise AssertionError("creating %s %s: %s %s"
                                 % (doc["kind"], doc["metadata"]["name"], code, body))
        return body

    def resource_flavor(self, name, node_labels=None, **spec):
        """Creates a ResourceFlavor; node_labels: its spec.nodeLabels (Kueue puts them into the
        admitted pods' nodeSelector)."""
        spec = dict(spec)
        if node_labels:
            spec["nodeLabels"] = dict(node_labels)
        return self._create(API + "/resourceflavors", {
            "apiVersion": GROUP + "/" + VERSION, "kind": "ResourceFlavor",
            "metadata": {"name": name}, "spec": spec})

    def cluster_queue(self, name, flavor, cpu="4", memory="8Gi", namespace_selector=None,
                      **spec):
        """Creates a ClusterQueue with one resource group (cpu, memory) of one flavor with the
        given nominal quota; namespace_selector defaults to {} (every namespace)."""
        spec = dict(spec)
        spec.setdefault("namespaceSelector", namespace_selector or {})
        spec.setdefault("resourceGroups", [{
            "coveredResources": ["cpu", "memory"],
            "flavors": [{"name": flavor, "resources": [
                {"name": "cpu", "nominalQuota": str(cpu)},
                {"name": "memory", "nominalQuota": str(memory)}]}]}])
        return self._create(API + "/clusterqueues", {
            "apiVersion": GROUP + "/" + VERSION, "kind": "ClusterQueue",
            "metadata": {"name": name}, "spec": spec})

    def local_queue(self, namespace, name, cluster_queue):
        return self._create(API + "/namespaces/%s/localqueues" % namespace, {
            "apiVersion": GROUP + "/" + VERSION, "kind": "LocalQueue",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"clusterQueue": cluster_queue}})

    def workload_priority_class(self, name, value):
        """Creates a WorkloadPriorityClass; a Workload refers to it with spec.priorityClassRef
        {group: kueue.x-k8s.io, kind: WorkloadPriorityClass, name} and spec.priority: value."""
        return self._create(API + "/workloadpriorityclasses", {
            "apiVersion": GROUP + "/" + VERSION, "kind": "WorkloadPriorityClass",
            "metadata": {"name": name}, "value": value})

    def wait_queue_active(self, namespace, name, cluster_queue, deadline_s=30):
        """Waits until Kueue reports the ClusterQueue and the LocalQueue Active."""
        self.cluster.wait_for(lambda: condition_true(
            self.cluster.get(API + "/clusterqueues/" + cluster_queue), "Active"),
            "ClusterQueue %s Active" % cluster_queue, deadline_s)
        self.cluster.wait_for(lambda: condition_true(
            self.cluster.get(API + "/namespaces/%s/localqueues/%s" % (namespace, name)),
            "Active"), "LocalQueue %s/%s Active" % (namespace, name), deadline_s)

    def workloads(self, namespace):
        body = self.cluster.get(API + "/namespaces/%s/workloads" % namespace)
        return (body or {}).get("items") or []

    def workload_of(self, namespace, owner_uid):
        """The Workload that has an ownerReference to the object with UID owner_uid, or None."""
        for wl in self.workloads(namespace):
            if any(o.get("uid") == owner_uid for o in wl["metadata"].get("ownerReferences", [])):
                return wl
        return None

    def wait_workload(self, namespace, owner_uid, what, predicate=lambda wl: True, deadline_s=60):
        """Waits for the Workload owned by owner_uid to satisfy predicate; returns it."""
        return self.cluster.wait_for(
            lambda: (lambda wl: wl if wl and predicate(wl) else None)(
                self.workload_of(namespace, owner_uid)),
            "Workload of %s in %s: %s" % (owner_uid, namespace, what), deadline_s)


def kueue_fixture(cluster, tmp_path_factory, **kwargs):
    """Generator body of a pytest fixture: a started Kueue; on teardown a manager that died or
    failed makes the test fail with its log."""
    require_kueue()
    k = Kueue(cluster, str(tmp_path_factory.mktemp("kueue")), **kwargs)
    try:
        k.start()
    except Exception:
        k.stop()
        raise
    yield k
    problem = k.stop()
    if problem:
        raise AssertionError(problem)


@pytest.fixture(scope="module")
def kueue(cluster, tmp_path_factory):
    """A Kueue manager (batch/job and HorovodJob.v1alpha1.korovod.dev) for the module."""
    yield from kueue_fixture(cluster, tmp_path_factory)
