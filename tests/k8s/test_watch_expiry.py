"""Watch expiry against a real kube-apiserver: while the operator is frozen, the API server
restarts (its watches drop), a job is created and etcd is compacted past the operator's
resourceVersion, so its reconnects get 410 Gone; it must re-list and act on what changed
meanwhile. Uses its own API server without the watch cache, so the 410 comes from etcd's
compaction deterministically."""
import signal
import tempfile

import pytest

from cluster import Cluster, require_binaries
from fake_kubelet import FakeKubelet
from jobs import CRD, apply, job_doc, pods, wait_phase
from operator_process import OperatorProcess


@pytest.fixture(scope="module")
def bare_cluster():
    require_binaries()
    with tempfile.TemporaryDirectory(prefix="korovod-k8s-nocache-") as d:
        c = Cluster(d, ["--watch-cache=false"])
        try:
            c.start()
            c.kubectl("apply", "-f", CRD)
            c.wait_established("crd/horovodjobs.korovod.dev")
            yield c
        finally:
            c.stop()


def test_relists_after_410_and_sees_what_changed(bare_cluster, tmp_path):
    c = bare_cluster
    operator = OperatorProcess(c, str(tmp_path), "operator-410",
                               ["--watch-timeout-seconds", "2"]).start()
    try:
        c.wait_for(lambda: operator.http("/readyz")[0] == 200, "operator ready", 60)
        with FakeKubelet(c, "default"):
            apply(c, "default", job_doc("before", replicas=1))
            wait_phase(c, "default", "before", "Running")
            operator.proc.send_signal(signal.SIGSTOP)
            try:
                # Every watch of the frozen operator drops with the API server; the new job and
                # the compaction happen while it cannot reconnect, so no watch stream carries
                # the job: only a re-list after the 410 can find it.
                c.restart_apiserver()
                apply(c, "default", job_doc("during", replicas=2))
                c.compact_etcd()
            finally:
                operator.proc.send_signal(signal.SIGCONT)
            wait_phase(c, "default", "during", "Running", 60)
            assert len(pods(c, "default", "during")) == 2
        log = operator.log()
        assert "watch horovodjobs: " in log and "HTTP 410" in log, log[-3000:]
    finally:
        assert operator.stop() == 0, operator.log()[-3000:]
