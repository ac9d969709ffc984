"""The HorovodJob CRD against a real kube-apiserver: kubectl applies it, the samples are
accepted, and the schema rejects bad specs at admission with the field named."""
import json
import os

import pytest

from cluster import REPO
from jobs import crd  # noqa: F401

SAMPLES = os.path.join(REPO, "crds", "samples")


def job(name, **spec):
    base = {"replicas": 2, "sidecar": {"image": "korovod/sidecar:test"},
            "template": {"spec": {"containers": [{"name": "trainer", "image": "t"}]}}}
    base.update(spec)
    return json.dumps({"apiVersion": "korovod.dev/v1alpha1", "kind": "HorovodJob",
                       "metadata": {"name": name}, "spec": base})


def test_samples_are_accepted_and_listed_with_printer_columns(crd):
    crd.kubectl("apply", "-f", SAMPLES)
    out = crd.kubectl("get", "hvdjob").stdout
    header = out.splitlines()[0].split()
    assert header == ["NAME", "PHASE", "READY", "WORKERS", "AGE"], out
    names = {line.split()[0] for line in out.splitlines()[1:]}
    assert len(names) == len(os.listdir(SAMPLES)), out
    crd.kubectl("delete", "-f", SAMPLES)


def test_defaults_are_applied_by_the_server(crd):
    crd.kubectl("apply", "-f", "-", input=job("defaults"))
    obj = json.loads(crd.kubectl("get", "hvdjob", "defaults", "-o", "json").stdout)
    rp = obj["spec"]["runPolicy"]
    assert rp["backoffLimit"] == 3 and rp["cleanPodPolicy"] == "Running" and rp["suspend"] is False
    assert obj["spec"]["worker"]["rdma"]["resourceName"] == "rdma/hca", obj["spec"]
    crd.kubectl("delete", "hvdjob", "defaults")


@pytest.mark.parametrize("spec,field", [
    ({"replicas": 0}, "spec.replicas"),
    ({"runPolicy": {"cleanPodPolicy": "Sometimes"}}, "spec.runPolicy.cleanPodPolicy"),
    ({"runPolicy": {"backoffLimit": -1}}, "spec.runPolicy.backoffLimit"),
    ({"schedulingPolicy": {"gang": {"enabled": True, "provider": "yunikorn"}}},
     "spec.schedulingPolicy.gang.provider"),
    ({"template": None}, "spec.template"),
    ({"sidecar": {"image": "s", "env": [{"name": "PATH", "value": "/x"}]}},
     "spec.sidecar.env[0].name"),
    ({"worker": {"ranksPerWorker": 0}}, "spec.worker.ranksPerWorker"),
    ({"worker": {"gpus": 2, "ranksPerWorker": 4}}, "ranksPerWorker must not exceed gpus"),
])
def test_schema_rejects_bad_specs_naming_the_field(crd, spec, field):
    doc = json.loads(job("bad"))
    for k, v in spec.items():
        if v is None:
            del doc["spec"][k]
        else:
            doc["spec"][k] = v
    r = crd.kubectl("apply", "-f", "-", input=json.dumps(doc), check=False)
    assert r.returncode != 0
    assert field in r.stderr, r.stderr
    assert crd.kubectl("get", "hvdjob", "bad", check=False).returncode != 0


def test_several_ranks_per_worker_are_accepted(crd):
    doc = json.loads(job("pods-of-ranks"))
    doc["spec"]["worker"] = {"gpus": 4, "ranksPerWorker": 4}
    doc["spec"]["template"]["spec"]["containers"][0]["command"] = ["python3", "train.py"]
    crd.kubectl("apply", "-f", "-", input=json.dumps(doc))
    obj = json.loads(crd.kubectl("get", "hvdjob", "pods-of-ranks", "-o", "json").stdout)
    assert obj["spec"]["worker"]["ranksPerWorker"] == 4, obj["spec"]
    crd.kubectl("delete", "hvdjob", "pods-of-ranks")


def test_status_is_a_subresource(crd):
    crd.kubectl("apply", "-f", "-", input=job("sub"))
    obj = crd.get("/apis/korovod.dev/v1alpha1/namespaces/default/horovodjobs/sub")
    obj["status"] = {"phase": "Running"}
    # A write to the main resource ignores status; only /status changes it.
    code, _ = crd.request("PUT", "/apis/korovod.dev/v1alpha1/namespaces/default/horovodjobs/sub",
                          obj)
    assert code == 200
    assert "status" not in crd.get(
        "/apis/korovod.dev/v1alpha1/namespaces/default/horovodjobs/sub") or \
        crd.get("/apis/korovod.dev/v1alpha1/namespaces/default/horovodjobs/sub")["status"].get(
            "phase") is None
    obj = crd.get("/apis/korovod.dev/v1alpha1/namespaces/default/horovodjobs/sub")
    obj["status"] = {"phase": "Running"}
    code, body = crd.request(
        "PUT", "/apis/korovod.dev/v1alpha1/namespaces/default/horovodjobs/sub/status", obj)
    assert code == 200, body
    out = crd.kubectl("get", "hvdjob", "sub").stdout
    assert "Running" in out, out
    crd.kubectl("delete", "hvdjob", "sub")


def test_compact_status_is_kept_and_a_stale_merge_patch_is_refused(crd):
    """The status shape the operator writes (not-Ready ranks, finishedRanks, compact elastic
    membership) is accepted and kept whole (not pruned), as a merge patch on /status that carries
    metadata.resourceVersion; the same patch with a stale resourceVersion gets 409."""
    path = "/apis/korovod.dev/v1alpha1/namespaces/default/horovodjobs/compact"
    crd.kubectl("apply", "-f", "-", input=job("compact"))
    rv = crd.get(path)["metadata"]["resourceVersion"]
    status = {
        "phase": "Running", "epoch": 1, "worldSize": 4096, "readyWorkers": 4000,
        "workers": [{"rank": 7, "pod": "compact-worker-7", "state": "Pending",
                     "reason": "ImagePullBackOff", "message": "Back-off pulling image"}],
        "unlistedWorkers": 95,
        "finishedRanks": [{"ranks": "0-3,9", "state": "Succeeded", "reason": "Completed"},
                          {"ranks": "5", "state": "Failed", "reason": "Error",
                           "message": "worker pod compact-worker-5 failed: exit code 3"}],
        "rankSummary": "Pending:7 Ready:4-6,8,10-4095 Succeeded:0-3,9",
        "elastic": {"epoch": 2, "resets": 1, "version": 9, "members": "4-5,0-1",
                    "memberUids": "0a1b2c3d4e5f6a7b8c9d0e1f2a3b4c5d", "rendezvousPort": 7000},
    }
    patch = {"metadata": {"resourceVersion": rv}, "status": status}
    code, body = crd.request("PATCH", path + "/status", patch,
                             content_type="application/merge-patch+json")
    assert code == 200, body
    stored = crd.get(path)["status"]
    for key, value in status.items():
        assert stored.get(key) == value, (key, stored.get(key))
    wide = crd.kubectl("get", "hvdjob", "compact", "-o", "wide").stdout.splitlines()
    assert wide[1].endswith(status["rankSummary"]), wide  # the RANKS column
    # A patch from a stale read is refused, so the operator re-reads and recomputes.
    code, body = crd.request("PATCH", path + "/status",
                             {"metadata": {"resourceVersion": rv}, "status": {"epoch": 2}},
                             content_type="application/merge-patch+json")
    assert code == 409, body
    # The schema holds the compact fields to their form.
    for bad in ({"finishedRanks": [{"ranks": "3-x", "state": "Succeeded"}]},
                {"finishedRanks": [{"ranks": "3", "state": "Running"}]},
                {"elastic": {"memberUids": "xyz"}}):
        code, body = crd.request("PATCH", path + "/status", {"status": bad},
                                 content_type="application/merge-patch+json")
        assert code == 422, (bad, body)
    crd.kubectl("delete", "hvdjob", "compact")
