#!/usr/bin/python3
"""Recovery of a HorovodJob from a lost worker pod: elastic (spec.elastic) against a whole-world
restart, the same operator, the same fault, the same script.

A real kube-apiserver + etcd on loopback (tests/k8s/cluster.py), korovod-operator, and a NodeAgent
(tests/k8s/node_agent.py) that runs each pod's sidecar and trainer as local processes. The job: 3
workers running tests/python/elastic_worker.py (hvd.elastic.run, TorchState, a commit per step).
Once rank 0 has trained 20 steps, `kubectl delete pod` of a worker that is not rank 0. Then:

  elastic   spec.elastic {minReplicas: 2}: the survivors reset into a new membership epoch and go
            on; a replacement pod joins the next one.
  restart   no spec.elastic (what a static HorovodJob, and Kubeflow's MPIJob or PyTorchJob with
            Horovod, do): the survivors fail, the operator deletes every pod and creates a new
            epoch's, which start over (no checkpoint here: the step count restarts too).

Measured from rank 0's timestamped step lines:
  to_training   the delete -> the first step of a new membership epoch (elastic) or of the new
                epoch's pods (restart)
  to_full_size  the delete -> the first step on 3 workers again (elastic; for restart the same as
                to_training)
  steps_lost    steps trained before the fault that must be trained again (elastic: those since
                the last commit, 0 or 1 here; restart: all of them)

Writes a JSON list of rows (median, min, max, every sample; the schema of bench/README.md) and
prints a table.

    /usr/bin/python3 bench/elastic/operator_recovery.py --repeats 3 \
        --out docs/bench-results/elastic-operator-recovery.json
"""
import argparse
import json
import os
import re
import statistics
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "tests", "k8s"))

from cluster import Cluster, require_binaries  # noqa: E402
from node_agent import NodeAgent  # noqa: E402
from operator_process import OperatorProcess  # noqa: E402

STEP = re.compile(r"^step (\d+) size (\d+) epoch (\d+) at ([0-9.]+)$", re.M)
CRD = os.path.join(REPO, "crds", "korovod.dev_horovodjobs.yaml")
JOBS = "/apis/korovod.dev/v1alpha1/namespaces/%s/horovodjobs"


def job(name, mode, build, workdir, steps):
    spec = {
        "replicas": 3,
        "sidecar": {"image": "korovod/sidecar:dev", "engine": {"cycleTimeMs": 1}},
        "runPolicy": {"backoffLimit": 3, "cleanPodPolicy": "All"},
        "template": {"spec": {"containers": [{
            "name": "trainer", "image": "korovod/trainer:dev",
            "command": ["/usr/bin/python3",
                        os.path.join(REPO, "tests", "python", "elastic_worker.py")],
            "env": [{"name": "PYTHONPATH", "value": "%s:%s" % (
                        os.path.join(REPO, "python"), os.path.join(build, "python"))},
                    {"name": "OMP_NUM_THREADS", "value": "1"},
                    {"name": "ELASTIC_TEST_DIR", "value": workdir},
                    {"name": "ELASTIC_STEPS", "value": str(steps)},
                    {"name": "ELASTIC_STEP_SLEEP", "value": "0.05"}],
        }]}},
    }
    if mode == "elastic":
        spec["elastic"] = {"minReplicas": 2, "timeoutSeconds": 60}
    return {"apiVersion": "korovod.dev/v1alpha1", "kind": "HorovodJob",
            "metadata": {"name": name}, "spec": spec}


def steps_of(agent, job_name):
    """(step, size, epoch, time, pod uid) of the job's trainers' step lines (rank 0 prints them)."""
    out = []
    for uid, run in list(agent.runs.items()):
        if not run.name.startswith(job_name + "-worker-"):
            continue
        try:
            with open(os.path.join(run.dir, "trainer.log"), errors="replace") as f:
                text = f.read()
        except OSError:
            continue
        out += [(int(s), int(n), int(e), float(t), uid) for s, n, e, t in STEP.findall(text)]
    return sorted(out, key=lambda x: x[3])


def wait_for(what, predicate, deadline_s):
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        v = predicate()
        if v:
            return v
        time.sleep(0.05)
    raise RuntimeError("timed out waiting for " + what)


def run_once(cluster, agent, ns, mode, build, steps, index):
    name = "%s-%d" % (mode, index)
    workdir = tempfile.mkdtemp(prefix="korovod-op-bench-")
    code, body = cluster.request("POST", JOBS % ns, job(name, mode, build, workdir, steps))
    if code != 201:
        raise RuntimeError("create %s: %s %s" % (name, code, body))
    try:
        wait_for("20 steps on 3 workers", lambda: any(
            s[0] >= 20 and s[1] == 3 for s in steps_of(agent, name)), 180)
        pods = cluster.get("/api/v1/namespaces/%s/pods?labelSelector=korovod.dev/job-name=%s"
                           % (ns, name))["items"]
        rank0_uid = steps_of(agent, name)[-1][4]
        victim = next(p["metadata"]["name"] for p in pods
                      if p["metadata"]["uid"] != rank0_uid and not p["metadata"].get(
                          "deletionTimestamp"))
        before = steps_of(agent, name)[-1]
        old_uids = set(agent.runs)
        t = time.time()
        cluster.kubectl("-n", ns, "delete", "pod", victim, "--wait=false")
        if mode == "elastic":
            back = wait_for("training on 3 in a later epoch", lambda: next(
                (s for s in steps_of(agent, name) if s[3] > t and s[2] > before[2] and s[1] == 3),
                None), 180)
            first = next(s for s in steps_of(agent, name) if s[3] > t and s[2] > before[2])
        else:
            first = wait_for("the new epoch's first step", lambda: next(
                (s for s in steps_of(agent, name) if s[3] > t and s[4] not in old_uids), None), 240)
            back = first
        result = {"to_training": first[3] - t, "to_full_size": back[3] - t,
                  "steps_lost": max(0, before[0] - first[0] + 1)}
        status = wait_for("the job to finish", lambda: (lambda j: j["status"] if j and j.get(
            "status", {}).get("phase") in ("Succeeded", "Failed") else None)(
                cluster.get((JOBS % ns) + "/" + name)), 300)
        if status["phase"] != "Succeeded":
            raise RuntimeError("%s ended %s: %s" % (name, status["phase"], json.dumps(status)))
        with open(os.path.join(workdir, "result.txt")) as f:
            if not f.read().startswith("match"):
                raise RuntimeError(name + ": the final weights differ from one process's")
        return result
    finally:
        cluster.kubectl("-n", ns, "delete", "hvdjob", name, "--ignore-not-found", "--wait=false")
        wait_for("the job's pods to go", lambda: not cluster.get(
            "/api/v1/namespaces/%s/pods?labelSelector=korovod.dev/job-name=%s" % (ns, name))[
                "items"], 120)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--modes", default="elastic,restart")
    ap.add_argument("--steps", type=int, default=120)
    ap.add_argument("--build", default=os.path.join(REPO, "build"))
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    require_binaries()
    os.environ.setdefault("KOROVOD_BUILD_DIR", os.path.abspath(a.build))
    modes = [m for m in a.modes.split(",") if m]
    samples, errors = {}, {}
    with tempfile.TemporaryDirectory(prefix="korovod-op-bench-") as d:
        cluster = Cluster(d)
        cluster.start()
        try:
            cluster.kubectl("apply", "-f", CRD)
            cluster.wait_established("crd/horovodjobs.korovod.dev")
            ns = "default"
            images = {"korovod/sidecar": [os.path.join(a.build, "bin", "korovod-sidecar")]}
            operator = OperatorProcess(cluster, d, "operator-bench", args=(
                "--elastic-rendezvous-host", "127.0.0.1")).start()
            try:
                with NodeAgent(cluster, d, images, namespace=ns, node="bench-node") as agent:
                    wait_for("operator ready", lambda: operator.http("/readyz")[0] == 200, 60)
                    for i in range(a.repeats):
                        for mode in (modes if i % 2 == 0 else list(reversed(modes))):
                            try:
                                r = run_once(cluster, agent, ns, mode, a.build, a.steps, i)
                            except RuntimeError as e:
                                errors[mode] = str(e)
                                print("run %d %s: %s" % (i + 1, mode, e), file=sys.stderr,
                                      flush=True)
                                continue
                            for k, v in r.items():
                                samples.setdefault((mode, k), []).append(v)
                            print("run %d %s: %s" % (i + 1, mode, ", ".join(
                                "%s %.3f" % kv for kv in sorted(r.items()))), file=sys.stderr,
                                flush=True)
            finally:
                operator.stop()
        finally:
            cluster.stop()
    rows = []
    for mode in modes:
        for k in ("to_training", "to_full_size", "steps_lost"):
            v = samples.get((mode, k), [])
            base = {"peer": "korovod-operator-" + mode, "bench": "elastic_operator_recovery",
                    "measure": k, "ranks": 3, "fault": "kubectl delete pod (not rank 0)",
                    "date": time.strftime("%Y-%m-%d")}
            if not v:
                rows.append(dict(base, error=errors.get(mode, "no sample")))
            elif k == "steps_lost":
                rows.append(dict(base, steps=statistics.median(v), samples=v))
            else:
                rows.append(dict(base, time_us=statistics.median(v) * 1e6, min_us=min(v) * 1e6,
                                 max_us=max(v) * 1e6, samples_s=v))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(rows, f, indent=1)
    print("| measure | elastic median (min-max) | restart median (min-max) | elastic / restart |")
    print("|---|---|---|---|")
    for k in ("to_training", "to_full_size", "steps_lost"):
        cells, med = [], {}
        for mode in ("elastic", "restart"):
            v = samples.get((mode, k))
            if not v:
                cells.append("n/a")
                continue
            med[mode] = statistics.median(v)
            unit = "" if k == "steps_lost" else " s"
            cells.append("%.2f%s (%.2f-%.2f, %d runs)" % (med[mode], unit, min(v), max(v),
                                                            len(v)))
        ratio = ("%.2f" % (med["elastic"] / med["restart"])
                 if med.get("restart") and "elastic" in med else "")
        print("| %s | %s | %s | %s |" % (k, cells[0], cells[1], ratio))
    if errors:
        sys.exit(1)


if __name__ == "__main__":
    main()
