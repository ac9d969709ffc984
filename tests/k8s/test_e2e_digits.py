"""End to end: `kubectl apply` of a HorovodJob trains the digits example on 4 workers. The operator
creates the pods; NodeAgent runs each pod's sidecar (the real korovod-sidecar) and trainer (the
unmodified examples/pytorch_digits.py) as local processes with the pod's env and volumes; the job
reaches Succeeded and rank 0's log has the trained accuracy."""
import json
import os
import re

from cluster import REPO
from jobs import apply, crd, get_job, wait_phase  # noqa: F401
from node_agent import NodeAgent
from operator_process import OperatorProcess


def test_kubectl_apply_trains_digits_on_4_workers(crd, tmp_path):
    build = os.environ["KOROVOD_BUILD_DIR"]
    ns = "default"
    job = {
        "apiVersion": "korovod.dev/v1alpha1", "kind": "HorovodJob",
        "metadata": {"name": "digits-e2e"},
        "spec": {
            "replicas": 4,
            "sidecar": {"image": "korovod/sidecar:dev",
                        "engine": {"cycleTimeMs": 1}},
            "runPolicy": {"backoffLimit": 0, "cleanPodPolicy": "None"},
            "template": {"spec": {"containers": [{
                "name": "trainer", "image": "korovod/trainer:dev",
                "command": ["/usr/bin/python3", os.path.join(REPO, "examples", "pytorch_digits.py"),
                            "--epochs", "8", "--checkpoint", str(tmp_path / "digits.pt")],
                "env": [{"name": "PYTHONPATH",
                         "value": "%s:%s" % (os.path.join(REPO, "python"),
                                             os.path.join(build, "python"))}],
            }]}},
        },
    }
    agent = NodeAgent(crd, str(tmp_path), {"korovod/sidecar": [os.path.join(build, "bin",
                                                                            "korovod-sidecar")]})
    operator = OperatorProcess(crd, str(tmp_path), "operator-e2e").start()
    try:
        with agent:
            crd.wait_for(lambda: operator.http("/readyz")[0] == 200, "operator ready", 60)
            apply(crd, ns, json.dumps(job))
            try:
                done = crd.wait_for(lambda: (get_job(crd, ns, "digits-e2e") or {}).get(
                    "status", {}).get("phase") in ("Succeeded", "Failed"), "job finished", 420)
            except AssertionError:
                raise AssertionError("agent errors: %s\nrank 0 trainer: %s" % (
                    agent.errors, _safe_log(agent, "digits-e2e-worker-0", "trainer")))
            status = get_job(crd, ns, "digits-e2e")["status"]
            trainer0 = agent.log("digits-e2e-worker-0", "trainer")
            sidecar0 = agent.log("digits-e2e-worker-0", "korovod-sidecar")
            assert status["phase"] == "Succeeded", (status, agent.errors, trainer0, sidecar0)
            assert done
            accuracies = [float(a) for a in re.findall(r"test accuracy ([0-9.]+)%", trainer0)]
            assert len(accuracies) == 8, trainer0
            assert accuracies[-1] >= 90.0, trainer0
            assert "rank 0/4" in sidecar0, sidecar0
            assert status["succeededWorkers"] == 4
    finally:
        operator.stop()
        crd.kubectl("delete", "hvdjob", "digits-e2e", "--ignore-not-found", "--wait=false")


def _safe_log(agent, pod, container):
    try:
        return agent.log(pod, container)[-3000:]
    except (KeyError, OSError) as e:
        return repr(e)
