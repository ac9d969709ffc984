"""PyTorch's DDP and FSDP2 tutorial programs (examples/torch_distributed) on backend korovod, as a
user runs them: under `korovodrun -np N` and under torchrun (`python -m torch.distributed.run`).
What a user sees is asserted: training completes, the loss goes down, every rank ends with the
same parameters, DDP's parameters are those of the same run on gloo, and FSDP2's loss curve is one
process's.

Environment: KOROVOD_BUILD_DIR (default <repo>/build: bin/korovodrun, bin/korovod-sidecar,
python/korovod/_client*.so); PYTHON (default the running interpreter: a torch to test).
"""
import os
import re
import socket
import subprocess
import sys

import pytest
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
BUILD = os.environ.get("KOROVOD_BUILD_DIR", os.path.join(REPO, "build"))
KOROVODRUN = os.path.join(BUILD, "bin", "korovodrun")
PYTHON = os.environ.get("PYTHON", sys.executable)
EXAMPLES = os.path.join(REPO, "examples", "torch_distributed")
DDP = os.path.join(EXAMPLES, "ddp_tutorial.py")
FSDP = os.path.join(EXAMPLES, "fsdp2_tutorial.py")
TIMEOUT = 420
LOSS = re.compile(r"step (\d+) loss (-?[0-9.]+)")


def _env(**extra):
    env = dict(os.environ)
    paths = [os.path.join(REPO, "python"), os.path.join(BUILD, "python")]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env["OMP_NUM_THREADS"] = "1"
    env.update(extra)
    return env


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(cmd, cwd, **env):
    p = subprocess.run(cmd, env=_env(**env), cwd=cwd, capture_output=True, text=True,
                       timeout=TIMEOUT)
    out = p.stdout + p.stderr
    assert p.returncode == 0, "%s: exit %d\n%s" % (" ".join(cmd), p.returncode, out[-6000:])
    return out


def korovodrun(np_, script, *args, cwd, **env):
    return _run([KOROVODRUN, "-np", str(np_), PYTHON, script] + list(args), cwd, **env)


def torchrun(np_, script, *args, cwd, **env):
    return _run([PYTHON, "-m", "torch.distributed.run", "--nproc_per_node", str(np_),
                 "--master_port", str(_free_port()), script] + list(args), cwd, **env)


def losses(out):
    """rank 0's "step i loss L" lines, in step order (korovodrun prefixes them with [0])."""
    found = {int(m.group(1)): float(m.group(2)) for m in LOSS.finditer(out)}
    assert found and sorted(found) == list(range(len(found))), out[-3000:]
    return [found[i] for i in range(len(found))]


def assert_ddp_run(out, np_, steps=20):
    curve = losses(out)
    assert len(curve) == steps, out[-3000:]
    assert curve[-1] < curve[0], "loss did not decrease: %s" % curve
    for r in range(np_):
        assert "rank %d: ranks agree True" % r in out, out[-3000:]


def assert_same_params(got_file, want_file):
    got, want = torch.load(got_file), torch.load(want_file)
    assert sorted(got) == sorted(want)
    for name in want:
        assert torch.equal(got[name], want[name]), "%s: %s differs from %s: max |diff| %g" % (
            name, got_file, want_file, float((got[name] - want[name]).abs().max()))


@pytest.fixture(scope="module")
def gloo_params(tmp_path_factory):
    """The tutorial on gloo (torchrun), the reference DDP parameters per world size."""
    tmp = tmp_path_factory.mktemp("gloo")
    cache = {}

    def get(np_):
        if np_ not in cache:
            path = str(tmp / ("gloo-%d.pt" % np_))
            assert_ddp_run(torchrun(np_, DDP, "--backend", "gloo", "--save-params", path,
                                    cwd=str(tmp)), np_)
            cache[np_] = path
        return cache[np_]
    return get


@pytest.mark.parametrize("np_", [2, 4])
def test_ddp_tutorial_under_korovodrun(np_, tmp_path, gloo_params):
    path = str(tmp_path / "korovod.pt")
    out = korovodrun(np_, DDP, "--save-params", path, cwd=str(tmp_path))
    assert_ddp_run(out, np_)
    assert_same_params(path, gloo_params(np_))


def test_ddp_tutorial_under_torchrun(tmp_path, gloo_params):
    """torchrun alone: the backend starts each rank's sidecar itself."""
    path = str(tmp_path / "korovod.pt")
    out = torchrun(2, DDP, "--save-params", path, cwd=str(tmp_path))
    assert_ddp_run(out, 2)
    assert_same_params(path, gloo_params(2))


FSDP2 = tuple(int(v) for v in torch.__version__.split(".")[:2]) >= (2, 6)


@pytest.fixture(scope="module")
def fsdp_reference(tmp_path_factory):
    """The FSDP2 tutorial's first run saves the initial state; one process replays it."""
    tmp = tmp_path_factory.mktemp("fsdp")
    init = str(tmp / "init.pt")
    out = korovodrun(2, FSDP, "--save-init", init, cwd=str(tmp))
    reference = losses(_run([PYTHON, FSDP, "--reference", init], str(tmp)))
    return out, reference, init


def assert_curve(got, want):
    assert len(got) == len(want) == 10, (got, want)
    assert got[-1] < got[0], "loss did not decrease: %s" % got
    for step, (g, w) in enumerate(zip(got, want)):
        assert abs(g - w) <= 1e-5 * max(1.0, abs(w)), (
            "step %d: FSDP2 on korovod %r, one process %r\nFSDP2: %s\none process: %s" % (
                step, g, w, got, want))


@pytest.mark.skipif(not FSDP2, reason="fully_shard (FSDP2) needs torch >= 2.6, this is %s" %
                    torch.__version__)
def test_fsdp2_tutorial_under_korovodrun(fsdp_reference):
    out, reference, _ = fsdp_reference
    assert "trained 65984 parameters on 2 ranks" in out, out[-3000:]
    assert_curve(losses(out), reference)


@pytest.mark.skipif(not FSDP2, reason="fully_shard (FSDP2) needs torch >= 2.6, this is %s" %
                    torch.__version__)
def test_fsdp2_tutorial_under_torchrun(tmp_path, fsdp_reference):
    _, reference, init = fsdp_reference
    mine = str(tmp_path / "init.pt")
    out = torchrun(2, FSDP, "--save-init", mine, cwd=str(tmp_path))
    assert_same_params(mine, init)  # the same initialisation as the replayed run's
    assert_curve(losses(out), reference)
