"""KubeletLoop: what FakeKubelet and NodeAgent share: a background thread that syncs the pods of
one namespace every `interval` seconds, binds unscheduled pods to its node (the scheduler's part)
and removes pods being deleted once their containers are gone (the kubelet's part)."""
import threading


class KubeletLoop:
    def __init__(self, cluster, namespace, node, interval):
        self.cluster = cluster
        self.ns = namespace
        self.node = node
        self.errors = []
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(10)

    def stopped(self):
        return self._stop.is_set()

    def sync(self):
        raise NotImplementedError

    def _loop(self):
        while not self._stop.is_set():
            try:
                self.sync()
            except Exception as e:  # keep playing the node; the test reads .errors
                self.errors.append(repr(e))
            self._stop.wait(self._interval)

    def pods_path(self, name=""):
        return "/api/v1/namespaces/%s/pods%s" % (self.ns, "/" + name if name else "")

    def bind(self, pod):
        name = pod["metadata"]["name"]
        self.cluster.request("POST", self.pods_path(name) + "/binding", {
            "apiVersion": "v1", "kind": "Binding", "metadata": {"name": name},
            "target": {"apiVersion": "v1", "kind": "Node", "name": self.node}})

    def finish_deletion(self, pod):
        meta = pod["metadata"]
        self.cluster.request("DELETE", self.pods_path(meta["name"]), {
            "kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0,
            "preconditions": {"uid": meta["uid"]}})
