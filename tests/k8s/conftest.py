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
        c = Cluster(d)
        try:
            c.start()
            yield c
        finally:
            c.stop()
