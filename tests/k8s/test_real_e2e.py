"""End to end on a real node (real_node.RealNodeCluster: kubelet + containerd + scheduler +
controller-manager) from the images scripts/build-images.sh builds (.testinfra/images/*.tar,
imported into the node's containerd, nothing pulled):

  * `helm install` of helm/korovod with its defaults (the built tag, pullPolicy Never): two
    operator pods of the operator image, one leader, running as 65532:65532, in-cluster (their
    service-account token, kubernetes.default.svc), sharing one webhook CA, and kube-apiserver
    calls the webhook behind its Service (aggregator routing: an endpoint's pod IP);
  * `kubectl apply` of a 2-worker HorovodJob (trainer-pytorch image, examples/pytorch_digits.py,
    sidecar image): Succeeded, the accuracy in `kubectl logs`, the native sidecar started before
    the trainer, the sidecar's and the trainer's processes running as 65532:65532, the trainer
    also in the sidecar's group (read from the machine's /proc while they run, and the trainer's
    `id`), the training through the arena and unix socket, and
    deleting the job garbage-collects its pods, Service and Secret (the real garbage collector).
    The time from `kubectl apply` to rank 0's first epoch line is printed (apply-to-first-step);
  * PyTorch's DDP tutorial program (examples/torch_distributed/ddp_tutorial.py), a plain
    torch.distributed script with backend "korovod", as a 2-worker HorovodJob: torchrun's
    variables from the operator, the loss falling, every rank ending with the same parameters;
  * the webhook injects the sidecar into a StatefulSet and an Indexed Job, which train;
  * crds/samples/cpu-job.yaml runs (images pinned to the built tag and requests shrunk to this
    node, in the test: the sample says :latest and 1 CPU per worker).

Skipped without the binaries, root or the image archives; failed instead under
KOROVOD_REQUIRE_K8S=1."""
import calendar
import json
import os
import re
import subprocess
import tempfile
import time
import uuid

import pytest
import yaml

from cluster import REPO, require_binaries, unavailable
from proc_watcher import ProcWatcher
from real_node import COSCHEDULER_NAME, require_node_binaries, require_scheduler_plugins, running

IMAGES_DIR = os.environ.get("KOROVOD_IMAGES_DIR") or os.path.join(REPO, ".testinfra", "images")
ARCHIVES = ("operator", "sidecar", "trainer-pytorch")
CHART = os.path.join(REPO, "helm", "korovod")
RELEASE, OPERATOR_NS = "korovod", "korovod-system"
UID = GID = 65532
IMAGE_OF = {a: "ghcr.io/korovod/" + a for a in ARCHIVES}


def _tag():
    with open(os.path.join(CHART, "Chart.yaml")) as f:
        return yaml.safe_load(f)["appVersion"]


TAG = os.environ.get("KOROVOD_IMAGE_TAG") or _tag()
TRAINER = "ghcr.io/korovod/trainer-pytorch:" + TAG
SIDECAR = "ghcr.io/korovod/sidecar:" + TAG


def _require_images():
    """The images to import: the archives scripts/build-images.sh writes, or with
    KOROVOD_IMAGES_FROM=podman the images in podman's storage, streamed (no archives needed)."""
    if os.environ.get("KOROVOD_IMAGES_FROM") == "podman":
        return ["podman:%s:%s" % (IMAGE_OF[a], TAG) for a in ARCHIVES]
    missing = [a for a in ARCHIVES if not os.path.isfile(os.path.join(IMAGES_DIR, a + ".tar"))]
    if missing:
        why = ("no image archives %s in %s: run scripts/build-images.sh after the build"
               % (", ".join(missing), IMAGES_DIR))
        unavailable(why)
    return [os.path.join(IMAGES_DIR, a + ".tar") for a in ARCHIVES]


@pytest.fixture(scope="module")
def node():
    paths = require_binaries("helm")
    require_node_binaries()
    require_scheduler_plugins()  # the gang sample's Coscheduling scheduler, beside the default
    archives = _require_images()
    keep = os.environ.get("KOROVOD_REAL_E2E_LOGS")  # a folder to keep the logs in
    with tempfile.TemporaryDirectory(prefix="korovod-real-e2e-") as tmp:
        d = keep or tmp
        os.makedirs(d, exist_ok=True)
        t0 = time.monotonic()
        with running(d, images=archives, coscheduling="beside") as c:
            print("\nreal node Ready in %.1f s, images imported in %.1f s"
                  % (c.start_seconds, time.monotonic() - t0 - c.start_seconds))
            c.helm_path = paths["helm"]
            yield c


def _helm(c, *args, timeout=600):
    r = subprocess.run([c.helm_path, "--kubeconfig", c.admin_kubeconfig, *args],
                       capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise AssertionError("helm %s failed (%d): %s%s" % (" ".join(args), r.returncode,
                                                           r.stdout, r.stderr))
    return r.stdout


def _operator_state(c):
    pods = c.kubectl("-n", OPERATOR_NS, "get", "pods", "-o", "wide", check=False)
    logs = c.kubectl("-n", OPERATOR_NS, "logs", "-l", "app.kubernetes.io/name=korovod",
                     "--tail=40", "--prefix", check=False)
    ev = c.kubectl("-n", OPERATOR_NS, "get", "events", "--sort-by=.lastTimestamp", check=False)
    return "%s\n%s%s\n%s" % (pods.stdout, logs.stdout, logs.stderr, ev.stdout[-3000:])


@pytest.fixture(scope="module")
def operator(node):
    """helm install of the chart with the operator image; returns once it is ready and its
    webhook configuration carries the caBundle."""
    t0 = time.monotonic()
    try:
        _helm(node, "install", RELEASE, CHART, "--namespace", OPERATOR_NS, "--create-namespace",
              "--set", "operator.image.tag=" + TAG, "--set", "operator.image.pullPolicy=Never",
              "--set", "sidecar.image.tag=" + TAG,
              "--wait", "--timeout", "300s")
    except (AssertionError, subprocess.TimeoutExpired) as e:
        raise AssertionError("%s\n%s" % (e, _operator_state(node))) from None
    print("helm install --wait: operator ready in %.1f s" % (time.monotonic() - t0))

    def ca_bundle():
        hooks = node.get("/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/"
                         + RELEASE) or {}
        return all(w.get("clientConfig", {}).get("caBundle") for w in hooks.get("webhooks", [])) \
            and hooks.get("webhooks")
    node.wait_for(ca_bundle, "the operator to set the webhook's caBundle", 120)
    yield
    # The operator's log, next to the node's logs (KOROVOD_REAL_E2E_LOGS keeps them).
    with open(os.path.join(node.dir, "operator-pod.log"), "w") as f:
        f.write(node.kubectl("-n", OPERATOR_NS, "logs", "-l", "app.kubernetes.io/name=korovod",
                             "--tail=-1", check=False).stdout)
    _helm(node, "uninstall", RELEASE, "--namespace", OPERATOR_NS, "--wait", "--timeout", "120s")


def _namespace(c, labels=None):
    ns = "e2e-" + uuid.uuid4().hex[:6]
    c.kubectl("apply", "-f", "-", input=json.dumps({
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns,
                                                             "labels": labels or {}}}))
    c.wait_for(lambda: c.get("/api/v1/namespaces/%s/serviceaccounts/default" % ns),
               "service account default in " + ns, 60)
    return ns


def _ts(s):
    return calendar.timegm(time.strptime(s, "%Y-%m-%dT%H:%M:%SZ"))


def _job(c, ns, name):
    return c.get("/apis/korovod.dev/v1alpha1/namespaces/%s/horovodjobs/%s" % (ns, name))


def _pods(c, ns, selector):
    return sorted(c.get("/api/v1/namespaces/%s/pods?labelSelector=%s" % (ns, selector))["items"],
                  key=lambda p: p["metadata"]["name"])


def _diagnose(c, ns):
    out = [c.kubectl("-n", ns, "get", "pods,svc,secrets,hvdjob,jobs,sts", "-o", "wide",
                     check=False).stdout]
    for p in c.get("/api/v1/namespaces/%s/pods" % ns)["items"]:
        name = p["metadata"]["name"]
        out.append("--- %s status: %s" % (name, json.dumps(p.get("status"))[:3000]))
        r = c.kubectl("-n", ns, "logs", name, "--all-containers", "--prefix", "--tail=40",
                      check=False)
        out.append(r.stdout + r.stderr)
    out.append(c.kubectl("-n", ns, "get", "events", "--sort-by=.lastTimestamp",
                         check=False).stdout[-4000:])
    out.append(c.kubectl("-n", OPERATOR_NS, "logs", "-l", "app.kubernetes.io/name=korovod",
                         "--tail=60", check=False).stdout)
    return "\n".join(out)


def _first_epoch_time(c, ns, pod):
    """The kubelet's timestamp of rank 0's first 'epoch' line (kubectl logs --timestamps)."""
    r = c.kubectl("-n", ns, "logs", pod, "-c", "trainer", "--timestamps", check=False)
    for line in r.stdout.splitlines():
        stamp, _, text = line.partition(" ")
        if text.startswith("epoch"):
            secs, frac = stamp.rstrip("Z").split(".") if "." in stamp else (stamp.rstrip("Z"), "0")
            return calendar.timegm(time.strptime(secs, "%Y-%m-%dT%H:%M:%S")) + \
                float("0." + frac)
    return None


def _wait_gone(c, path, what, deadline=120):
    c.wait_alive(lambda: c.get(path) is None, what, deadline, "kube-controller-manager")


def test_helm_install_runs_the_operator_pod(node, operator):
    """The chart's defaults: 2 replicas, one leader; both serve the webhook with the one CA."""
    pods = _pods(node, OPERATOR_NS, "app.kubernetes.io/name=korovod")
    assert len(pods) == 2, [p["metadata"]["name"] for p in pods]
    creds = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                if not f.read().split(b"\0")[0].endswith(b"korovod-operator"):
                    continue
            with open("/proc/%s/cgroup" % pid) as f:
                cg = f.read().replace("_", "-")
            with open("/proc/%s/status" % pid) as f:
                status = dict(line.split(":", 1) for line in f if ":" in line)
        except OSError:
            continue
        for p in pods:
            if p["metadata"]["uid"] in cg:
                creds[p["metadata"]["name"]] = status
    leading = 0
    for pod in pods:
        name = pod["metadata"]["name"]
        assert pod["spec"]["containers"][0]["image"] == "ghcr.io/korovod/operator:" + TAG
        assert pod["spec"]["nodeName"] == node.node
        ready = [c for c in pod["status"]["conditions"] if c["type"] == "Ready"]
        assert ready and ready[0]["status"] == "True", pod["status"]
        # The operator process itself: the chart's user and group.
        assert name in creds, "no korovod-operator process of pod %s on this machine" % name
        assert creds[name]["Uid"].split()[:2] == [str(UID)] * 2, creds[name]["Uid"]
        assert creds[name]["Gid"].split()[:2] == [str(GID)] * 2, creds[name]["Gid"]
        log = node.kubectl("-n", OPERATOR_NS, "logs", name).stdout
        assert "webhook: serving POST /inject" in log, log[-3000:]
        leading += "operator: leading" in log
    assert leading == 1, _operator_state(node)


def test_horovodjob_trains_from_the_images(node, operator):
    ns = _namespace(node)
    name = "digits"
    job = {"apiVersion": "korovod.dev/v1alpha1", "kind": "HorovodJob",
           "metadata": {"name": name, "namespace": ns},
           "spec": {"replicas": 2,
                    "sidecar": {"image": SIDECAR},
                    "runPolicy": {"backoffLimit": 0, "cleanPodPolicy": "None"},
                    "template": {"spec": {"containers": [{
                        "name": "trainer", "image": TRAINER,
                        "command": ["sh", "-c", "id; exec python3 /examples/pytorch_digits.py "
                                                "--epochs 3"]}]}}}}

    def uids():
        return [p["metadata"]["uid"] for p in _pods(node, ns, "korovod.dev/job-name=" + name)]
    with ProcWatcher(uids) as procs:
        t_apply = time.time()
        node.kubectl("apply", "-f", "-", input=json.dumps(job))
        try:
            node.wait_for(lambda: (_job(node, ns, name) or {}).get("status", {}).get("phase")
                          in ("Succeeded", "Failed"), "job %s finished" % name, 420)
        except AssertionError as e:
            raise AssertionError("%s\n%s" % (e, _diagnose(node, ns))) from None
    t_done = time.time()
    status = _job(node, ns, name)["status"]
    assert status["phase"] == "Succeeded", (status, _diagnose(node, ns))
    pods = _pods(node, ns, "korovod.dev/job-name=" + name)
    assert [p["metadata"]["name"] for p in pods] == [name + "-worker-0", name + "-worker-1"]
    first = _first_epoch_time(node, ns, name + "-worker-0")
    assert first, node.kubectl("-n", ns, "logs", name + "-worker-0", "-c", "trainer").stdout
    msg = "apply-to-first-step: %.1f s (rank 0's first epoch line; job Succeeded %.1f s after " \
          "apply)" % (first - t_apply, t_done - t_apply)
    # Where the time goes (the API's timestamps have whole seconds).
    p0 = [p for p in pods if p["metadata"]["name"] == name + "-worker-0"][0]
    st0 = p0["status"]
    marks = [("pod created", _ts(p0["metadata"]["creationTimestamp"])),
             ("scheduled", _ts([c for c in st0["conditions"] if c["type"] == "PodScheduled"][0][
                 "lastTransitionTime"])),
             ("sidecar started", _ts(next(iter(st0["initContainerStatuses"][0]["state"].values()))[
                 "startedAt"])),
             ("trainer started", _ts(st0["containerStatuses"][0]["state"]["terminated"][
                 "startedAt"])),
             ("first epoch line", first)]
    # (whole seconds: apply's time truncated like the API's)
    msg += "; after apply: " + ", ".join("%s +%d s" % (k, int(v) - int(t_apply))
                                         for k, v in marks)
    print("\n" + msg)
    with open(os.path.join(node.dir, "apply-to-first-step.txt"), "w") as f:
        f.write(msg + "\n")

    trainer0 = node.kubectl("-n", ns, "logs", name + "-worker-0", "-c", "trainer").stdout
    accuracies = [float(a) for a in re.findall(r"test accuracy ([0-9.]+)%", trainer0)]
    assert len(accuracies) == 3 and accuracies[-1] >= 80.0, trainer0
    # The image's user and group (the template sets no runAsGroup: the kubelet passes only the
    # image's uid, and the group comes from the image's passwd entry, not 0), and the sidecar's
    # group as a supplemental group (the socket and arena).
    ids = re.search(r"uid=(\d+)\S* gid=(\d+)\S* groups=(\S+)", trainer0)
    assert ids and (ids.group(1), ids.group(2)) == (str(UID), str(GID)), trainer0[:500]
    assert str(GID) in re.findall(r"(\d+)", ids.group(3)), trainer0[:500]
    sidecar0 = node.kubectl("-n", ns, "logs", name + "-worker-0", "-c", "korovod-sidecar").stdout
    assert "rank 0/2" in sidecar0 and "socket /var/run/korovod" in sidecar0, sidecar0[-3000:]
    for p in pods:
        spec, st = p["spec"], p["status"]
        side = spec["initContainers"][0]
        assert side["name"] == "korovod-sidecar" and side["restartPolicy"] == "Always", spec
        assert side["image"] == SIDECAR
        sc = side["securityContext"]
        assert (sc["runAsUser"], sc["runAsGroup"], sc["readOnlyRootFilesystem"]) == \
            (UID, GID, True), sc
        assert GID in spec["securityContext"]["supplementalGroups"], spec["securityContext"]
        # Native sidecar order: the sidecar started (and passed its startup probe) first.
        side_st = [s for s in st["initContainerStatuses"] if s["name"] == "korovod-sidecar"][0]
        train_st = [s for s in st["containerStatuses"] if s["name"] == "trainer"][0]
        side_state = side_st["state"].get("running") or side_st["state"].get("terminated")
        train_state = train_st["state"]["terminated"]
        assert train_state["exitCode"] == 0, train_st
        assert _ts(side_state["startedAt"]) <= _ts(train_state["startedAt"]), (side_st, train_st)
        # The processes as they ran on the machine.
        uid = p["metadata"]["uid"]
        side_proc = procs.seen.get((uid, "korovod-sidecar"))
        assert side_proc, ("korovod-sidecar of %s never seen in /proc" % p["metadata"]["name"],
                           procs.seen)
        assert side_proc["Uid"][:2] == [str(UID)] * 2 and side_proc["Gid"][:2] == [str(GID)] * 2, \
            side_proc
        train_proc = procs.seen.get((uid, "python3"))
        assert train_proc and str(GID) in train_proc["Groups"], (train_proc, procs.seen)
        assert train_proc["Uid"][:2] == [str(UID)] * 2 and \
            train_proc["Gid"][:2] == [str(GID)] * 2, train_proc
    print("sidecar process: Uid %s Gid %s Groups %s; trainer: Uid %s Gid %s Groups %s" % (
        *[" ".join(side_proc[k]) for k in ("Uid", "Gid", "Groups")],
        *[" ".join(train_proc[k]) for k in ("Uid", "Gid", "Groups")]))

    # Deleting the job: the garbage collector removes what it owns.
    job_uid = _job(node, ns, name)["metadata"]["uid"]
    owned = []
    for kind in ("pods", "services", "secrets", "configmaps"):
        for o in node.get("/api/v1/namespaces/%s/%s" % (ns, kind))["items"]:
            if any(r["uid"] == job_uid for r in o["metadata"].get("ownerReferences", [])):
                owned.append("/api/v1/namespaces/%s/%s/%s" % (ns, kind, o["metadata"]["name"]))
    kinds = {o.split("/")[-2] for o in owned}
    assert {"pods", "services", "secrets"} <= kinds, owned
    node.kubectl("-n", ns, "delete", "hvdjob", name, "--wait=false")
    t0 = time.monotonic()
    for path in owned:
        _wait_gone(node, path, "%s garbage-collected" % path)
    print("job deleted: %d children garbage-collected in %.1f s" % (len(owned),
                                                                  time.monotonic() - t0))


def test_workers_of_two_ranks_train_hierarchically(node, operator):
    """spec.worker.ranksPerWorker: 2 on 2 workers: 4 ranks, the trainer's command run once per
    local rank by korovod-local-ranks in the image, one sidecar per pod serving both ranks, and
    the pods (two network namespaces) as two hosts: allreduce goes hierarchical."""
    ns = _namespace(node)
    name = "pods-of-two"
    job = {"apiVersion": "korovod.dev/v1alpha1", "kind": "HorovodJob",
           "metadata": {"name": name, "namespace": ns},
           "spec": {"replicas": 2, "worker": {"ranksPerWorker": 2},
                    "sidecar": {"image": SIDECAR},
                    "runPolicy": {"backoffLimit": 0, "cleanPodPolicy": "None"},
                    "template": {"spec": {"containers": [{
                        "name": "trainer", "image": TRAINER,
                        "command": ["python3", "/examples/pytorch_digits.py"],
                        "args": ["--epochs", "3"]}]}}}}
    node.kubectl("apply", "-f", "-", input=json.dumps(job))
    try:
        node.wait_for(lambda: (_job(node, ns, name) or {}).get("status", {}).get("phase")
                      in ("Succeeded", "Failed"), "job %s finished" % name, 420)
    except AssertionError as e:
        raise AssertionError("%s\n%s" % (e, _diagnose(node, ns))) from None
    status = _job(node, ns, name)["status"]
    assert status["phase"] == "Succeeded", (status, _diagnose(node, ns))
    assert status.get("worldSize") == 4, status
    pods = _pods(node, ns, "korovod.dev/job-name=" + name)
    assert len(pods) == 2, [p["metadata"]["name"] for p in pods]
    for i in range(2):
        pod = name + "-worker-%d" % i
        trainer = node.kubectl("-n", ns, "logs", pod, "-c", "trainer").stdout
        sidecar = node.kubectl("-n", ns, "logs", pod, "-c", "korovod-sidecar").stdout
        assert "[ranks %d-%d]" % (2 * i, 2 * i + 1) in sidecar, sidecar[-3000:]
        for r in (2 * i, 2 * i + 1):
            assert "rank %d/4" % r in sidecar, sidecar[-3000:]
        assert "allreduce hierarchical (2 hosts x 2 ranks)" in sidecar, sidecar[-3000:]
        if i == 0:  # rank 0 reports the training, prefixed by korovod-local-ranks
            accuracies = [float(a) for a in re.findall(r"^\[0\] .*test accuracy ([0-9.]+)%",
                                                       trainer, re.M)]
            assert len(accuracies) == 3 and accuracies[-1] >= 70.0, trainer[-3000:]


DDP_TUTORIAL = "/examples/torch_distributed/ddp_tutorial.py"
FSDP2_TUTORIAL = "/examples/torch_distributed/fsdp2_tutorial.py"
STEP_LOSS = re.compile(r"^step (\d+) loss (-?[0-9.]+)$", re.M)
# The newest torch's virtualenv (scripts/install-deps.sh --torch-newest), mounted read-only into
# the trainer: the image carries Debian's torch 1.13, and a second image of 5 GB is not worth it.
TORCH_NEWEST = os.environ.get("KOROVOD_TORCH_NEWEST_PYTHON", "")
TORCH_NEWEST_VENV = os.path.dirname(os.path.dirname(TORCH_NEWEST)) if TORCH_NEWEST else ""


def _torch_job(node, name, command, volumes=None):
    """A 2-worker HorovodJob whose trainer runs `command` (after printing torchrun's variables
    as the operator set them) to Succeeded; returns (namespace, both trainers' logs)."""
    ns = _namespace(node)
    show = "echo torchrun env: RANK=$RANK WORLD_SIZE=$WORLD_SIZE LOCAL_RANK=$LOCAL_RANK " \
           "LOCAL_WORLD_SIZE=$LOCAL_WORLD_SIZE GROUP_RANK=$GROUP_RANK MASTER_ADDR=$MASTER_ADDR " \
           "MASTER_PORT=$MASTER_PORT; "
    trainer = {"name": "trainer", "image": TRAINER, "command": ["sh", "-c", show + command]}
    pod = {"containers": [trainer]}
    if volumes:
        trainer["volumeMounts"] = [{"name": n, "mountPath": path, "readOnly": True}
                                   for n, (_, path) in volumes.items()]
        pod["volumes"] = [{"name": n, "hostPath": {"path": host, "type": "Directory"}}
                          for n, (host, _) in volumes.items()]
    job = {"apiVersion": "korovod.dev/v1alpha1", "kind": "HorovodJob",
           "metadata": {"name": name, "namespace": ns},
           "spec": {"replicas": 2, "sidecar": {"image": SIDECAR},
                    "runPolicy": {"backoffLimit": 0, "cleanPodPolicy": "None"},
                    "template": {"spec": pod}}}
    node.kubectl("apply", "-f", "-", input=json.dumps(job))
    try:
        node.wait_for(lambda: (_job(node, ns, name) or {}).get("status", {}).get("phase")
                      in ("Succeeded", "Failed"), "job %s finished" % name, 300)
    except AssertionError as e:
        raise AssertionError("%s\n%s" % (e, _diagnose(node, ns))) from None
    status = _job(node, ns, name)["status"]
    logs = [node.kubectl("-n", ns, "logs", "%s-worker-%d" % (name, r), "-c", "trainer",
                         check=False).stdout for r in range(2)]
    assert status["phase"] == "Succeeded", "%s\n%s\ntrainers' logs:\n%s" % (
        status.get("conditions"), _diagnose(node, ns), "\n".join(l[-3000:] for l in logs))
    master = "%s-worker-0.%s.%s.svc.cluster.local" % (name, name, ns)
    for r, log in enumerate(logs):
        assert ("torchrun env: RANK=%d WORLD_SIZE=2 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 GROUP_RANK=%d "
                "MASTER_ADDR=%s MASTER_PORT=29500" % (r, r, master)) in log, log[-3000:]
    return ns, logs


def test_ddp_script_trains_on_korovod(node, operator):
    """A torch.distributed program as its users write it (PyTorch's DDP tutorial, with backend
    "korovod") in a 2-worker HorovodJob: init_process_group's env:// finds the world in the
    variables the operator sets (rank 0's pod serves torch's store), DDP's allreduces and the
    script's all_gather go through the sidecars, and the job Succeeds with the loss falling and
    both ranks holding the same parameters. (Torch 1.13 in the image has no "cpu:korovod,..."
    syntax; the next test runs the newest torch.)"""
    ns, logs = _torch_job(node, "ddp", "exec python3 " + DDP_TUTORIAL +
                          " --backend korovod --steps 8")
    for r, log in enumerate(logs):
        # The tutorial's own check: an all_gather of every rank's parameter checksums.
        assert "rank %d: ranks agree True" % r in log, log[-3000:]
    losses = [float(v) for _, v in STEP_LOSS.findall(logs[0])]
    assert len(losses) == 8 and losses[-1] < losses[0], logs[0][-3000:]
    print("\nDDP on korovod in a HorovodJob: loss %.6f -> %.6f over 8 steps" % (losses[0],
                                                                                losses[-1]))
    sidecar0 = node.kubectl("-n", ns, "logs", "ddp-worker-0", "-c", "korovod-sidecar").stdout
    assert "rank 0/2" in sidecar0, sidecar0[-3000:]


@pytest.mark.skipif(not TORCH_NEWEST_VENV or not os.path.isdir(TORCH_NEWEST_VENV),
                    reason="no newest-torch virtualenv (scripts/install-deps.sh --torch-newest)")
def test_fsdp2_and_ddp_on_the_newest_torch(node, operator):
    """The newest torch in HorovodJobs, the torch-venv mounted into the trainer: PyTorch's FSDP2
    tutorial (fully_shard on a transformer), whose loss curve must equal one process's replay of
    the same initial state and tokens (run by rank 0 in its container afterwards), and its DDP
    tutorial with backend "cpu:korovod,cuda:korovod", both unchanged."""
    py = "/opt/torch-venv/bin/python"
    venv = {"torch-venv": (TORCH_NEWEST_VENV, "/opt/torch-venv")}
    version = "%s -c 'import torch; print(\"torch\", torch.__version__)' && " % py
    _, logs = _torch_job(node, "fsdp2", (
        "cd /tmp && " + version + "%s %s --steps 4 --save-init /tmp/init.pt && "
        "if [ \"$RANK\" = 0 ]; then echo REFERENCE; %s %s --steps 4 --reference /tmp/init.pt; fi"
        % (py, FSDP2_TUTORIAL, py, FSDP2_TUTORIAL)), venv)
    fsdp, reference = logs[0].split("REFERENCE", 1)
    got = [float(v) for _, v in STEP_LOSS.findall(fsdp)]
    want = [float(v) for _, v in STEP_LOSS.findall(reference)]
    assert "torch 2." in fsdp and "trained 65984 parameters on 2 ranks" in fsdp, fsdp[-3000:]
    assert len(got) == len(want) == 4 and got[-1] < got[0], logs[0][-3000:]
    for g, w in zip(got, want):
        assert abs(g - w) <= 1e-5 * max(1.0, abs(w)), (got, want)
    print("\nFSDP2 on the newest torch in a HorovodJob: loss %s, one process %s" % (got, want))
    _, logs = _torch_job(node, "ddp-newest", version + "%s %s --backend cpu:korovod,cuda:korovod "
                         "--steps 4" % (py, DDP_TUTORIAL), venv)
    for r, log in enumerate(logs):
        assert "torch 2." in log and "rank %d: ranks agree True" % r in log, log[-3000:]


def _trainer(cmd_tail=""):
    return {"name": "trainer", "image": TRAINER,
            "command": ["sh", "-c", "python3 /examples/pytorch_digits.py --epochs 2" + cmd_tail]}


def _key_secret(c, ns, name):
    c.kubectl("-n", ns, "create", "secret", "generic", name,
              "--from-literal=key=" + uuid.uuid4().hex + uuid.uuid4().hex)


def _headless(c, ns, name, selector):
    c.kubectl("-n", ns, "apply", "-f", "-", input=json.dumps({
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
        "spec": {"clusterIP": "None", "publishNotReadyAddresses": True, "selector": selector}}))


def _assert_injected(pod, rank0):
    names = [c["name"] for c in pod["spec"].get("initContainers", [])]
    assert names[:1] == ["korovod-sidecar"], pod["spec"]
    assert pod["spec"]["initContainers"][0]["image"] == SIDECAR
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    # The chart's coordinator port (sidecar.coordinatorPort), by rank 0's DNS name.
    assert env["KOROVOD_COORDINATOR"] == "%s.%s.svc.cluster.local:28500" % (
        rank0, pod["metadata"]["namespace"]), env


def test_webhook_injects_a_statefulset_that_trains(node, operator):
    ns = _namespace(node)
    name = "sts"
    _key_secret(node, ns, name + "-korovod-key")
    _headless(node, ns, name, {"app": name})
    # A StatefulSet's pods restart when they exit: the trainer stays up after training.
    node.kubectl("-n", ns, "apply", "-f", "-", input=json.dumps({
        "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": name},
        "spec": {"replicas": 2, "serviceName": name, "podManagementPolicy": "Parallel",
                 "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name, "korovod.dev/inject": "true"},
                                           "annotations": {"korovod.dev/world-size": "2"}},
                              "spec": {"terminationGracePeriodSeconds": 2, "containers": [
                                  _trainer(" && echo TRAINED && exec sleep 3600")]}}}}))

    def trained():
        logs = [node.kubectl("-n", ns, "logs", "%s-%d" % (name, i), "-c", "trainer",
                             check=False).stdout for i in range(2)]
        return logs if all("TRAINED" in log for log in logs) else None
    try:
        logs = node.wait_alive(trained, "both StatefulSet pods trained", 420, "kubelet")
    except AssertionError as e:
        raise AssertionError("%s\n%s" % (e, _diagnose(node, ns))) from None
    assert re.search(r"epoch +2 .*test accuracy", logs[0]), logs[0]
    for i in range(2):
        pod = node.get("/api/v1/namespaces/%s/pods/%s-%d" % (ns, name, i))
        _assert_injected(pod, "%s-0.%s" % (name, name))
        assert pod["status"]["containerStatuses"][0]["restartCount"] == 0, pod["status"]
    node.kubectl("-n", ns, "delete", "statefulset", name, "--wait=false")
    for i in range(2):
        _wait_gone(node, "/api/v1/namespaces/%s/pods/%s-%d" % (ns, name, i),
                   "StatefulSet pod %d removed" % i)


def test_webhook_injects_an_indexed_job_that_trains(node, operator):
    ns = _namespace(node)
    name = "idx"
    _key_secret(node, ns, name + "-korovod-key")
    _headless(node, ns, name, {"job-name": name})
    node.kubectl("-n", ns, "apply", "-f", "-", input=json.dumps({
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
        "spec": {"completionMode": "Indexed", "completions": 2, "parallelism": 2,
                 "backoffLimit": 0,
                 "template": {"metadata": {"labels": {"korovod.dev/inject": "true"},
                                           "annotations": {"korovod.dev/world-size": "2"}},
                              "spec": {"subdomain": name, "restartPolicy": "Never",
                                       "containers": [_trainer()]}}}}))

    def finished():
        st = (node.get("/apis/batch/v1/namespaces/%s/jobs/%s" % (ns, name)) or {}).get(
            "status", {})
        done = {c["type"] for c in st.get("conditions", []) if c["status"] == "True"}
        return done & {"Complete", "Failed"}
    try:
        done = node.wait_alive(finished, "Indexed Job %s finished" % name, 420, "kubelet")
    except AssertionError as e:
        raise AssertionError("%s\n%s" % (e, _diagnose(node, ns))) from None
    assert done == {"Complete"}, _diagnose(node, ns)
    pods = _pods(node, ns, "job-name=" + name)
    assert len(pods) == 2, [p["metadata"]["name"] for p in pods]
    for p in pods:
        _assert_injected(p, "%s-0.%s" % (name, name))
        assert p["status"]["phase"] == "Succeeded", p["status"]
    rank0 = [p for p in pods if p["metadata"]["annotations"].get(
        "batch.kubernetes.io/job-completion-index") == "0"][0]
    log = node.kubectl("-n", ns, "logs", rank0["metadata"]["name"], "-c", "trainer").stdout
    assert re.search(r"epoch +2 .*test accuracy", log), log


def test_cpu_job_sample_runs(node, operator):
    """crds/samples/cpu-job.yaml as written, except: the images' :latest becomes the built tag (no
    registry here) and the requests shrink to fit a 2-CPU node (4 x (1 + 0.5) CPUs would stay
    Pending)."""
    ns = _namespace(node)
    with open(os.path.join(REPO, "crds", "samples", "cpu-job.yaml")) as f:
        doc = yaml.safe_load(f)
    name = doc["metadata"]["name"]
    spec = doc["spec"]
    trainer = spec["template"]["spec"]["containers"][0]
    assert trainer["image"].endswith(":latest") and spec["sidecar"]["image"].endswith(":latest")
    trainer["image"] = trainer["image"].rsplit(":", 1)[0] + ":" + TAG
    spec["sidecar"]["image"] = spec["sidecar"]["image"].rsplit(":", 1)[0] + ":" + TAG
    trainer["resources"]["requests"] = {"cpu": "100m", "memory": "256Mi"}
    spec["sidecar"]["resources"]["requests"] = {"cpu": "50m", "memory": "64Mi"}
    node.kubectl("-n", ns, "apply", "-f", "-", input=json.dumps(doc))
    try:
        node.wait_for(lambda: (_job(node, ns, name) or {}).get("status", {}).get("phase")
                      in ("Succeeded", "Failed"), "job %s finished" % name, 600)
    except AssertionError as e:
        raise AssertionError("%s\n%s" % (e, _diagnose(node, ns))) from None
    status = _job(node, ns, name)["status"]
    assert status["phase"] == "Succeeded", (status, _diagnose(node, ns))
    log = node.kubectl("-n", ns, "logs", name + "-worker-0", "-c", "trainer", check=False).stdout
    # cleanPodPolicy's default (Running) keeps the Succeeded pods and their logs.
    accuracies = re.findall(r"test accuracy ([0-9.]+)%", log)
    assert len(accuracies) == 15 and float(accuracies[-1]) >= 90.0, log
    assert status["succeededWorkers"] == 4, status


def test_gang_cpu_sample_runs(node, operator):
    """crds/samples/gang-cpu-job.yaml (images pinned to the built tag): the operator makes its
    scheduler-plugins PodGroup, the Coscheduling scheduler places both workers, and they train."""
    ns = _namespace(node)
    with open(os.path.join(REPO, "crds", "samples", "gang-cpu-job.yaml")) as f:
        doc = yaml.safe_load(f)
    name = doc["metadata"]["name"]
    spec = doc["spec"]
    assert spec["schedulingPolicy"]["schedulerName"] == COSCHEDULER_NAME
    trainer = spec["template"]["spec"]["containers"][0]
    trainer["image"] = trainer["image"].rsplit(":", 1)[0] + ":" + TAG
    spec["sidecar"]["image"] = spec["sidecar"]["image"].rsplit(":", 1)[0] + ":" + TAG
    trainer["resources"]["requests"] = {"cpu": "100m", "memory": "256Mi"}
    node.kubectl("-n", ns, "apply", "-f", "-", input=json.dumps(doc))
    try:
        node.wait_for(lambda: (_job(node, ns, name) or {}).get("status", {}).get("phase")
                      in ("Succeeded", "Failed"), "job %s finished" % name, 600)
    except AssertionError as e:
        raise AssertionError("%s\n%s" % (e, _diagnose(node, ns))) from None
    status = _job(node, ns, name)["status"]
    assert status["phase"] == "Succeeded", (status, _diagnose(node, ns))
    group = node.get("/apis/scheduling.x-k8s.io/v1alpha1/namespaces/%s/podgroups/%s" % (ns, name))
    assert group["spec"]["minMember"] == 2, group
    for p in node.get("/api/v1/namespaces/%s/pods?labelSelector=korovod.dev/job-name=%s"
                      % (ns, name))["items"]:
        assert p["spec"]["schedulerName"] == COSCHEDULER_NAME
        assert p["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] == name
    log = node.kubectl("-n", ns, "logs", name + "-worker-0", "-c", "trainer", check=False).stdout
    accuracies = re.findall(r"test accuracy ([0-9.]+)%", log)
    assert len(accuracies) == 5 and float(accuracies[-1]) >= 85.0, log
