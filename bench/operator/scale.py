#!/usr/bin/python3
"""korovod-operator at cluster scale: its memory, its API traffic and its speed against a real
kube-apiserver + etcd on loopback (tests/k8s/cluster.py), with no kubelet: a batch kubelet here
binds pods and marks them Running, in batches, as a watch tells it about them.

Stages, one operator process (user `korovod-operator-cert`, so the API server's audit log holds its
requests and nobody else's):

  nodes     --nodes Node objects of realistic size (--images container images each, ~13 KB at
            50), created before the operator starts; one elastic job exists throughout (the
            operator keeps a Node cache only while one does), so the Node cost is counted.
  jobs      --jobs HorovodJobs of 2 workers, created at once; until every one is Running.
  rest      --rest-seconds with nothing changing: only watches and lease renewals should be sent.
  big       one job of --big-workers workers: apply -> every pod created (the issue's target:
            within 60 s at the default client QPS), then every pod Running; its status size.

Measured: the operator's RSS after each stage (VmRSS, and VmHWM at the end), its API requests per
second by verb during each stage (from the audit log: watches counted apart), reconcile latency
p50/p99 (korovod_operator_reconcile_duration_seconds, interpolated in its buckets), the work queue
depth (sampled every 0.5 s: max), and the big job's .status in bytes.

Writes a JSON list of rows ({"bench": "operator-scale", "metric", "value", "unit", ...}) to --out
and prints a table.

    KOROVOD_BUILD_DIR=build /usr/bin/python3 bench/operator/scale.py \
        --out docs/bench-results/operator-scale.json
    ... --nodes 200 --jobs 50 --big-workers 100 --rest-seconds 10   # a quick look (~2 min)
"""
import argparse
import concurrent.futures
import http.client
import json
import os
import re
import ssl
import sys
import tempfile
import threading
import time
import urllib.parse

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "tests", "k8s"))

from cluster import ADMIN_TOKEN, Cluster  # noqa: E402
from operator_process import OperatorProcess  # noqa: E402

OPERATOR_USER = "korovod-operator-cert"
CRD = os.path.join(REPO, "crds", "korovod.dev_horovodjobs.yaml")
JOBS = "/apis/korovod.dev/v1alpha1/namespaces/%s/horovodjobs"
NS = "scale"


class Api:
    """Admin requests over one kept-alive TLS connection per thread."""

    def __init__(self, server, ca):
        u = urllib.parse.urlparse(server)
        self.host, self.port = u.hostname, u.port
        self.ctx = ssl.create_default_context(cafile=ca)
        self.local = threading.local()

    def _conn(self):
        c = getattr(self.local, "c", None)
        if c is None:
            c = http.client.HTTPSConnection(self.host, self.port, context=self.ctx, timeout=120)
            self.local.c = c
        return c

    def call(self, method, path, body=None, ctype="application/json"):
        data = None if body is None else json.dumps(body)
        last = None
        for _ in range(4):
            try:
                c = self._conn()
                c.request(method, path, body=data, headers={
                    "Authorization": "Bearer " + ADMIN_TOKEN, "Content-Type": ctype,
                    "Accept": "application/json"})
                r = c.getresponse()
                raw = r.read()
                return r.status, (json.loads(raw) if raw else None)
            except (http.client.HTTPException, OSError) as e:
                last = e
                self.local.c = None
                time.sleep(0.2)
        raise RuntimeError("%s %s failed: %r" % (method, path, last))

    def ok(self, method, path, body=None, ctype="application/json", allow=()):
        code, out = self.call(method, path, body, ctype)
        if code >= 300 and code not in allow:
            raise RuntimeError("%s %s -> %d: %s" % (method, path, code, str(out)[:300]))
        return out


def parallel(fn, items, threads=8):
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        for f in [pool.submit(fn, i) for i in items]:
            f.result()


def node_doc(i, images):
    """A Node as a kubelet of a GPU cluster registers it: labels, 5 conditions, addresses,
    capacity, nodeInfo and `images` cached images (the bulk of a real Node's bytes)."""
    name = "node-%04d" % i
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    cond = [{"type": t, "status": "False", "reason": "Kubelet" + t.replace("Pressure", "Ok"),
             "message": "kubelet has no " + t, "lastHeartbeatTime": now,
             "lastTransitionTime": now} for t in ("MemoryPressure", "DiskPressure", "PIDPressure",
                                                  "NetworkUnavailable")]
    cond.append({"type": "Ready", "status": "True", "reason": "KubeletReady",
                 "message": "kubelet is posting ready status", "lastHeartbeatTime": now,
                 "lastTransitionTime": now})
    imgs = [{"names": ["registry.example.com/team-%02d/image-%03d@sha256:%064x" % (k % 17, k,
                                                                                 i * 1000 + k),
                       "registry.example.com/team-%02d/image-%03d:v1.%d.%d" % (k % 17, k, k, i)],
             "sizeBytes": 100000000 + 7919 * k} for k in range(images)]
    res = {"cpu": "96", "memory": "1056291448Ki", "nvidia.com/gpu": "8", "pods": "110",
           "ephemeral-storage": "3749183044Ki", "hugepages-1Gi": "0", "hugepages-2Mi": "0"}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {
        "kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch":
        "amd64", "node.kubernetes.io/instance-type": "gpu-8x", "topology.kubernetes.io/zone":
        "zone-%d" % (i % 3), "topology.kubernetes.io/region": "region-1",
        "example.com/rack": "rack-%03d" % (i // 16)}, "annotations": {
        "node.alpha.kubernetes.io/ttl": "0",
        "volumes.kubernetes.io/controller-managed-attach-detach": "true"}},
        "spec": {"podCIDR": "10.%d.%d.0/24" % (i // 256, i % 256)},
        "status": {"capacity": res, "allocatable": res, "conditions": cond,
                   "addresses": [{"type": "InternalIP", "address": "10.1.%d.%d" % (i // 256,
                                                                                   i % 256)},
                                 {"type": "Hostname", "address": name}],
                   "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
                   "nodeInfo": {"machineID": "%032x" % i, "systemUUID": "%032x" % (i + 7),
                                "bootID": "%032x" % (i + 9), "kernelVersion": "6.1.0-28-amd64",
                                "osImage": "Debian GNU/Linux 12 (bookworm)",
                                "containerRuntimeVersion": "containerd://1.7.24",
                                "kubeletVersion": "v1.31.4", "kubeProxyVersion": "v1.31.4",
                                "operatingSystem": "linux", "architecture": "amd64"},
                   "images": imgs}}


def job_doc(name, replicas, elastic=False):
    spec = {"replicas": replicas, "sidecar": {"image": "korovod/sidecar:bench"},
            "template": {"spec": {"containers": [{"name": "trainer",
                                                  "image": "korovod/trainer:bench",
                                                  "command": ["python3", "train.py"]}]}}}
    if elastic:
        spec["elastic"] = {"minReplicas": 1, "maxReplicas": replicas}
    return {"apiVersion": "korovod.dev/v1alpha1", "kind": "HorovodJob",
            "metadata": {"name": name, "namespace": NS}, "spec": spec}


class BatchKubelet:
    """Watches the workers' pods; every `period` seconds binds the new ones and marks the bound
    ones Running and Ready (merge patches on /status, 8 at a time), and removes deleted ones."""

    def __init__(self, api, period=0.5):
        self.api = api
        self.period = period
        self.todo = {}  # name -> pod (latest seen)
        self.mu = threading.Lock()
        self.stop = threading.Event()
        self.errors = []
        self.threads = [threading.Thread(target=self._watch, daemon=True),
                        threading.Thread(target=self._work, daemon=True)]

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()

    def _watch(self):
        rv = ""
        while not self.stop.is_set():
            try:
                if not rv:
                    lst = self.api.ok("GET", "/api/v1/namespaces/%s/pods" % NS)
                    rv = lst["metadata"]["resourceVersion"]
                    with self.mu:
                        for p in lst["items"]:
                            self.todo[p["metadata"]["name"]] = p
                conn = http.client.HTTPSConnection(self.api.host, self.api.port,
                                                   context=self.api.ctx, timeout=600)
                conn.request("GET", "/api/v1/namespaces/%s/pods?watch=1&resourceVersion=%s"
                             "&allowWatchBookmarks=true" % (NS, rv),
                             headers={"Authorization": "Bearer " + ADMIN_TOKEN})
                r = conn.getresponse()
                while not self.stop.is_set():
                    line = r.readline()
                    if not line:
                        break
                    ev = json.loads(line)
                    obj = ev["object"]
                    if ev["type"] == "ERROR":
                        rv = ""
                        break
                    rv = obj["metadata"]["resourceVersion"]
                    if ev["type"] in ("ADDED", "MODIFIED"):
                        with self.mu:
                            self.todo[obj["metadata"]["name"]] = obj
                conn.close()
            except Exception as e:  # noqa: BLE001 (keep playing the kubelet; reported at the end)
                self.errors.append(repr(e))
                rv = ""
                time.sleep(0.5)

    def _handle(self, pod):
        meta, name = pod["metadata"], pod["metadata"]["name"]
        path = "/api/v1/namespaces/%s/pods/%s" % (NS, name)
        if meta.get("deletionTimestamp"):
            self.api.call("DELETE", path, {"kind": "DeleteOptions", "apiVersion": "v1",
                                           "gracePeriodSeconds": 0,
                                           "preconditions": {"uid": meta["uid"]}})
        elif not pod["spec"].get("nodeName"):
            self.api.call("POST", path + "/binding", {
                "apiVersion": "v1", "kind": "Binding", "metadata": {"name": name},
                "target": {"apiVersion": "v1", "kind": "Node", "name": "node-%04d" % (
                    hash(name) % 2000)}})
        elif pod.get("status", {}).get("phase") != "Running":
            now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            running = lambda cs: [{"name": c["name"], "image": c.get("image", ""), "imageID": "",
                                   "ready": True, "restartCount": 0, "started": True,
                                   "state": {"running": {"startedAt": now}}} for c in cs]
            self.api.call("PATCH", path + "/status", {"status": {
                "phase": "Running", "hostIP": "10.1.0.1", "podIP": "10.244.%d.%d" % (
                    hash(name) % 250, hash(name + "x") % 250 + 2), "startTime": now,
                "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": now},
                               {"type": "PodScheduled", "status": "True",
                                "lastTransitionTime": now}],
                "initContainerStatuses": running(pod["spec"].get("initContainers", [])),
                "containerStatuses": running(pod["spec"]["containers"])}},
                ctype="application/merge-patch+json")

    def _work(self):
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            while not self.stop.wait(self.period):
                with self.mu:
                    batch, self.todo = list(self.todo.values()), {}
                for f in [pool.submit(self._handle, p) for p in batch]:
                    try:
                        f.result()
                    except Exception as e:  # noqa: BLE001
                        self.errors.append(repr(e))


class Probe:
    """Samples the operator's RSS and work-queue depth every 0.5 s."""

    def __init__(self, op):
        self.op = op
        self.depth_max = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def rss_mib(self, field="VmRSS"):
        with open("/proc/%d/status" % self.op.proc.pid) as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024.0
        return float("nan")

    def _loop(self):
        while not self.stop.wait(0.5):
            d = self.op.metric("korovod_operator_workqueue_depth")
            if d is not None:
                self.depth_max = max(self.depth_max, int(d))


def quantile(op, q):
    """histogram_quantile(q) of the reconcile duration, in ms (linear within a bucket)."""
    code, text = op.http("/metrics")
    buckets = []
    for line in text.splitlines():
        m = re.match(r'korovod_operator_reconcile_duration_seconds_bucket\{le="([^"]+)"\} (\S+)',
                     line)
        if m:
            buckets.append((float("inf") if m.group(1) == "+Inf" else float(m.group(1)),
                            float(m.group(2))))
    if not buckets or buckets[-1][1] == 0:
        return float("nan")
    rank = q * buckets[-1][1]
    prev_le, prev_n = 0.0, 0.0
    for le, n in buckets:
        if n >= rank:
            if le == float("inf"):
                return prev_le * 1000
            return (prev_le + (le - prev_le) * (rank - prev_n) / max(n - prev_n, 1e-9)) * 1000
        prev_le, prev_n = le, n
    return float("nan")


def audit_rates(cluster, t0, t1):
    """The operator's requests with requestReceivedTimestamp in [t0, t1): per second by verb
    (watches apart), and the non-watch requests that were not lease renewals."""
    counts, other = {}, 0
    for e in cluster.audit_events(OPERATOR_USER):
        ts = e.get("requestReceivedTimestamp", "")
        t = time.mktime(time.strptime(ts[:19], "%Y-%m-%dT%H:%M:%S")) - time.timezone
        t += float("0" + ts[19:].rstrip("Z")) if ts[19:20] == "." else 0
        if not t0 <= t < t1:
            continue
        verb = e.get("verb", "?")
        counts[verb] = counts.get(verb, 0) + 1
        res = e.get("objectRef", {}).get("resource", "")
        if verb != "watch" and res != "leases":
            other += 1
    span = max(t1 - t0, 1e-9)
    return {v: round(n / span, 2) for v, n in sorted(counts.items())}, round(other / span, 2)


def wait(what, pred, deadline_s, interval=0.5):
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        v = pred()
        if v:
            return v
        time.sleep(interval)
    raise RuntimeError("timed out after %ds waiting for %s" % (deadline_s, what))


def phases(api):
    lst = api.ok("GET", JOBS % NS)
    out = {}
    for j in lst["items"]:
        p = j.get("status", {}).get("phase", "")
        out[p] = out.get(p, 0) + 1
    return out


def run(a):
    rows = []

    def row(metric, value, unit, **extra):
        r = {"bench": "operator-scale", "metric": metric, "value": value, "unit": unit,
             "nodes": a.nodes, "jobs": a.jobs, "big_workers": a.big_workers}
        r.update(extra)
        rows.append(r)
        print("%-44s %12s %s" % (metric, value, unit), flush=True)

    work = tempfile.mkdtemp(prefix="korovod-scale-")
    cluster = Cluster(work, audit_users=[OPERATOR_USER]).start()
    try:
        api = Api(cluster.server, cluster.ca)
        cluster.kubectl("create", "clusterrolebinding", "bench-operator",
                        "--clusterrole=cluster-admin", "--user=" + OPERATOR_USER)
        cluster.kubectl("apply", "-f", CRD)
        cluster.wait_established("crd/horovodjobs.korovod.dev")
        cluster.kubectl("create", "namespace", NS)
        api.ok("POST", "/api/v1/namespaces/%s/serviceaccounts" % NS,
               {"metadata": {"name": "default"}}, allow=(409,))

        t = time.monotonic()
        parallel(lambda i: api.ok("POST", "/api/v1/nodes", node_doc(i, a.images)),
                 range(a.nodes))
        one = api.ok("GET", "/api/v1/nodes/node-0000")
        print("created %d nodes of %d bytes in %.1f s" % (a.nodes, len(json.dumps(one)),
                                                         time.monotonic() - t), flush=True)
        row("node_object_bytes", len(json.dumps(one)), "B")

        api.ok("POST", JOBS % NS, job_doc("elastic-0", 2, elastic=True))
        op = OperatorProcess(cluster, work, name="scale", kubeconfig=cluster.cert_kubeconfig,
                             args=["--elastic-rendezvous-host",
                                   "127.0.0.1", *a.operator_args]).start()
        probe = Probe(op)
        wait("the operator's /readyz", lambda: op.http("/readyz")[0] == 200, 120)
        probe.thread.start()
        time.sleep(a.settle_seconds)
        row("rss_after_nodes", round(probe.rss_mib(), 1), "MiB")

        with BatchKubelet(api) as kubelet:
            t_jobs = time.time()
            parallel(lambda i: api.ok("POST", JOBS % NS, job_doc("job-%04d" % i, 2)),
                     range(a.jobs))
            wait("%d jobs Running" % a.jobs,
                 lambda: phases(api).get("Running", 0) >= a.jobs, a.deadline)
            t_running = time.time()
            row("jobs_to_running", round(t_running - t_jobs, 1), "s")
            verbs, other = audit_rates(cluster, t_jobs, t_running)
            row("requests_per_s_jobs_start", other, "req/s", by_verb=verbs)
            row("reconcile_p50_jobs", round(quantile(op, 0.5), 1), "ms")
            row("reconcile_p99_jobs", round(quantile(op, 0.99), 1), "ms")
            row("queue_depth_max_jobs", probe.depth_max, "keys")
            time.sleep(a.settle_seconds)
            row("rss_after_jobs", round(probe.rss_mib(), 1), "MiB")

            t_rest = time.time()
            time.sleep(a.rest_seconds)
            verbs, other = audit_rates(cluster, t_rest, time.time())
            row("requests_per_s_at_rest", other, "req/s", by_verb=verbs,
                note="non-watch requests other than lease renewals")

            probe.depth_max = 0
            t_big = time.time()
            api.ok("POST", JOBS % NS, job_doc("big", a.big_workers))
            sel = "/api/v1/namespaces/%s/pods?labelSelector=korovod.dev/job-name%%3Dbig" % NS
            wait("the big job's %d pods" % a.big_workers,
                 lambda: len(api.ok("GET", sel)["items"]) >= a.big_workers, a.deadline, 0.25)
            row("big_job_pods_created", round(time.time() - t_big, 1), "s",
                target="<= 60 s at the default QPS")
            wait("the big job Running", lambda: (api.ok("GET", (JOBS % NS) + "/big").get(
                "status", {}).get("phase") == "Running"), a.deadline)
            row("big_job_to_running", round(time.time() - t_big, 1), "s")
            verbs, other = audit_rates(cluster, t_big, time.time())
            row("requests_per_s_big_start", other, "req/s", by_verb=verbs)
            status = api.ok("GET", (JOBS % NS) + "/big").get("status", {})
            row("big_job_status_bytes", len(json.dumps(status, separators=(",", ":"))), "B",
                target="< 256 KiB")
            row("reconcile_p50_all", round(quantile(op, 0.5), 1), "ms")
            row("reconcile_p99_all", round(quantile(op, 0.99), 1), "ms")
            row("queue_depth_max_big", probe.depth_max, "keys")
            time.sleep(a.settle_seconds)
            row("rss_after_big", round(probe.rss_mib(), 1), "MiB", target="< 150 MiB")
            row("rss_peak", round(probe.rss_mib("VmHWM"), 1), "MiB")
            if kubelet.errors:
                print("batch kubelet errors (%d), first: %s" % (len(kubelet.errors),
                                                                kubelet.errors[0]))
        probe.stop.set()
        code = op.stop()
        if code not in (0, None):
            raise RuntimeError("the operator exited with %s; log: %s" % (code, op.log()[-2000:]))
    finally:
        cluster.stop()
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--nodes", type=int, default=2000)
    p.add_argument("--images", type=int, default=50)
    p.add_argument("--jobs", type=int, default=1000)
    p.add_argument("--big-workers", type=int, default=1000)
    p.add_argument("--rest-seconds", type=float, default=30)
    p.add_argument("--settle-seconds", type=float, default=5)
    p.add_argument("--deadline", type=float, default=900, help="seconds per wait")
    p.add_argument("--operator-arg", dest="operator_args", action="append", default=[])
    p.add_argument("--out", default="")
    a = p.parse_args()
    rows = run(a)
    if a.out:
        with open(a.out, "w") as f:
            json.dump(rows, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
