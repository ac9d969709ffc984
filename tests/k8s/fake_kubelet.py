"""FakeKubelet: plays the kubelet (and the scheduler's binding) for pods in one namespace, so the
operator's integration tests can drive pods through Running, Succeeded and Failed without a node.

Each pod's outcome is chosen by `outcome(pod) -> str`: "pending" (left alone), "run" (Running and
Ready, containers running), "succeed" (every container exited 0), or "fail:<code>" (the trainer
exited <code>). Pods being deleted are removed at once, as a kubelet does once containers stop.
"""
import time

from kubelet_loop import KubeletLoop


def _container_statuses(containers, state, code=0):
    out = []
    for c in containers:
        if state == "running":
            st = {"running": {"startedAt": _now()}}
        else:
            st = {"terminated": {"exitCode": code, "reason": "Completed" if code == 0 else "Error",
                                 "startedAt": _now(), "finishedAt": _now()}}
        out.append({"name": c["name"], "image": c.get("image", ""), "imageID": "",
                    "ready": state == "running", "restartCount": 0, "started": state == "running",
                    "state": st})
    return out


def _now():
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class FakeKubelet(KubeletLoop):
    def __init__(self, cluster, namespace="default", node="fake-node", outcome=None):
        super().__init__(cluster, namespace, node, 0.2)
        self.outcome = outcome or (lambda pod: "run")
        self.seen = set()  # uids of pods this kubelet has handled (to count creations)

    def sync(self):
        pods = self.cluster.get(self.pods_path()) or {"items": []}
        for pod in pods["items"]:
            meta, name = pod["metadata"], pod["metadata"]["name"]
            self.seen.add(meta["uid"])
            if meta.get("deletionTimestamp"):
                self.finish_deletion(pod)
                continue
            want = self.outcome(pod)
            if want == "pending":
                continue
            if not pod["spec"].get("nodeName"):
                self.bind(pod)
                continue  # re-read next round with the new resourceVersion
            phase = {"run": "Running", "succeed": "Succeeded"}.get(want, "Failed")
            if pod.get("status", {}).get("phase") == phase:
                continue
            code = 0 if want in ("run", "succeed") else int(want.split(":")[1])
            state = "running" if want == "run" else "terminated"
            init = [c for c in pod["spec"].get("initContainers", [])]
            status = {
                "phase": phase, "hostIP": "10.0.0.1", "podIP": "10.244.0.%d" % (hash(name) % 250 + 2),
                "startTime": _now(),
                "conditions": [{"type": "Ready", "status": "True" if want == "run" else "False",
                                "lastTransitionTime": _now()},
                               {"type": "PodScheduled", "status": "True",
                                "lastTransitionTime": _now()}],
                "initContainerStatuses": _container_statuses(init, state, 0),
                "containerStatuses": _container_statuses(pod["spec"]["containers"], state, code),
            }
            pod["status"] = status
            self.cluster.request("PUT", self.pods_path(name) + "/status", pod)
