"""Starts korovod-operator against the test cluster and reads its /metrics, /healthz, /readyz."""
import os
import signal
import subprocess
import urllib.request

from cluster import free_port


def operator_binary():
    build = os.environ.get("KOROVOD_BUILD_DIR", "")
    path = os.path.join(build, "bin", "korovod-operator")
    if not os.access(path, os.X_OK):
        raise RuntimeError("korovod-operator not found at %s (set KOROVOD_BUILD_DIR)" % path)
    return path


class OperatorProcess:
    def __init__(self, cluster, logdir, name="operator", args=(), kubeconfig=None):
        self.cluster = cluster
        self.port = free_port()
        self.log_path = os.path.join(logdir, "%s.log" % name)
        self.argv = [operator_binary(), "--kubeconfig", kubeconfig or cluster.admin_kubeconfig,
                     "--metrics-bind-address", "127.0.0.1:%d" % self.port,
                     "--identity", name, *args]
        self.proc = None

    def start(self):
        self._log = open(self.log_path, "a")
        self.proc = subprocess.Popen(self.argv, stdout=self._log, stderr=subprocess.STDOUT)
        return self

    def http(self, path):
        try:
            with urllib.request.urlopen("http://127.0.0.1:%d%s" % (self.port, path),
                                        timeout=5) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()
        except OSError as e:
            return 0, str(e)

    def metric(self, name, labels=""):
        """The value of one sample in /metrics, e.g. metric('korovod_operator_jobs', 'phase="Running"')."""
        code, text = self.http("/metrics")
        if code != 200:
            return None
        want = name + ("{%s}" % labels if labels else "")
        for line in text.splitlines():
            if line.startswith(want + " "):
                return float(line.split()[-1])
        return None

    def log(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def stop(self, sig=signal.SIGTERM, timeout=20):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode if self.proc else None
