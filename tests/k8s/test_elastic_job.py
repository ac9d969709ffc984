"""An elastic HorovodJob (spec.elastic) on a real kube-apiserver, its pods run by two NodeAgents
(node-a and node-b: the real korovod-sidecar and trainer as local processes). The trainer is the
korovodrun elastic tests' tests/python/elastic_worker.py: hvd.elastic with TorchState, a fixed
global batch split over the ranks of the moment, a commit per step, and at the end rank 0 checks
the weights against a single-process run (no step lost or counted twice).

Three workers (minReplicas 2), then, each once training runs on 3 again:
  1. `kubectl delete pod` of a worker;
  2. an eviction of another through the eviction API (policy/v1 Eviction: DisruptionTarget);
  3. node-b goes NotReady: its agent stops answering and its worker's processes are frozen
     (SIGSTOP, connections left open, as a partitioned host), and its Node reports Ready=False.
Between 1 and 2 the operator is killed and a new one resumes the job's membership server from the
status. Each time the survivors go on without a restart (the operator's membership server forms a new
epoch), a replacement pod joins, and at the end the job has Succeeded with restartCount 0 and the
weights match. The time from each fault to the next training step is printed (recovery).

Then two operator replicas with leader election: a leader SIGSTOPped past its lease and resumed
stops its membership servers at once, and the new leader serves the job with the next fencing
token (issue 31)."""
import json
import os
import re
import signal
import time

from cluster import REPO
from fake_kubelet import FakeKubelet
from jobs import apply, crd, get_job, job_doc, ns  # noqa: F401
from node_agent import NodeAgent
from operator_process import OperatorProcess

NAME = "elastic"
STEP = re.compile(r"^step (\d+) size (\d+) epoch (\d+) at ([0-9.]+)$", re.M)


def _node(cluster, name, ready):
    """Creates the Node (once) and sets its Ready condition."""
    if cluster.get("/api/v1/nodes/" + name) is None:
        code, body = cluster.request("POST", "/api/v1/nodes", {
            "apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})
        assert code in (201, 409), body
    node = cluster.get("/api/v1/nodes/" + name)
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    node["status"] = {"conditions": [{
        "type": "Ready", "status": "True" if ready else "False",
        "reason": "KubeletReady" if ready else "NodeStatusUnknown",
        "message": "test", "lastHeartbeatTime": now, "lastTransitionTime": now}]}
    code, body = cluster.request("PUT", "/api/v1/nodes/%s/status" % name, node)
    assert code == 200, body


def _job(tmp_path):
    build = os.environ["KOROVOD_BUILD_DIR"]
    return {
        "apiVersion": "korovod.dev/v1alpha1", "kind": "HorovodJob",
        "metadata": {"name": NAME},
        "spec": {
            "replicas": 3,
            "elastic": {"minReplicas": 2, "maxReplicas": 3, "timeoutSeconds": 60},
            "sidecar": {"image": "korovod/sidecar:dev", "engine": {"cycleTimeMs": 1}},
            "runPolicy": {"backoffLimit": 0, "cleanPodPolicy": "None"},
            "template": {"spec": {"containers": [{
                "name": "trainer", "image": "korovod/trainer:dev",
                "command": ["/usr/bin/python3",
                            os.path.join(REPO, "tests", "python", "elastic_worker.py")],
                "env": [{"name": "PYTHONPATH",
                         "value": "%s:%s" % (os.path.join(REPO, "python"),
                                             os.path.join(build, "python"))},
                        {"name": "ELASTIC_TEST_DIR", "value": str(tmp_path)},
                        {"name": "ELASTIC_STEPS", "value": "600"},
                        {"name": "ELASTIC_STEP_SLEEP", "value": "0.05"}],
            }]}},
        },
    }


class _Logs:
    """Every trainer's step lines (only rank 0 prints them: rank 0 moves when it is lost)."""

    def __init__(self, agents):
        self.agents = agents

    def steps(self):
        out = []
        for agent in self.agents:
            for run in list(agent.runs.values()):
                try:
                    with open(os.path.join(run.dir, "trainer.log"), errors="replace") as f:
                        text = f.read()
                except OSError:
                    continue
                out += [(int(s), int(n), int(e), float(t)) for s, n, e, t in STEP.findall(text)]
        return sorted(out, key=lambda x: x[3])

    def last(self):
        steps = self.steps()
        return steps[-1] if steps else (-1, 0, 0, 0.0)


def _elastic(cluster, namespace):
    return (get_job(cluster, namespace, NAME) or {}).get("status", {}).get("elastic", {})


def _wait_training_on(cluster, namespace, logs, size, after_epoch, what):
    """Until training runs on `size` workers in an epoch after `after_epoch`; returns that step
    (step, size, epoch, time)."""
    def check():
        step = logs.last()
        return step if step[1] == size and step[2] > after_epoch else None
    try:
        return cluster.wait_for(check, what, 120, 0.1)
    except AssertionError:
        raise AssertionError("%s; last step %s; status %s" % (
            what, logs.last(), json.dumps(get_job(cluster, namespace, NAME).get("status"))))


def _members(elastic):
    """The epoch's worker pods by rank, from status.elastic.members (worker indices as ascending
    runs in rank order, "4-5,0-1")."""
    pods = []
    for item in filter(None, elastic.get("members", "").split(",")):
        first, _, last = item.partition("-")
        pods += ["%s-worker-%d" % (NAME, i) for i in range(int(first), int(last or first) + 1)]
    return pods


def _world(cluster, namespace, size, without=None):
    """The epoch's worker pods by rank once it has `size` workers, `without` not among them (the
    status follows the epoch shortly)."""
    def check():
        w = _members(_elastic(cluster, namespace))
        return w if len(w) == size and without not in w else None
    return cluster.wait_for(check, "status.elastic.members of %d without %s" % (size, without),
                            30)


def _recovery(logs, t_fault, epoch):
    """Seconds from the fault to the first training step of a later epoch (the survivors', then
    with the replacement: on 3 again)."""
    after = [s for s in logs.steps() if s[3] > t_fault and s[2] > epoch]
    back = [s for s in after if s[1] == 3]
    return (after[0][3] - t_fault, back[0][3] - t_fault) if back else None


def test_elastic_job_survives_delete_evict_and_unready_node(crd, ns, tmp_path):  # noqa: F811
    build = os.environ["KOROVOD_BUILD_DIR"]
    images = {"korovod/sidecar": [os.path.join(build, "bin", "korovod-sidecar")]}
    victim = NAME + "-worker-2"
    on_b = {}  # the uid of the one pod node-b runs: the first worker-2

    def binds_a(pod):
        m = pod["metadata"]
        return m["name"] != victim or ("uid" in on_b and m["uid"] != on_b["uid"])

    def binds_b(pod):
        m = pod["metadata"]
        if m["name"] != victim or on_b.get("uid", m["uid"]) != m["uid"]:
            return False
        on_b["uid"] = m["uid"]
        return True

    for n in ("node-a", "node-b"):
        _node(crd, n, True)
    agent_a = NodeAgent(crd, str(tmp_path), images, namespace=ns, node="node-a", binds=binds_a)
    agent_b = NodeAgent(crd, str(tmp_path), images, namespace=ns, node="node-b", binds=binds_b)
    operator = OperatorProcess(crd, str(tmp_path), "operator-elastic",
                               args=("--elastic-rendezvous-host", "127.0.0.1")).start()
    logs = _Logs([agent_a, agent_b])
    recoveries = {}
    try:
        with agent_a, agent_b:
            crd.wait_for(lambda: operator.http("/readyz")[0] == 200, "operator ready", 60)
            code, body = crd.request("POST", "/apis/korovod.dev/v1alpha1/namespaces/%s/"
                                     "horovodjobs" % ns, _job(tmp_path))
            assert code == 201, body
            step = _wait_training_on(crd, ns, logs, 3, 0, "training on 3 workers")
            world = _world(crd, ns, 3)
            assert victim in world, world

            # 1. kubectl delete pod: a worker of node-a that is not rank 0.
            deleted = next(p for p in world[1:] if p != victim)
            step, t = logs.last(), time.time()
            crd.kubectl("-n", ns, "delete", "pod", deleted, "--wait=false")
            _wait_training_on(crd, ns, logs, 3, step[2], "back on 3 after the delete")
            recoveries["pod deleted"] = _recovery(logs, t, step[2])
            step = logs.last()
            world = _world(crd, ns, 3, without=deleted)

            # The operator dies (SIGKILL: no goodbye) and a new one takes over: it resumes the
            # job's membership server from the status (its epoch, members and version) on the
            # same port, which the sidecars keep dialing; training goes on meanwhile.
            before = _elastic(crd, ns)
            operator.proc.kill()
            operator.proc.wait()
            operator = OperatorProcess(crd, str(tmp_path), "operator-elastic-2",
                                       args=("--elastic-rendezvous-host", "127.0.0.1")).start()
            crd.wait_for(lambda: "membership server of %s/%s on port %d (epoch %d)" % (
                ns, NAME, before["rendezvousPort"], before["epoch"]) in operator.log(),
                "the new operator resuming the membership server", 60)
            step = logs.last()
            crd.wait_for(lambda: logs.last()[0] > step[0] + 5, "training past the takeover", 60)
            assert logs.last()[2] == before["epoch"], (logs.last(), before)  # no reset

            # 2. Eviction API: another node-a worker that is not rank 0.
            evicted = next(p for p in world[1:] if p != victim)
            step, t = logs.last(), time.time()
            code, body = crd.request(
                "POST", "/api/v1/namespaces/%s/pods/%s/eviction" % (ns, evicted),
                {"apiVersion": "policy/v1", "kind": "Eviction",
                 "metadata": {"name": evicted, "namespace": ns}})
            assert code == 201, body
            _wait_training_on(crd, ns, logs, 3, step[2], "back on 3 after the eviction")
            recoveries["pod evicted"] = _recovery(logs, t, step[2])
            step = logs.last()
            world = _world(crd, ns, 3, without=evicted)
            assert victim in world, world

            # 3. node-b stops answering and is reported NotReady.
            step, t = logs.last(), time.time()
            agent_b.freeze()
            _node(crd, "node-b", False)
            _wait_training_on(crd, ns, logs, 3, step[2], "back on 3 after node-b went NotReady")
            recoveries["node NotReady"] = _recovery(logs, t, step[2])
            _world(crd, ns, 3, without=victim)

            status = crd.wait_for(
                lambda: (get_job(crd, ns, NAME) or {}).get("status", {}).get("phase") in (
                    "Succeeded", "Failed") and get_job(crd, ns, NAME)["status"], "job finished",
                240)
            assert status["phase"] == "Succeeded", json.dumps(status)
            assert status["restartCount"] == 0, status
            assert status["elastic"]["epoch"] >= 4, status["elastic"]
            with open(os.path.join(str(tmp_path), "result.txt")) as f:
                result = f.read()
            assert result.startswith("match"), result
            reasons = [e["reason"] for e in crd.get("/api/v1/namespaces/%s/events" % ns)["items"]]
            assert "MembershipChanged" in reasons and "WorkerLost" in reasons, reasons
            assert not agent_a.errors, agent_a.errors
            for k, v in recoveries.items():
                assert v is not None, (k, logs.steps()[-5:])
            print("elastic recovery, fault -> training again / -> on 3 again: " + ", ".join(
                "%s %.2f s / %.2f s" % (k, v[0], v[1]) for k, v in recoveries.items()))
    finally:
        operator.stop()
        crd.kubectl("-n", ns, "delete", "hvdjob", NAME, "--ignore-not-found", "--wait=false")
        crd.request("DELETE", "/api/v1/nodes/node-b")
        crd.request("DELETE", "/api/v1/nodes/node-a")


def test_a_deposed_leader_stops_its_servers_and_a_new_one_fences_it(crd, ns, tmp_path):  # noqa: F811
    """Two replicas with leader election and an elastic job (pods run by the fake kubelet). The
    leader serves the job's membership server with its fencing token (the Lease's transitions);
    SIGSTOPped past its lease, the standby takes over and serves the job with the next token, so
    sidecars that meet it refuse the old one; resumed, the old leader stops its servers at once
    and exits."""
    args = ["--leader-elect", "--leader-election-namespace", ns,
            "--leader-election-lease-duration", "3", "--leader-election-renew-deadline", "2",
            "--leader-election-retry-period", "0.5", "--elastic-rendezvous-host", "127.0.0.1"]
    a = OperatorProcess(crd, str(tmp_path), "operator-a", args).start()
    b = OperatorProcess(crd, str(tmp_path), "operator-b", args).start()
    lease_path = "/apis/coordination.k8s.io/v1/namespaces/%s/leases/korovod-operator" % ns
    served = re.compile(r"membership server of %s/fenced on port \d+ \(epoch \d+\), "
                        r"fencing token (\d+)" % ns)
    stopped = None
    try:
        holder = crd.wait_for(lambda: (crd.get(lease_path) or {}).get("spec", {}).get(
            "holderIdentity"), "a leader", 30)
        leader, standby = (a, b) if holder == "operator-a" else (b, a)
        with FakeKubelet(crd, ns):
            apply(crd, ns, job_doc("fenced", replicas=2, elastic={
                "minReplicas": 1, "maxReplicas": 2, "timeoutSeconds": 60}))
            first = crd.wait_for(lambda: served.search(leader.log()),
                                 "the leader's membership server", 60)
            token = int(first.group(1))
            leader.proc.send_signal(signal.SIGSTOP)
            stopped = leader
            crd.wait_for(lambda: crd.get(lease_path)["spec"]["holderIdentity"] not in
                         ("", holder), "the standby taking the lease", 30)
            second = crd.wait_for(lambda: served.search(standby.log()),
                                  "the new leader's membership server", 60)
            assert int(second.group(1)) == token + 1, (first.group(0), second.group(0))
            leader.proc.send_signal(signal.SIGCONT)
            stopped = None
            crd.wait_for(lambda: "no longer the leader: 1 membership server stopped" in
                         leader.log(), "the deposed leader stopping its server", 30)
            assert leader.proc.wait(30) == 1, leader.log()[-2000:]
            assert "leading" in standby.log()
    finally:
        if stopped is not None:
            stopped.proc.send_signal(signal.SIGCONT)
        a.stop()
        b.stop()
