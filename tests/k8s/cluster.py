"""A real Kubernetes control plane on loopback for the operator's integration tests.

Starts Debian's etcd and the pinned kube-apiserver (scripts/build-testinfra.sh) on free loopback
ports with a throwaway CA, a serving certificate, a service-account signing key, and two users:
`admin` (bearer token, system:masters) and `operator-cert` (a client certificate), and writes a
kubeconfig for each. There is no kubelet, scheduler or controller-manager: tests play those parts
(tests/k8s/fake_kubelet.py), or use real_node.RealNodeCluster, which adds them (and a container
runtime) through the _issue_more_certs and _more_apiserver_args hooks. Every wait has a deadline
and names what it waited for.
"""
import json
import os
import shutil
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TESTINFRA_BIN = os.environ.get("KOROVOD_TESTINFRA_BIN", os.path.join(REPO, ".testinfra", "bin"))
ADMIN_TOKEN = "korovod-test-admin-token"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def binaries(extra=()):
    """The paths of etcd, kube-apiserver and kubectl (and of each name in `extra` that
    scripts/build-testinfra.sh builds, e.g. helm), or a message naming what is missing."""
    paths = {
        "etcd": shutil.which("etcd"),
        "kube-apiserver": os.path.join(TESTINFRA_BIN, "kube-apiserver"),
        "kubectl": os.path.join(TESTINFRA_BIN, "kubectl"),
    }
    for name in extra:
        paths[name] = os.path.join(TESTINFRA_BIN, name)
    missing = [n for n, p in paths.items() if not p or not os.access(p, os.X_OK)]
    if missing:
        return None, ("missing %s: run scripts/build-testinfra.sh (kube-apiserver, kubectl, "
                      "kube-scheduler, kube-controller-manager, kubelet, helm, kueue) and install "
                      "etcd-server" % ", ".join(missing))
    return paths, ""


def unavailable(why):
    """Skips the calling test for want of `why`, or fails it under KOROVOD_REQUIRE_K8S=1 (CI,
    where scripts/test.sh installs and builds everything first)."""
    import pytest
    if os.environ.get("KOROVOD_REQUIRE_K8S") == "1":
        pytest.fail(why)
    pytest.skip(why)


def require_binaries(*extra):
    """Skips the calling test when the binaries (etcd, kube-apiserver, kubectl and `extra`, e.g.
    "helm") are missing, or fails it under KOROVOD_REQUIRE_K8S=1 (unavailable). Returns their
    paths."""
    paths, why = binaries(extra)
    if not paths:
        unavailable(why)
    return paths


def _openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def issue_cert(pki, name, subj, ext=""):
    """A key and a certificate for `subj` signed by the test CA in pki, as pki/name.{key,crt};
    ext: an openssl extension line (e.g. subjectAltName=...)."""
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", name + ".key", "-out",
             name + ".csr", "-subj", subj, cwd=pki)
    args = ["x509", "-req", "-in", name + ".csr", "-CA", "ca.crt", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", name + ".crt", "-days", "2"]
    if ext:
        with open(os.path.join(pki, name + ".ext"), "w") as f:
            f.write(ext + "\n")
        args += ["-extfile", name + ".ext"]
    _openssl(*args, cwd=pki)


def _kubeconfig(server, ca, user):
    return json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "test",
        "clusters": [{"name": "test", "cluster": {"server": server, "certificate-authority": ca}}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "test", "context": {"cluster": "test", "user": "u",
                                                  "namespace": "default"}}],
    }, indent=1)


# Audit policy of Cluster(audit_users=...): who did what (verb, resource, response code), no bodies,
# for the listed users only (the API server's own and admin traffic stays out of the log).
AUDIT_POLICY = """apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: Metadata
    users: %s
  - level: None
"""


class Cluster:
    def __init__(self, workdir, extra_apiserver_args=(), audit_users=()):
        """audit_users: users whose requests kube-apiserver writes to self.audit_log (JSON lines,
        Metadata level); empty: no audit log."""
        self.dir = workdir
        self.extra_apiserver_args = list(extra_apiserver_args)
        self.audit_users = list(audit_users)
        self.audit_log = os.path.join(workdir, "audit.log") if self.audit_users else None
        self.paths, why = binaries()
        if not self.paths:
            raise RuntimeError(why)
        self.procs = []
        self.server = None
        # The names of kube-apiserver's serving certificate (a subclass may add some).
        self.server_sans = ["IP:127.0.0.1", "DNS:localhost", "DNS:kubernetes.default.svc"]

    # --- lifecycle -------------------------------------------------------------------------
    def start(self, deadline_s=120):
        pki = os.path.join(self.dir, "pki")
        os.makedirs(pki, exist_ok=True)
        _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out",
                 "ca.crt", "-days", "2", "-subj", "/CN=korovod-test-ca", cwd=pki)
        issue_cert(pki, "server", "/CN=kube-apiserver", "subjectAltName=" + ",".join(self.server_sans))
        issue_cert(pki, "operator", "/CN=korovod-operator-cert/O=korovod-test")
        self._issue_more_certs(pki)
        _openssl("genrsa", "-out", "sa.key", "2048", cwd=pki)
        _openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=pki)
        with open(os.path.join(self.dir, "tokens.csv"), "w") as f:
            f.write('%s,admin,admin,"system:masters"\n' % ADMIN_TOKEN)

        audit_args = []
        if self.audit_users:
            policy = os.path.join(self.dir, "audit-policy.yaml")
            with open(policy, "w") as f:
                f.write(AUDIT_POLICY % json.dumps(self.audit_users))
            audit_args = ["--audit-policy-file=" + policy, "--audit-log-path=" + self.audit_log,
                          "--audit-log-mode=blocking", "--audit-log-format=json"]

        etcd_port, etcd_peer, api_port = free_port(), free_port(), free_port()
        self._spawn("etcd", [self.paths["etcd"], "--data-dir", os.path.join(self.dir, "etcd"),
                             "--listen-client-urls", "http://127.0.0.1:%d" % etcd_port,
                             "--advertise-client-urls", "http://127.0.0.1:%d" % etcd_port,
                             "--listen-peer-urls", "http://127.0.0.1:%d" % etcd_peer,
                             "--initial-advertise-peer-urls", "http://127.0.0.1:%d" % etcd_peer,
                             "--initial-cluster", "default=http://127.0.0.1:%d" % etcd_peer])
        self._apiserver_argv = [
            self.paths["kube-apiserver"], "--etcd-servers=http://127.0.0.1:%d" % etcd_port,
            "--bind-address=127.0.0.1", "--secure-port=%d" % api_port,
            "--tls-cert-file=%s/server.crt" % pki, "--tls-private-key-file=%s/server.key" % pki,
            "--client-ca-file=%s/ca.crt" % pki,
            "--token-auth-file=%s" % os.path.join(self.dir, "tokens.csv"),
            "--authorization-mode=RBAC",
            "--service-account-issuer=https://kubernetes.default.svc",
            "--service-account-key-file=%s/sa.pub" % pki,
            "--service-account-signing-key-file=%s/sa.key" % pki,
            "--service-cluster-ip-range=10.96.0.0/16",
            # Short watch timeouts make the operator's watch reconnect path run in every test.
            "--min-request-timeout=30", *audit_args, *self._more_apiserver_args(pki),
            *self.extra_apiserver_args]
        self._spawn("kube-apiserver", self._apiserver_argv)
        self.etcd_url = "http://127.0.0.1:%d" % etcd_port
        self.server = "https://127.0.0.1:%d" % api_port
        self.ca = os.path.join(pki, "ca.crt")
        self.admin_kubeconfig = os.path.join(self.dir, "admin.kubeconfig")
        with open(self.admin_kubeconfig, "w") as f:
            f.write(_kubeconfig(self.server, self.ca, {"token": ADMIN_TOKEN}))
        self.cert_kubeconfig = os.path.join(self.dir, "operator-cert.kubeconfig")
        with open(self.cert_kubeconfig, "w") as f:
            f.write(_kubeconfig(self.server, self.ca, {
                "client-certificate": os.path.join(pki, "operator.crt"),
                "client-key": os.path.join(pki, "operator.key")}))
        self._ssl = ssl.create_default_context(cafile=self.ca)
        self._wait_ready(deadline_s)
        # The controller-manager would create each namespace's default service account; pods
        # cannot be admitted without it.
        self.wait_for(lambda: self.request("GET", "/api/v1/namespaces/default")[0] == 200,
                      "namespace default", 30)
        self.kubectl("create", "serviceaccount", "default")
        return self

    def _issue_more_certs(self, pki):
        """Hook for subclasses (real_node.RealNodeCluster): certificates the API server needs at
        start-up, issued by the CA in pki."""

    def _more_apiserver_args(self, pki):
        """Hook for subclasses: kube-apiserver flags of their own (before extra_apiserver_args)."""
        return []

    def restart_apiserver(self, deadline_s=120, kill=False):
        """Stops kube-apiserver (every watch connection drops) and starts it again on the same
        port and etcd. kill: SIGKILL (a crash; a graceful stop waits up to 60 s for the open
        connections of clients that are not frozen)."""
        p = next(p for p in self.procs if p.korovod_name == "kube-apiserver")
        if kill:
            p.kill()
        else:
            p.terminate()
        p.wait(30)
        self.procs.remove(p)
        self._spawn("kube-apiserver", self._apiserver_argv)
        self._wait_ready(deadline_s)

    def _wait_ready(self, deadline_s):
        end = time.monotonic() + deadline_s
        last = ""
        while time.monotonic() < end:
            for p in self.procs:
                if p.poll() is not None:
                    raise RuntimeError("%s exited with %s during start-up; log: %s"
                                       % (p.korovod_name, p.returncode, self._tail(p)))
            try:
                code, body = self.request("GET", "/readyz")
                if code == 200:
                    break
                last = body
            except OSError as e:
                last = str(e)
            time.sleep(0.3)
        else:
            raise RuntimeError("kube-apiserver at %s not ready after %ds: %s; log: %s"
                               % (self.server, deadline_s, last, self._tail(self.procs[-1])))

    def _spawn(self, name, argv):
        log = open(os.path.join(self.dir, name + ".log"), "a")
        p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=self.dir)
        p.korovod_name = name
        p.korovod_log = log.name
        self.procs.append(p)

    def _tail(self, p, n=20):
        try:
            with open(p.korovod_log) as f:
                return "".join(f.readlines()[-n:])
        except OSError:
            return ""

    def stop(self):
        for p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        self.procs = []

    # --- clients ---------------------------------------------------------------------------
    def kubectl(self, *args, input=None, check=True, kubeconfig=None, timeout=60):
        r = subprocess.run([self.paths["kubectl"], "--kubeconfig",
                            kubeconfig or self.admin_kubeconfig, *args],
                           input=input, capture_output=True, text=True, timeout=timeout)
        if check and r.returncode != 0:
            raise AssertionError("kubectl %s failed (%d): %s" % (" ".join(args), r.returncode,
                                                                r.stderr))
        return r

    def wait_established(self, *crds, deadline_s=60):
        """`kubectl wait --for=condition=Established` on `crds` ("crd/<name>"), asked again while a
        CRD has no status yet: right after its create kubectl fails at once on the null
        .status.conditions ("accessor error") instead of waiting."""
        end = time.monotonic() + deadline_s
        while True:
            left = max(1, int(end - time.monotonic()))
            r = self.kubectl("wait", "--for=condition=Established", "--timeout=%ds" % left, *crds,
                             check=False, timeout=left + 10)
            if r.returncode == 0:
                return
            if "accessor error" not in r.stderr or time.monotonic() >= end:
                raise AssertionError("kubectl wait Established %s failed (%d): %s" % (
                    " ".join(crds), r.returncode, r.stderr))
            time.sleep(0.2)

    def request(self, method, path, body=None, content_type="application/json", timeout=30):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.server + path, data=data, method=method, headers={
            "Authorization": "Bearer " + ADMIN_TOKEN, "Content-Type": content_type,
            "Accept": "application/json"})
        try:
            with urllib.request.urlopen(req, context=self._ssl, timeout=timeout) as r:
                raw = r.read().decode()
                code = r.status
        except urllib.error.HTTPError as e:
            raw = e.read().decode()
            code = e.code
        try:
            return code, json.loads(raw)
        except ValueError:
            return code, raw

    def compact_etcd(self):
        """Compacts etcd to its current revision (through its JSON gateway), so every watch from
        an older resourceVersion ends in 410 Gone. Returns the revision."""
        def post(path, body):
            req = urllib.request.Request(self.etcd_url + path, data=json.dumps(body).encode(),
                                         method="POST")
            with urllib.request.urlopen(req, timeout=10) as r:
                return json.loads(r.read().decode())
        rev = int(post("/v3/kv/range", {"key": "AA=="})["header"]["revision"])
        post("/v3/kv/compaction", {"revision": rev, "physical": True})
        return rev

    def audit_events(self, user):
        """The audit events (dicts) of `user`'s requests so far, in order (audit_users only)."""
        events = []
        with open(self.audit_log) as f:
            for line in f:
                e = json.loads(line)
                if e.get("user", {}).get("username") == user:
                    events.append(e)
        return events

    def get(self, path):
        code, body = self.request("GET", path)
        return body if code == 200 else None

    def wait_for(self, predicate, what, deadline_s=60, interval=0.2):
        end = time.monotonic() + deadline_s
        while time.monotonic() < end:
            v = predicate()
            if v:
                return v
            time.sleep(interval)
        raise AssertionError("timed out after %ss waiting for %s" % (deadline_s, what))
