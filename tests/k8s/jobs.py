"""Helpers shared by the operator's integration tests."""
import json
import os
import time
import uuid

import pytest

from cluster import REPO

CRD = os.path.join(REPO, "crds", "korovod.dev_horovodjobs.yaml")
JOBS = "/apis/korovod.dev/v1alpha1/namespaces/%s/horovodjobs"


@pytest.fixture(scope="module")
def crd(cluster):
    cluster.kubectl("apply", "-f", CRD)
    cluster.wait_established("crd/horovodjobs.korovod.dev")
    return cluster


@pytest.fixture
def ns(crd):
    name = "t-" + uuid.uuid4().hex[:8]
    crd.kubectl("create", "namespace", name)
    crd.wait_for(lambda: crd.request("POST", "/api/v1/namespaces/%s/serviceaccounts" % name,
                                     {"metadata": {"name": "default"}})[0] in (201, 409),
                 "service account default in " + name, 30)
    return name


def job_doc(name, replicas=2, **spec):
    doc = {"apiVersion": "korovod.dev/v1alpha1", "kind": "HorovodJob",
           "metadata": {"name": name},
           "spec": {"replicas": replicas, "sidecar": {"image": "korovod/sidecar:test"},
                    "template": {"spec": {"containers": [
                        {"name": "trainer", "image": "korovod/trainer:test",
                         "command": ["python3", "train.py"]}]}}}}
    for key, value in spec.items():
        doc["spec"][key] = value
    return json.dumps(doc)


def apply(cluster, ns, doc):
    cluster.kubectl("-n", ns, "apply", "-f", "-", input=doc)


def get_job(cluster, ns, name):
    return cluster.get((JOBS % ns) + "/" + name)


def pods(cluster, ns, job):
    items = cluster.get("/api/v1/namespaces/%s/pods?labelSelector=korovod.dev/job-name=%s"
                        % (ns, job))["items"]
    return sorted(items, key=lambda p: p["metadata"]["name"])


def wait_phase(cluster, ns, name, phase, deadline=60):
    def check():
        j = get_job(cluster, ns, name)
        return j if j and j.get("status", {}).get("phase") == phase else None
    try:
        return cluster.wait_for(check, "job %s/%s phase %s" % (ns, name, phase), deadline)
    except AssertionError:
        raise AssertionError("job %s/%s never reached %s; last: %s" % (
            ns, name, phase, json.dumps((get_job(cluster, ns, name) or {"status": "deleted"}).get(
                "status"))))


def condition(job, type_):
    for c in job.get("status", {}).get("conditions", []):
        if c["type"] == type_:
            return c
    return None


def events(cluster, ns):
    return cluster.get("/api/v1/namespaces/%s/events" % ns)["items"]


