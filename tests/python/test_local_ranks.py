"""korovod-local-ranks, the entry point that runs a worker pod's trainer command once per local
rank (spec.worker.ranksPerWorker): each rank's environment, output prefixes, a failing rank
stopping the others with its status, bad settings; and a whole pod emulated on this machine: one
korovod-sidecar serving 2 ranks (KOROVOD_SIDECAR_RANKS), an unmodified Horovod script run by
korovod-local-ranks exactly as the operator wraps it."""
import os
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
BUILD = os.environ.get("KOROVOD_BUILD_DIR", os.path.join(REPO, "build"))
PYTHON = os.environ.get("PYTHON", sys.executable)
ENTRY = os.path.join(REPO, "python", "bin", "korovod-local-ranks")


def env_for(**pod):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(REPO, "python"),
                                         os.path.join(BUILD, "python")])
    env.update({k: str(v) for k, v in pod.items()})
    return env


POD = dict(KOROVOD_RANK=4, KOROVOD_SIZE=8, KOROVOD_LOCAL_SIZE=2, KOROVOD_CROSS_RANK=2,
           KOROVOD_CROSS_SIZE=4, KOROVOD_SOCKET="/run/k/sidecar-{local_rank}.sock")


def local_ranks(*command, timeout=60, **pod):
    return subprocess.run([PYTHON, ENTRY, "--"] + list(command), env=env_for(**pod),
                          capture_output=True, text=True, timeout=timeout)


def test_each_local_rank_gets_its_rank_local_rank_and_socket():
    show = ("import os; print(' '.join('%s=%s' % (k, os.environ[k]) for k in ['KOROVOD_RANK', "
            "'HOROVOD_RANK', 'KOROVOD_LOCAL_RANK', 'HOROVOD_LOCAL_SIZE', 'KOROVOD_CROSS_RANK', "
            "'HOROVOD_CROSS_SIZE', 'KOROVOD_SIZE', 'KOROVOD_SOCKET']))")
    p = local_ranks(PYTHON, "-c", show, **POD)
    assert p.returncode == 0, p.stderr
    lines = sorted(p.stdout.splitlines())
    assert lines == [
        "[4] KOROVOD_RANK=4 HOROVOD_RANK=4 KOROVOD_LOCAL_RANK=0 HOROVOD_LOCAL_SIZE=2 "
        "KOROVOD_CROSS_RANK=2 HOROVOD_CROSS_SIZE=4 KOROVOD_SIZE=8 "
        "KOROVOD_SOCKET=/run/k/sidecar-0.sock",
        "[5] KOROVOD_RANK=5 HOROVOD_RANK=5 KOROVOD_LOCAL_RANK=1 HOROVOD_LOCAL_SIZE=2 "
        "KOROVOD_CROSS_RANK=2 HOROVOD_CROSS_SIZE=4 KOROVOD_SIZE=8 "
        "KOROVOD_SOCKET=/run/k/sidecar-1.sock"], p.stdout


def test_each_local_rank_gets_torchruns_variables():
    """init_process_group's env:// finds the job: RANK/LOCAL_RANK per local rank, the world, the
    pod's index, and rank 0's pod (the coordinator's host) as MASTER_ADDR; what the pod sets
    itself is kept."""
    show = ("import os; print(' '.join('%s=%s' % (k, os.environ[k]) for k in ['RANK', "
            "'WORLD_SIZE', 'LOCAL_RANK', 'LOCAL_WORLD_SIZE', 'GROUP_RANK', 'MASTER_ADDR', "
            "'MASTER_PORT']))")
    p = local_ranks(PYTHON, "-c", show, KOROVOD_COORDINATOR="job-0.job.ns.svc:28500", **POD)
    assert p.returncode == 0, p.stderr
    assert sorted(p.stdout.splitlines()) == [
        "[4] RANK=4 WORLD_SIZE=8 LOCAL_RANK=0 LOCAL_WORLD_SIZE=2 GROUP_RANK=2 "
        "MASTER_ADDR=job-0.job.ns.svc MASTER_PORT=29500",
        "[5] RANK=5 WORLD_SIZE=8 LOCAL_RANK=1 LOCAL_WORLD_SIZE=2 GROUP_RANK=2 "
        "MASTER_ADDR=job-0.job.ns.svc MASTER_PORT=29500"], p.stdout
    p = local_ranks(PYTHON, "-c", show, MASTER_ADDR="10.0.0.9", MASTER_PORT="1234", RANK="0",
                    **POD)
    assert p.returncode == 0, p.stderr
    assert sorted(p.stdout.splitlines()) == [
        "[4] RANK=4 WORLD_SIZE=8 LOCAL_RANK=0 LOCAL_WORLD_SIZE=2 GROUP_RANK=2 "
        "MASTER_ADDR=10.0.0.9 MASTER_PORT=1234",
        "[5] RANK=5 WORLD_SIZE=8 LOCAL_RANK=1 LOCAL_WORLD_SIZE=2 GROUP_RANK=2 "
        "MASTER_ADDR=10.0.0.9 MASTER_PORT=1234"], p.stdout


def test_a_failing_local_rank_stops_the_others_and_names_itself():
    script = ("import os, sys, time\n"
              "if os.environ['KOROVOD_LOCAL_RANK'] == '1': sys.exit(3)\n"
              "time.sleep(120)\n")
    start = time.monotonic()
    p = local_ranks(PYTHON, "-c", script, **POD)
    assert p.returncode == 3, (p.returncode, p.stderr)
    assert time.monotonic() - start < 60  # the sleeping rank was stopped, not waited for
    assert "local rank 1 (rank 5) exited with code 3; stopping the other local ranks" in p.stderr


def test_bad_settings_are_named():
    p = local_ranks(PYTHON, "-c", "pass", **dict(POD, KOROVOD_SOCKET="/run/k/sidecar.sock"))
    assert p.returncode == 2 and 'must contain "{local_rank}"' in p.stderr, p.stderr
    pod = dict(POD)
    del pod["KOROVOD_LOCAL_SIZE"]
    env = env_for(**pod)
    env.pop("KOROVOD_LOCAL_SIZE", None)
    p = subprocess.run([PYTHON, ENTRY, PYTHON, "-c", "pass"], env=env, capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 2 and "KOROVOD_LOCAL_SIZE is not set" in p.stderr, p.stderr
    p = local_ranks(PYTHON, "-c", "pass", **dict(POD, KOROVOD_RANK=7))
    assert p.returncode == 2 and "go past KOROVOD_SIZE=8" in p.stderr, p.stderr


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


HOROVOD_SCRIPT = """
import torch, horovod.torch as hvd
hvd.init()
assert hvd.size() == 2 and hvd.local_size() == 2 and hvd.cross_size() == 1
assert hvd.local_rank() == hvd.rank(), (hvd.local_rank(), hvd.rank())
x = torch.full((100000,), float(hvd.rank() + 1))
assert torch.equal(hvd.allreduce(x, op=hvd.Sum), torch.full((100000,), 3.0))
w = hvd.broadcast(torch.arange(10.0) * (hvd.rank() + 1), root_rank=1)
assert torch.equal(w, torch.arange(10.0) * 2)
print("rank", hvd.rank(), "pod OK")
hvd.shutdown()
"""


def test_a_pod_of_two_ranks_runs_an_unmodified_horovod_script():
    with tempfile.TemporaryDirectory() as d:
        os.chmod(d, 0o755)
        pod = dict(KOROVOD_RANK=0, KOROVOD_SIZE=2, KOROVOD_LOCAL_SIZE=2, KOROVOD_CROSS_RANK=0,
                   KOROVOD_CROSS_SIZE=1, KOROVOD_SOCKET=os.path.join(d, "sidecar-{local_rank}.sock"))
        sidecar_env = env_for(**pod, KOROVOD_SIDECAR_RANKS=2,
                              KOROVOD_PEERS="127.0.0.1:%d,127.0.0.1:%d" % (free_port(), free_port()),
                              KOROVOD_SHM_PREFIX="/kvlocalranks-%d-" % os.getpid(),
                              KOROVOD_JOB_KEY="k" * 64, KOROVOD_START_TIMEOUT_SECONDS=30,
                              KOROVOD_ARENA_HEAP_MIB=8)
        sidecar = subprocess.Popen([os.path.join(BUILD, "bin", "korovod-sidecar")], env=sidecar_env,
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            deadline = time.monotonic() + 30
            while not all(os.path.exists(os.path.join(d, "sidecar-%d.sock" % i)) for i in (0, 1)):
                assert sidecar.poll() is None, sidecar.stdout.read()
                assert time.monotonic() < deadline, "the sidecar's sockets did not appear"
                time.sleep(0.05)
            script = os.path.join(d, "train.py")
            with open(script, "w") as f:
                f.write(HOROVOD_SCRIPT)
            p = local_ranks(PYTHON, script, timeout=120, **pod)
            assert p.returncode == 0, p.stdout + p.stderr
            assert "[0] rank 0 pod OK" in p.stdout and "[1] rank 1 pod OK" in p.stdout, p.stdout
            # The trainer container is done; the kubelet then stops the native sidecar.
            sidecar.terminate()
            assert sidecar.wait(timeout=30) == 0
            log = sidecar.stdout.read()
            assert "[ranks 0-1]" in log, log
        finally:
            if sidecar.poll() is None:
                sidecar.kill()
                sidecar.wait()
