"""korovod.tensorflow / horovod.tensorflow / horovod.keras end to end: each test runs
`korovodrun -np N <python with TensorFlow> script`.

Environment: KOROVOD_BUILD_DIR (default <repo>/build) holds bin/korovodrun, the client extension
and python/korovod/tensorflow/_korovod_tf_ops.so; PYTHON: an interpreter with TensorFlow
(scripts/install-deps.sh --tensorflow makes <repo>/.deps/tf-venv).
"""
import json
import os
import re
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
BUILD = os.environ.get("KOROVOD_BUILD_DIR", os.path.join(REPO, "build"))
KOROVODRUN = os.path.join(BUILD, "bin", "korovodrun")
PYTHON = os.environ.get("PYTHON", sys.executable)


def _env(extra=None):
    env = dict(os.environ)
    paths = [os.path.join(REPO, "python"), os.path.join(BUILD, "python")]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    env.update(extra or {})
    return env


def run(np_, script, *args, timeout=600, env=None):
    cmd = [KOROVODRUN, "-np", str(np_), PYTHON, str(script)] + [str(a) for a in args]
    p = subprocess.run(cmd, env=_env(env), capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, "exit %d\nstdout:\n%s\nstderr:\n%s" % (
        p.returncode, p.stdout[-4000:], p.stderr[-4000:])
    return p.stdout


def assert_each_rank(out, np_, what):
    for r in range(np_):
        assert "[%d] rank %d %s" % (r, r, what) in out, out


@pytest.mark.parametrize("np_", [2, 3, 4])
def test_collectives(np_):
    """Every op, eager and in tf.function, every dtype, process sets, gradients,
    DistributedGradientTape, Horovod's error types, ops that need no thread each."""
    out = run(np_, os.path.join(HERE, "tf_collectives_worker.py"))
    assert_each_rank(out, np_, "tf collectives OK")
