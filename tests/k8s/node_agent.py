"""NodeAgent: a test kubelet that really runs each pod's containers as local processes.

For the end-to-end test: `kubectl apply` of a HorovodJob makes the operator create pods; this agent
binds them to its node, maps the pod's volumes to temp folders (emptyDir → a folder, secret → its
files with the volume's mode), rewrites what only a cluster can resolve (the headless Service's DNS
names → 127.0.0.1, with one free port per coordinator; the sidecar's metrics port → a free port),
starts the native sidecars (init containers with restartPolicy Always) first and waits for their
startupProbe, then the containers, reports Running/Ready/Succeeded/Failed through /status as a
kubelet does, and stops the sidecars once the main containers have exited.

Images are mapped to local programs by `images`: {image prefix: argv}; a container with a command
runs that command. Each container's output goes to <pod dir>/<container>.log.

Several agents may play several nodes of one namespace: `binds(pod)` says which unscheduled pods
this one binds to its node, and each agent runs and finishes the deletion of its own node's pods
only. `freeze()` plays a node that stops answering: its loop stops and its pods' processes are
stopped (SIGSTOP) with their connections open, as on a partitioned host.
"""
import base64
import os
import re
import signal
import socket
import shutil
import subprocess
import tempfile
import threading
import time
import urllib.request

from cluster import free_port
from fake_kubelet import _container_statuses, _now
from kubelet_loop import KubeletLoop

_SVC_HOST = re.compile(r"^[a-z0-9.-]+\.svc(\.[a-z0-9.-]+)?$")


class _PodRun:
    def __init__(self, pod, root):
        self.pod = pod
        self.name = pod["metadata"]["name"]
        self.uid = pod["metadata"]["uid"]
        self.dir = os.path.join(root, self.uid[:8])
        os.makedirs(self.dir, exist_ok=True)
        self.procs = {}       # container name -> Popen
        self.sidecars = []    # names of native sidecars
        self.mains = []       # names of main containers
        self.exit_codes = {}  # main container -> exit code
        self.metrics_ports = {}
        self.reported = None
        self.thread = None


class NodeAgent(KubeletLoop):
    def __init__(self, cluster, workdir, images, namespace="default", node="agent-node",
                 extra_env=None, startup_deadline_s=120, binds=None):
        super().__init__(cluster, namespace, node, 0.3)
        # Unix socket paths are limited to 107 bytes: keep pod folders short, under /tmp.
        self.root = tempfile.mkdtemp(prefix="ka-", dir="/tmp")
        self.workdir = workdir
        self.images = images
        self.extra_env = extra_env or {}
        self.startup_deadline_s = startup_deadline_s
        self.binds = binds or (lambda pod: True)
        self.frozen = False
        self.runs = {}           # pod uid -> _PodRun
        self.coordinator_ports = {}  # "host:port" in the cluster -> local port
        self._lock = threading.Lock()

    def __exit__(self, *exc):
        super().__exit__(*exc)
        for run in list(self.runs.values()):
            self._kill(run)
        # Keep the pods' logs with the test's files; drop the rest.
        for run in self.runs.values():
            dest = os.path.join(self.workdir, run.name + "-" + run.uid[:8])
            os.makedirs(dest, exist_ok=True)
            for f in os.listdir(run.dir):
                if f.endswith(".log"):
                    shutil.copy(os.path.join(run.dir, f), dest)
        shutil.rmtree(self.root, ignore_errors=True)

    def log(self, pod_name, container):
        for run in self.runs.values():
            if run.name == pod_name:
                path = os.path.join(run.dir, container + ".log")
                with open(path, errors="replace") as f:
                    return f.read()
        raise KeyError("no pod %s ran on this agent" % pod_name)

    # --- the sync loop ---------------------------------------------------------------------
    def freeze(self):
        """The node stops answering: no more syncs, its pods' processes stopped mid-flight."""
        self.frozen = True
        self._stop.set()
        self._thread.join(10)
        for run in list(self.runs.values()):
            for p in run.procs.values():
                if p.poll() is None:
                    self._signal(p, signal.SIGSTOP)

    def sync(self):
        pods = self.cluster.get(self.pods_path()) or {"items": []}
        for pod in pods["items"]:
            meta = pod["metadata"]
            node = pod["spec"].get("nodeName")
            if node and node != self.node:
                continue  # another node's: its own agent runs and removes it
            if meta.get("deletionTimestamp"):
                run = self.runs.get(meta["uid"])
                if run:
                    self._kill(run)
                self.finish_deletion(pod)
                continue
            if not node:
                if self.binds(pod):
                    self.bind(pod)
                continue
            if meta["uid"] in self.runs:
                continue
            run = _PodRun(pod, self.root)
            self.runs[meta["uid"]] = run
            run.thread = threading.Thread(target=self._run_pod, args=(run,), daemon=True)
            run.thread.start()

    # --- one pod ---------------------------------------------------------------------------
    def _run_pod(self, run):
        try:
            mounts = self._volumes(run)
            spec = run.pod["spec"]
            for c in spec.get("initContainers", []):
                if c.get("restartPolicy") != "Always":
                    raise RuntimeError("init container %s: only native sidecars are supported"
                                       % c["name"])
                run.sidecars.append(c["name"])
                self._start(run, c, mounts)
                self._wait_startup(run, c)
            for c in spec["containers"]:
                run.mains.append(c["name"])
                self._start(run, c, mounts)
            self._report(run, "Running")
            while len(run.exit_codes) < len(run.mains):
                for name in run.mains:
                    p = run.procs[name]
                    if name not in run.exit_codes and p.poll() is not None:
                        run.exit_codes[name] = p.returncode
                for name in run.sidecars:
                    # A native sidecar that dies is restarted by a kubelet; here it fails the pod.
                    if run.procs[name].poll() is not None and len(run.exit_codes) < len(run.mains):
                        raise RuntimeError("sidecar %s exited with %d" % (
                            name, run.procs[name].returncode))
                if self.stopped():
                    return
                time.sleep(0.2)
            for name in run.sidecars:  # the kubelet stops sidecars after the main containers
                self._signal(run.procs[name], signal.SIGTERM)
            for name in run.sidecars:
                try:
                    run.procs[name].wait(20)
                except subprocess.TimeoutExpired:
                    self._signal(run.procs[name], signal.SIGKILL)
            ok = all(code == 0 for code in run.exit_codes.values())
            self._report(run, "Succeeded" if ok else "Failed")
        except Exception as e:
            self.errors.append("pod %s: %r" % (run.name, e))
            self._kill(run)
            run.exit_codes.setdefault("agent", 1)
            self._report(run, "Failed", message=str(e))

    def _volumes(self, run):
        paths = {}
        for v in run.pod["spec"].get("volumes", []):
            d = os.path.join(run.dir, "volumes", v["name"])
            os.makedirs(d, exist_ok=True)
            if "secret" in v:
                sec = self.cluster.get("/api/v1/namespaces/%s/secrets/%s" % (
                    self.ns, v["secret"]["secretName"]))
                if sec is None:
                    raise RuntimeError("secret %s not found" % v["secret"]["secretName"])
                mode = v["secret"].get("defaultMode", 0o644)
                for key, val in (sec.get("data") or {}).items():
                    path = os.path.join(d, key)
                    with open(path, "wb") as f:
                        f.write(base64.b64decode(val))
                    os.chmod(path, mode)
            elif "emptyDir" not in v and "projected" not in v:
                # (projected: the service-account token volume; left empty, nothing here uses it)
                raise RuntimeError("volume %s: only emptyDir, secret and projected volumes are "
                                   "supported" % v["name"])
            paths[v["name"]] = d
        return paths

    def _env(self, run, c, mounts):
        mount_map = {m["mountPath"]: mounts[m["name"]] for m in c.get("volumeMounts", [])
                     if m["name"] in mounts}
        env = dict(os.environ)
        env.update(self.extra_env)
        declared = {}
        for e in c.get("env", []):
            if "value" in e:
                val = e["value"]
            elif "valueFrom" in e and "secretKeyRef" in e["valueFrom"]:
                ref = e["valueFrom"]["secretKeyRef"]
                sec = self.cluster.get("/api/v1/namespaces/%s/secrets/%s" % (self.ns, ref["name"]))
                if sec is None or ref["key"] not in (sec.get("data") or {}):
                    raise RuntimeError("env %s: secret %s has no key %s" % (
                        e["name"], ref["name"], ref["key"]))
                val = base64.b64decode(sec["data"][ref["key"]]).decode()
            elif "valueFrom" in e and "fieldRef" in e["valueFrom"]:
                field = e["valueFrom"]["fieldRef"]["fieldPath"]
                val = {"metadata.name": run.name, "metadata.namespace": self.ns,
                       "metadata.uid": run.uid, "status.podIP": "127.0.0.1",
                       "spec.nodeName": self.node}.get(field, "")
            else:
                continue
            # The kubelet's $(VAR): a variable defined earlier in the container's env.
            val = re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
                         lambda m: declared.get(m.group(1), m.group(0)), val)
            declared[e["name"]] = val
            for mount_path, host in sorted(mount_map.items(), key=lambda kv: -len(kv[0])):
                if val == mount_path or val.startswith(mount_path + "/"):
                    val = host + val[len(mount_path):]
                    break
            if e["name"] == "KOROVOD_COORDINATOR":
                host, _, port = val.rpartition(":")
                if _SVC_HOST.match(host):
                    with self._lock:
                        local = self.coordinator_ports.setdefault(val, free_port())
                    val = "127.0.0.1:%d" % local
            env[e["name"]] = val
        if "KOROVOD_METRICS_PORT" in env and c["name"] in run.sidecars:
            port = free_port()
            run.metrics_ports[c["name"]] = port
            env["KOROVOD_METRICS_PORT"] = str(port)
        return env

    def _start(self, run, c, mounts):
        argv = list(c.get("command", [])) + list(c.get("args", []))
        if not c.get("command"):
            image = c.get("image", "")
            prefix = next((p for p in self.images if image.startswith(p)), None)
            if prefix is None:
                raise RuntimeError("container %s: no local program for image %s" % (c["name"],
                                                                                  image))
            argv = list(self.images[prefix]) + list(c.get("args", []))
        log = open(os.path.join(run.dir, c["name"] + ".log"), "w")
        run.procs[c["name"]] = subprocess.Popen(
            argv, env=self._env(run, c, mounts), stdout=log, stderr=subprocess.STDOUT,
            cwd=c.get("workingDir") or run.dir, start_new_session=True)

    def _wait_startup(self, run, c):
        probe = c.get("startupProbe") or c.get("readinessProbe")
        end = time.monotonic() + self.startup_deadline_s
        port = run.metrics_ports.get(c["name"])
        while time.monotonic() < end:
            p = run.procs[c["name"]]
            if p.poll() is not None:
                raise RuntimeError("sidecar %s exited with %d before it started" % (c["name"],
                                                                                    p.returncode))
            if probe is None or port is None:
                return
            try:
                path = probe["httpGet"]["path"]
                with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.3)
        raise RuntimeError("sidecar %s: startup probe did not pass in %ds" % (
            c["name"], self.startup_deadline_s))

    def _report(self, run, phase, message=""):
        if run.reported == phase:
            return
        run.reported = phase
        # Read-modify-write, as the kubelet does: another writer (the operator's deletion, an
        # eviction) may move the pod's resourceVersion between the read and the write; a 409
        # Conflict means read again and retry, not a failure.
        for _ in range(5):
            code, body = self._write_status(run, phase, message)
            if code != 409:
                break
        if code == 404:
            return  # deleted between the read and the write: nothing left to report on
        if code != 200:
            run.reported = None  # try again on the next change
            self.errors.append("pod %s: status %s: %s" % (run.name, code, body))

    def _write_status(self, run, phase, message):
        pod = self.cluster.get("/api/v1/namespaces/%s/pods/%s" % (self.ns, run.name))
        if pod is None or pod["metadata"]["uid"] != run.uid:
            return 404, "pod gone"
        spec = pod["spec"]
        running = phase == "Running"
        mains = []
        for c in spec["containers"]:
            code = run.exit_codes.get(c["name"], 0)
            mains += _container_statuses([c], "running" if running else "terminated", code)
        pod["status"] = {
            "phase": phase, "hostIP": "127.0.0.1", "podIP": "127.0.0.1", "startTime": _now(),
            "message": message,
            "conditions": [{"type": "Ready", "status": "True" if running else "False",
                            "lastTransitionTime": _now()}],
            "initContainerStatuses": _container_statuses(spec.get("initContainers", []),
                                                         "running" if running else "terminated"),
            "containerStatuses": mains,
        }
        return self.cluster.request("PUT", "/api/v1/namespaces/%s/pods/%s/status" % (
            self.ns, run.name), pod)

    @staticmethod
    def _signal(p, sig):
        try:
            os.killpg(p.pid, sig)
        except ProcessLookupError:
            pass

    def _kill(self, run):
        for p in run.procs.values():
            if p.poll() is None:
                self._signal(p, signal.SIGTERM)
                self._signal(p, signal.SIGCONT)  # a frozen node's
        for p in run.procs.values():
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                self._signal(p, signal.SIGKILL)
                p.wait()
