"""ProcWatcher: the credentials of a namespace's pods' processes, sampled from the machine's /proc
while a job runs on the real node (test_real_e2e.py)."""
import os
import threading

from real_node import processes


class ProcWatcher:
    """Samples the machine's /proc while a job runs: the credentials of every korovod-sidecar and
    python3 process in the pods of one namespace (matched by the pod uid in its cgroup)."""

    def __init__(self, pod_uids):
        self.pod_uids = pod_uids  # a callable: the uids of the pods to watch
        self.seen = {}  # (pod uid, program) -> {"Uid": ..., "Gid": ..., "Groups": ...}
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self._t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join()

    def _run(self):
        while not self._stop.is_set():
            try:
                uids = self.pod_uids()
            except Exception:  # the API may be busy; try again
                uids = []
            if uids:
                self._scan(uids)
            self._stop.wait(0.3)

    def _scan(self, uids):
        for pid, argv in processes():
            try:
                prog = os.path.basename(argv[0].decode())
                if prog not in ("korovod-sidecar", "python3"):
                    continue
                with open("/proc/%s/cgroup" % pid) as f:
                    cg = f.read().replace("_", "-")
                with open("/proc/%s/status" % pid) as f:
                    status = dict(line.split(":", 1) for line in f if ":" in line)
            except (OSError, ValueError, UnicodeDecodeError):
                continue
            for u in uids:
                if u in cg:
                    self.seen[(u, prog)] = {k: status[k].split() for k in
                                            ("Uid", "Gid", "Groups")}
