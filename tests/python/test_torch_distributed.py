"""The `korovod` torch.distributed backend end to end (torch_distributed_worker.py under
korovodrun, whose torchrun variables give init_process_group its world): every collective
against exact values and against gloo's results, DDP against gloo, the errors, and the
`torch.backends` entry point. Runs under whichever torch PYTHON has (1.13 and the newest).

Environment: as test_korovod_torch.py (KOROVOD_BUILD_DIR, PYTHON).
"""
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
BUILD = os.environ.get("KOROVOD_BUILD_DIR", os.path.join(REPO, "build"))
KOROVODRUN = os.path.join(BUILD, "bin", "korovodrun")
PYTHON = os.environ.get("PYTHON", sys.executable)
WORKER = os.path.join(HERE, "torch_distributed_worker.py")


def _env(extra=None):
    env = dict(os.environ)
    paths = [os.path.join(REPO, "python"), os.path.join(BUILD, "python")]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env.setdefault("OMP_NUM_THREADS", "1")
    env.update(extra or {})
    return env


def run(np_, *args, ok=True, flags=(), env=None, timeout=300):
    cmd = [KOROVODRUN] + list(flags) + ["-np", str(np_), PYTHON, WORKER] + [str(a) for a in args]
    p = subprocess.run(cmd, env=_env(env), capture_output=True, text=True, timeout=timeout)
    if ok:
        assert p.returncode == 0, "exit %d\nstdout:\n%s\nstderr:\n%s" % (
            p.returncode, p.stdout[-4000:], p.stderr[-4000:])
    return p


def torch_major():
    out = subprocess.run([PYTHON, "-c", "import torch; print(torch.__version__)"],
                         capture_output=True, text=True, check=True).stdout
    return int(out.split(".")[0])


def load(path):
    import torch
    return torch.load(path)


def assert_same(korovod, gloo, what, exact=True):
    """Every result gloo has, korovod has: bit for bit, or (exact=False: float sums of more than
    two ranks, which korovod and gloo add in different orders) to float32's rounding."""
    import torch
    assert gloo, what
    for key, value in gloo.items():
        assert key in korovod, "%s: korovod did not record %s" % (what, key)
        same = torch.equal(korovod[key], value) if exact else torch.allclose(
            korovod[key], value, rtol=1e-5, atol=1e-6)
        assert same, "%s %s: korovod %s, gloo %s" % (what, key, korovod[key], value)


@pytest.mark.parametrize("np_", [2, 4])
def test_collectives_equal_gloo(np_, tmp_path):
    """Every collective, several dtypes, in the world and in a group of the odd (even) ranks,
    checked against exact values in the worker; then what korovod got equals gloo's."""
    for backend in ("korovod", "gloo"):
        out = run(np_, "collectives", backend, tmp_path / backend).stdout
        for r in range(np_):
            assert "[%d] rank %d collectives OK on %s" % (r, r, backend) in out, out
    for r in range(np_):
        assert_same(load(tmp_path / ("korovod.%d" % r)), load(tmp_path / ("gloo.%d" % r)),
                    "rank %d" % r)


@pytest.mark.parametrize("np_,hook", [(2, "none"), (4, "none"), (2, "allreduce"), (2, "fp16")])
def test_ddp_equals_gloo(np_, hook, tmp_path):
    """DDP (several buckets, momentum SGD, 4 steps, each rank its own data): the parameters on
    korovod equal gloo's, without a comm hook and with torch's allreduce and fp16 hooks
    (futures); bit for bit at 2 ranks, to rounding at 4 (the sums' order differs)."""
    for backend in ("korovod", "gloo"):
        out = run(np_, "ddp", backend, tmp_path / backend, hook).stdout
        assert "[0] rank 0 ddp OK on %s" % backend in out, out
    for r in range(np_):
        assert_same(load(tmp_path / ("korovod.%d" % r)), load(tmp_path / ("gloo.%d" % r)),
                    "rank %d" % r, exact=np_ == 2)


def test_refusals_name_the_op_and_rank():
    """send/recv (the engine has no point-to-point), BAND, FP8 reductions: torch's backend error
    naming rank, op and why; the group works on after them."""
    out = run(2, "errors", "korovod").stdout
    assert "[0] rank 0 errors OK" in out and "[1] rank 1 errors OK" in out, out


def test_a_wait_past_the_group_timeout_raises_dist_error():
    out = run(2, "timeout", "korovod").stdout
    assert "[0] rank 0 timed out: korovod: rank 0: allreduce of 'ptd.0.2' (float32[3])" in out, out


def test_a_dead_peer_reaches_wait_as_a_backend_error_naming_it():
    """Rank 1's sidecar is SIGKILLed: rank 0's pending allreduce fails with the engine's text
    naming rank 1, as torch's DistBackendError (RuntimeError on 1.13), within the op timeout."""
    p = run(2, "peer_dies", "korovod", ok=False, flags=["--grace-period", "120"],
            env={"KOROVOD_OP_TIMEOUT_SECONDS": "20"}, timeout=200)
    assert "[0] rank 0 saw the peer die: korovod: rank 0: allreduce of 'ptd.0.2'" in p.stdout, \
        p.stdout + p.stderr
    assert "rank 1 (127.0.0.1:" in p.stdout and "died" in p.stdout, p.stdout


def _entry_point_dir(tmp_path):
    """korovod's `torch.backends` entry point as an installed distribution declares it (the
    pyproject.toml line), without installing anything: a dist-info on PYTHONPATH."""
    info = tmp_path / "ep" / "korovod_entry-0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: korovod-entry\nVersion: 0\n")
    (info / "entry_points.txt").write_text(
        "[torch.backends]\nkorovod = korovod._ptd_entry:autoload\n")
    return str(tmp_path / "ep")


def test_entry_point_registers_the_name_on_import_torch(tmp_path):
    """torch >= 2.5 autoloads it: `import torch` alone knows "korovod", without importing the
    client or connecting anywhere (no sidecar here)."""
    if torch_major() < 2:
        pytest.skip("torch 1.13 has no backend autoload (torch.backends entry points: >= 2.5)")
    env = _env({"PYTHONPATH": _entry_point_dir(tmp_path) + os.pathsep + _env()["PYTHONPATH"]})
    env.pop("KOROVOD_SOCKET", None)
    p = subprocess.run([PYTHON, "-c", "import sys, torch.distributed as d; print("
                        "'korovod' in d.Backend.backend_list, 'korovod._client' in sys.modules)"],
                       env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and p.stdout.split() == ["True", "False"], p.stdout + p.stderr


def test_unmodified_ddp_script_under_korovodrun(tmp_path):
    """A DDP script that only says init_process_group("korovod") (no korovod import: the entry
    point) trains under korovodrun to gloo's parameters."""
    if torch_major() < 2:
        pytest.skip("torch 1.13 has no backend autoload: its scripts import "
                    "korovod.torch.distributed (test_ddp_equals_gloo)")
    ep = _entry_point_dir(tmp_path)
    out = run(2, "ddp_unmodified", "korovod", tmp_path / "korovod", "none",
              env={"PYTHONPATH": ep + os.pathsep + _env()["PYTHONPATH"]}).stdout
    assert "[0] rank 0 ddp OK on korovod" in out, out
    run(2, "ddp", "gloo", tmp_path / "gloo", "none")
    for r in range(2):
        assert_same(load(tmp_path / ("korovod.%d" % r)), load(tmp_path / ("gloo.%d" % r)),
                    "rank %d" % r)


def _torchrun(np_, args, env):
    """torchrun (torch.distributed.run) where it works; Debian's torch 1.13 torchrun fails on
    Python 3.11 before starting anything (elastic's Std.from_str), so there the ranks are
    started with the variables torchrun would give them."""
    if torch_major() >= 2:
        return [subprocess.Popen([PYTHON, "-m", "torch.distributed.run", "--nproc-per-node",
                                  str(np_), WORKER] + args, env=env, stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, text=True)]
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for r in range(np_):
        e = dict(env, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(np_),
                 LOCAL_WORLD_SIZE=str(np_), GROUP_RANK="0", MASTER_ADDR="127.0.0.1",
                 MASTER_PORT=str(port))
        procs.append(subprocess.Popen([PYTHON, WORKER] + args, env=e, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    return procs


def test_torchrun_starts_a_sidecar_per_rank(tmp_path):
    """Under torchrun (no korovodrun, no KOROVOD_SOCKET) each rank starts its korovod-sidecar,
    the ranks meet through torch's store, and DDP trains to gloo's parameters."""
    env = _env()
    for name in [k for k in env if k.startswith(("KOROVOD_", "HOROVOD_"))]:
        del env[name]
    procs = _torchrun(2, ["ddp", "korovod", str(tmp_path / "korovod"), "none"], env)
    outs = [p.communicate(timeout=300)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), "\n".join(outs)
    assert "rank 0 ddp OK on korovod" in "".join(outs), outs
    run(2, "ddp", "gloo", tmp_path / "gloo", "none")
    for r in range(2):
        assert_same(load(tmp_path / ("korovod.%d" % r)), load(tmp_path / ("gloo.%d" % r)),
                    "rank %d" % r)


def test_torchrun_without_a_sidecar_binary_says_where():
    env = _env({"KOROVOD_SIDECAR": "/nonexistent/korovod-sidecar"})
    for name in [k for k in env if k.startswith(("KOROVOD_SOCKET", "KOROVOD_RANK"))]:
        del env[name]
    procs = _torchrun(1, ["ddp", "korovod", "/nonexistent/out", "none"], env)
    out = procs[0].communicate(timeout=120)[0]
    assert procs[0].returncode != 0
    assert "KOROVOD_SIDECAR=/nonexistent/korovod-sidecar is not an executable file" in out, out


def test_fsdp2_loss_curve_equals_one_process_and_stages_nothing():
    """fully_shard (FSDP2) at 2 ranks over each layer and the model: the loss of each step's
    global batch equals one process's training on it (to float32 rounding); its all-gather and
    reduce-scatter buffers come from allocate_tensor (arena blocks), so the client staged only
    the test's own 5 loss averages (4 bytes each)."""
    if torch_major() < 2:
        pytest.skip("FSDP2 (torch.distributed.fsdp.fully_shard) needs torch >= 2.6")
    out = run(2, "fsdp2", "korovod").stdout
    import re
    ref = [float(v) for v in re.search(r"reference losses \[([^\]]*)\]", out).group(1).split(",")]
    for r in range(2):
        m = re.search(r"\[%d\] rank %d fsdp2 losses \[([^\]]*)\] staged_in (\d+) arena_tensors "
                      r"(\d+)" % (r, r), out)
        assert m, out
        losses = [float(v) for v in m.group(1).split(",")]
        assert len(losses) == len(ref) == 5
        assert all(abs(a - b) <= 1e-5 * max(1.0, abs(b)) for a, b in zip(losses, ref)), (losses,
                                                                                          ref)
        assert int(m.group(2)) == 20, m.group(0)
        assert int(m.group(3)) > 0, m.group(0)


def test_compiled_function_calls_all_reduce():
    """dist.all_reduce inside a torch.compile'd function gives the sum on every rank."""
    if torch_major() < 2:
        pytest.skip("torch 1.13 has no torch.compile")
    out = run(2, "compile", "korovod").stdout
    assert "[0] rank 0 compiled OK" in out and "[1] rank 1 compiled OK" in out, out
