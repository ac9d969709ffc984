"""Renders helm/korovod with the helm that scripts/build-testinfra.sh builds (shared by
test_helm_chart.py and test_operator_auth.py)."""
import os
import subprocess

import yaml

from cluster import REPO, require_binaries

CHART = os.path.join(REPO, "helm", "korovod")


def helm_binary():
    """The helm binary; skips the test when it is missing (fails under KOROVOD_REQUIRE_K8S=1)."""
    return require_binaries("helm")["helm"]


def helm(*args, check=True):
    r = subprocess.run([helm_binary(), *args], capture_output=True, text=True, timeout=120)
    if check and r.returncode != 0:
        raise AssertionError("helm %s failed (%d): %s" % (" ".join(args), r.returncode, r.stderr))
    return r


def template(values=None, namespace="korovod-system", release="rel", extra=()):
    """`helm template` of the chart: the list of rendered objects (dicts). values: a values file."""
    args = ["template", release, CHART, "--namespace", namespace, *extra]
    if values:
        args += ["-f", values]
    return [d for d in yaml.safe_load_all(helm(*args).stdout) if d]


def by_kind_name(docs):
    return {(d["kind"], d["metadata"]["name"]): d for d in docs}
