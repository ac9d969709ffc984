import os
import sys
import tempfile

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster import Cluster, require_binaries  # noqa: E402


@pytest.fixture(scope="session")
def cluster():
    require_binaries()
    with tempfile.TemporaryDirectory(prefix="korovod-k8s-") as d:
        # The audit log records only the client-certificate user (test_operator_auth.py checks
        # its calls against the chart's RBAC rules); nothing else is logged, so it costs nothing.
        # OwnerReferencesPermissionEnforcement (on in OpenShift, off by default) makes the
        # children's blockOwnerDeletion need the chart's horovodjobs/finalizers grant.
        c = Cluster(d, audit_users=["korovod-operator-cert"], extra_apiserver_args=[
            "--enable-admission-plugins=OwnerReferencesPermissionEnforcement"])
        try:
            c.start()
            yield c
        finally:
            c.stop()
