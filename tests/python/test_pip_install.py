"""`pip install` into a fresh virtualenv holding TensorFlow, then jobs from the installed entry
points only.

The venv sees Debian's torch through --system-site-packages, as docs/install.md says to make it,
and holds the newest tensorflow-cpu from the package index (TENSORFLOW below, the set
scripts/install-deps.sh pins; numpy 1.x for Debian's torch). The package is built once, by
`pip wheel` (pip's build isolation, the same PEP 517 build `pip install .` runs: scikit-build-core
runs the project's CMake in a temporary directory, nothing comes from build/), and installed with
`pip install <wheel>`: the wheel must carry korovod.tensorflow's op library, built against the
venv's TensorFlow although the isolated build cannot import it. A second full build, so it is its
own ctest label (`package`). No PYTHONPATH anywhere: the trainers must import korovod and horovod
from the venv, and korovodrun must find the installed sidecar.

Environment: PYTHON (default /usr/bin/python3) creates the venv; JOBS (default 2) is the build's
parallelism.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import pytest

# The newest TensorFlow on the package index (bump with scripts/install-deps.sh's TENSORFLOW_SET).
TENSORFLOW = ["tensorflow-cpu==2.21.0", "numpy==1.26.4"]

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
PYTHON = os.environ.get("PYTHON") or ("/usr/bin/python3" if os.path.exists("/usr/bin/python3")
                                      else sys.executable)

CHECK = """
import os, sys, torch
import korovod, horovod, korovod.torch, horovod.torch as hvd
venv = os.environ["VIRTUAL_ENV_UNDER_TEST"]
for m in (korovod, horovod):
    assert m.__file__.startswith(venv), (m.__name__, m.__file__)  # not the source tree
hvd.init()
total = hvd.allreduce(torch.tensor([float(hvd.rank() + 1)]), op=hvd.Sum).item()
assert total == hvd.size() * (hvd.size() + 1) / 2, total
print("rank %d of %d sum %g" % (hvd.rank(), hvd.size(), total))
"""


def fresh_root():
    """The folder for the venv and the wheel: a new temporary one, or under scripts/test.sh (ccache
    on) the clone's build-pip-venv/, emptied first, so that the TensorFlow headers the op library
    compiles against are at the same place, relative to the clone, in every run and ccache finds
    its objects too."""
    if ccache_on():
        root = os.path.join(REPO, "build-pip-venv")
        shutil.rmtree(root, ignore_errors=True)
        os.makedirs(root)
        return root
    return tempfile.mkdtemp(prefix="korovod-pip-")


@pytest.fixture(scope="module")
def venv():
    root = fresh_root()
    try:
        path = os.path.join(root, "venv")
        subprocess.run([PYTHON, "-m", "venv", "--system-site-packages", path], check=True)
        env = clean_env(path)
        pip = [os.path.join(path, "bin", "python"), "-m", "pip", "--disable-pip-version-check"]
        start = time.monotonic()
        p = subprocess.run(pip + ["install", "--quiet"] + TENSORFLOW, env=env, cwd=root,
                           capture_output=True, text=True, timeout=1800)
        assert p.returncode == 0, p.stdout[-6000:] + p.stderr[-6000:]
        print("pip install %s took %.0f s" % (" ".join(TENSORFLOW), time.monotonic() - start))
        env["CMAKE_BUILD_PARALLEL_LEVEL"] = os.environ.get("JOBS", "2")
        env.update(ccache_env())
        start = time.monotonic()
        p = subprocess.run(pip + ["wheel", "--no-deps", "-w", os.path.join(root, "dist"), REPO],
                           env=env, cwd=root, capture_output=True, text=True, timeout=3000)
        print("pip wheel . took %.0f s" % (time.monotonic() - start))
        assert p.returncode == 0, p.stdout[-6000:] + p.stderr[-6000:]
        wheels = [w for w in os.listdir(os.path.join(root, "dist")) if w.endswith(".whl")]
        assert len(wheels) == 1, wheels
        # --ignore-installed: a korovod installed system-wide (the README's first command) is seen
        # through --system-site-packages, and pip would keep it instead of installing the wheel.
        p = subprocess.run(pip + ["install", "--no-deps", "--ignore-installed",
                                  os.path.join(root, "dist", wheels[0])],
                           env=env, cwd=root, capture_output=True, text=True, timeout=600)
        assert p.returncode == 0, p.stdout[-6000:] + p.stderr[-6000:]
        yield path
    finally:
        shutil.rmtree(root, ignore_errors=True)


def ccache_on():
    """scripts/test.sh compiles through ccache (it sets CCACHE_BASEDIR to the clone)."""
    return bool(os.environ.get("CCACHE_BASEDIR")) and shutil.which("ccache") is not None


def ccache_env():
    """Under ccache, the wheel's build through it too, in a fresh build-pip/ beside the clone's
    build/, so that its objects are the Release build's (the same flags and, relative to the
    build folder, the same paths). Only the compiler is cached; configure, link and packaging run
    as for a user."""
    if not ccache_on():
        return {}
    build_dir = os.path.join(REPO, "build-pip")
    shutil.rmtree(build_dir, ignore_errors=True)
    return {"SKBUILD_BUILD_DIR": build_dir, "CMAKE_C_COMPILER_LAUNCHER": "ccache",
            "CMAKE_CXX_COMPILER_LAUNCHER": "ccache"}


def clean_env(venv_path):
    """The environment an installed package is used from: the venv's bin first on PATH, nothing
    that points at the source or build tree."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "KOROVOD_BUILD_DIR") and not k.startswith("CMAKE_")}
    env["PATH"] = os.path.join(venv_path, "bin") + os.pathsep + env.get("PATH", "")
    env["VIRTUAL_ENV"] = venv_path
    env["VIRTUAL_ENV_UNDER_TEST"] = venv_path
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def run_installed(venv_path, *argv, timeout=300):
    # cwd outside the repository, so nothing is imported from it by accident
    p = subprocess.run(list(argv), env=clean_env(venv_path), cwd=os.path.dirname(venv_path),
                       capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, "%s: exit %d\n%s\n%s" % (argv, p.returncode, p.stdout, p.stderr)
    return p.stdout


def test_installed_files(venv):
    bin_dir = os.path.join(venv, "bin")
    for name in ("korovodrun", "korovod-sidecar", "horovodrun"):
        assert os.access(os.path.join(bin_dir, name), os.X_OK), name
    assert "usage: korovodrun" in run_installed(venv, "korovodrun", "--help")
    assert "usage: horovodrun" in run_installed(venv, "horovodrun", "--help")


def test_korovodrun_two_ranks(venv):
    out = run_installed(venv, "korovodrun", "-np", "2", os.path.join(venv, "bin", "python"),
                        "-c", CHECK)
    assert "[0] rank 0 of 2 sum 3" in out and "[1] rank 1 of 2 sum 3" in out, out


def test_horovodrun_two_ranks(venv):
    out = run_installed(venv, "horovodrun", "-np", "2", "--fusion-threshold-mb", "16",
                        os.path.join(venv, "bin", "python"), "-c", CHECK)
    assert "[0] rank 0 of 2 sum 3" in out and "[1] rank 1 of 2 sum 3" in out, out


def test_wheel_carries_the_tensorflow_ops(venv):
    site = run_installed(venv, os.path.join(venv, "bin", "python"), "-c",
                         "import korovod, os; print(os.path.dirname(korovod.__file__))").strip()
    ops = os.listdir(os.path.join(site, "tensorflow"))
    assert "_korovod_tf_ops.so" in ops, ops


def test_horovod_tensorflow2_example_two_ranks(venv):
    """Horovod's TF2 synthetic benchmark (examples/) on the installed package: the op library
    loads from the wheel and trains on 2 ranks."""
    out = run_installed(venv, "korovodrun", "-np", "2", os.path.join(venv, "bin", "python"),
                        os.path.join(REPO, "examples", "tensorflow2_synthetic_benchmark.py"),
                        "--model", "MobileNetV2", "--image-size", "32", "--batch-size", "4",
                        "--num-batches-per-iter", "2", "--num-iters", "2", timeout=600)
    assert "[0] Number of CPUs: 2" in out, out
    assert len(re.findall(r"^\[0\] Iter #\d: [0-9.]+ img/sec per CPU$", out, re.M)) == 2, out
