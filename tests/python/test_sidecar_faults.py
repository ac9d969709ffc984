"""Issue 30's four cases against real korovod-sidecar processes and real horovod.torch trainers,
started as a pod would start them (no korovodrun to clean up after anyone):

1. a process without the job key claims rank 1 before rank 1 arrives: the world still forms
   with the real rank 1 and trains; rank 0 logs the refused connection with its source;
2. a sidecar without a job key refuses to start, naming both settings; the key given in the
   environment is not readable in /proc/<pid>/environ; KOROVOD_INSECURE_NO_KEY=1 is said loudly;
3. a trainer whose own sidecar is SIGKILLed while it waits in an allreduce raises
   HorovodInternalError naming the sidecar within a second or so (measured and printed);
4. a sidecar SIGKILLed and started again with the same settings serves again (its stale arena
   is reclaimed), and its old trainer's next op fails at once naming the restart."""
import os
import re
import secrets
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
BUILD = os.environ.get("KOROVOD_BUILD_DIR", os.path.join(REPO, "build"))
PYTHON = os.environ.get("PYTHON", sys.executable)
SIDECAR = os.path.join(BUILD, "bin", "korovod-sidecar")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Job:
    """Two ranks, one sidecar each, on loopback; logs in a temporary folder."""

    def __init__(self, d, size=2, **extra):
        self.d = d
        self.size = size
        self.ports = [free_port() for _ in range(size)]
        self.key_file = os.path.join(d, "job.key")
        with open(self.key_file, "w") as f:
            f.write(secrets.token_hex(32))
        os.chmod(self.key_file, 0o600)
        self.prefix = "/kvfault-%d-" % os.getpid()
        self.extra = extra
        self.sidecars = {}
        self.logs = {}

    def socket(self, rank):
        return os.path.join(self.d, "sidecar-%d.sock" % rank)

    def sidecar_env(self, rank, **override):
        env = dict(os.environ)
        env.update(KOROVOD_RANK=str(rank), KOROVOD_SIZE=str(self.size),
                   KOROVOD_PEERS=",".join("127.0.0.1:%d" % p for p in self.ports),
                   KOROVOD_SOCKET=self.socket(rank), KOROVOD_SHM_PREFIX=self.prefix,
                   KOROVOD_JOB_KEY_FILE=self.key_file, KOROVOD_START_TIMEOUT_SECONDS="20",
                   KOROVOD_ARENA_HEAP_MIB="8")
        env.update({k: str(v) for k, v in self.extra.items()})
        for k, v in override.items():
            if v is None:
                env.pop(k, None)
            else:
                env[k] = str(v)
        return env

    def start_sidecar(self, rank, **override):
        log = open(os.path.join(self.d, "sidecar-%d-%d.log" % (rank, time.monotonic_ns())), "w+")
        self.logs[rank] = log
        p = subprocess.Popen([SIDECAR], env=self.sidecar_env(rank, **override), stdout=log,
                             stderr=subprocess.STDOUT)
        self.sidecars[rank] = p
        return p

    def log(self, rank):
        self.logs[rank].flush()
        with open(self.logs[rank].name) as f:
            return f.read()

    def wait_socket(self, rank, timeout=30):
        deadline = time.monotonic() + timeout
        while not os.path.exists(self.socket(rank)):
            assert self.sidecars[rank].poll() is None, self.log(rank)
            assert time.monotonic() < deadline, "no socket: " + self.log(rank)
            time.sleep(0.05)

    def trainer(self, rank, script, *args):
        env = dict(os.environ, KOROVOD_SOCKET=self.socket(rank), PYTHONPATH=os.pathsep.join(
            [os.path.join(REPO, "python"), os.path.join(BUILD, "python")]))
        path = os.path.join(self.d, "train.py")
        with open(path, "w") as f:
            f.write(script)
        return subprocess.Popen([PYTHON, path] + [str(a) for a in args], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def close(self):
        for p in self.sidecars.values():
            if p.poll() is None:
                p.kill()
                p.wait()
        for r in range(self.size):
            subprocess.run(["rm", "-f", "/dev/shm" + self.prefix + "rank%d" % r])


@pytest.fixture
def job():
    jobs = []

    def make(size=2, **extra):
        d = tempfile.mkdtemp()
        jobs.append(Job(d, size=size, **extra))
        return jobs[-1]
    yield make
    for j in jobs:
        j.close()


TRAIN = r"""
import os, sys, time, torch, horovod.torch as hvd
hvd.init()
for step in range(int(sys.argv[1])):
    x = hvd.allreduce(torch.full((1000,), float(hvd.rank() + 1)), op=hvd.Sum)
    assert torch.equal(x, torch.full((1000,), 3.0)), x
print("rank", hvd.rank(), "trained", flush=True)
if len(sys.argv) < 3:
    sys.exit(0)
if hvd.rank() == 1:
    time.sleep(float(sys.argv[2]))   # stops submitting: rank 0 waits in its next allreduce
    sys.exit(0)
try:
    print("waiting in allreduce", flush=True)
    hvd.allreduce(torch.ones(10), name="never.answered")
except hvd.HorovodInternalError as e:
    print("HorovodInternalError at %.3f: %s" % (time.time(), e), flush=True)
    if len(sys.argv) > 3:  # the next op once the test says so (after the sidecar's restart)
        deadline = time.time() + 30
        while not os.path.exists(sys.argv[3]) and time.time() < deadline:
            time.sleep(0.05)
    try:
        hvd.allreduce(torch.ones(10), name="after.the.failure")
    except hvd.HorovodInternalError as e2:
        print("next op: HorovodInternalError: %s" % e2, flush=True)
    sys.exit(3)
"""


def test_an_impostor_without_the_key_does_not_stop_a_forming_world(job):
    j = job()
    j.start_sidecar(0)
    # The attacker: a Hello claiming rank 1 of 2, epoch 0, then 32 zero bytes of proof.
    deadline = time.monotonic() + 10
    while True:
        try:
            s = socket.create_connection(("127.0.0.1", j.ports[0]), timeout=5)
            break
        except OSError:
            assert time.monotonic() < deadline
            time.sleep(0.05)
    hello = struct.pack("<4sIiiiiII32s", b"KVRD", 4, 1, 0, 0, 2, 0, 0, os.urandom(32))
    s.sendall(hello)
    challenge = b""
    while len(challenge) < 68:
        chunk = s.recv(68 - len(challenge))
        assert chunk, "rank 0 closed before answering"
        challenge += chunk
    s.sendall(bytes(32))
    verdict = s.recv(1)
    s.close()
    assert verdict == b"\x00", verdict
    time.sleep(0.3)
    assert j.sidecars[0].poll() is None, j.log(0)  # rank 0 did not give up
    j.start_sidecar(1)
    j.wait_socket(0)
    j.wait_socket(1)
    t = [j.trainer(r, TRAIN, 20) for r in (0, 1)]
    outs = [p.communicate(timeout=120)[0] for p in t]
    assert "rank 0 trained" in outs[0] and "rank 1 trained" in outs[1], outs
    log = j.log(0)
    assert re.search(r"WARNING \[rank 0\] transport: rank 0 \(.*\): refused a connection from "
                     r"127\.0\.0\.1:\d+: claimed rank 1 of a world of 2 \(epoch 0\): presented a "
                     r"wrong job key", log), log


def test_no_key_refuses_to_start_and_the_key_stays_out_of_proc_environ(job):
    j = job(size=1)  # a world of one forms at once, so its socket appears
    p = j.start_sidecar(0, KOROVOD_JOB_KEY_FILE=None)
    assert p.wait(timeout=30) != 0
    log = j.log(0)
    assert "no job key: set KOROVOD_JOB_KEY_FILE" in log and "or KOROVOD_JOB_KEY;" in log, log

    key = secrets.token_hex(32)
    p = j.start_sidecar(0, KOROVOD_JOB_KEY_FILE=None, KOROVOD_JOB_KEY=key)
    j.wait_socket(0)
    with open("/proc/%d/environ" % p.pid, "rb") as f:
        environ = f.read()
    assert key.encode() not in environ
    assert b"KOROVOD_SHM_PREFIX" in environ  # the rest of the environment is still there
    p.kill()
    p.wait()
    os.unlink(j.socket(0))

    p = j.start_sidecar(0, KOROVOD_JOB_KEY_FILE=None, KOROVOD_INSECURE_NO_KEY=1)
    j.wait_socket(0)
    p.kill()
    p.wait()
    assert "KOROVOD_INSECURE_NO_KEY=1: NO JOB KEY" in j.log(0), j.log(0)


def wait_until_waiting_in_allreduce(trainer):
    """Reads the trainer's output until it waits in the allreduce its peer never joins."""
    deadline = time.monotonic() + 60
    line = ""
    while "waiting in allreduce" not in line:
        line = trainer.stdout.readline()
        assert line or trainer.poll() is None, "the trainer ended early"
        assert time.monotonic() < deadline


def test_a_trainer_sees_its_sidecar_killed(job):
    j = job()
    j.start_sidecar(0)
    j.start_sidecar(1)
    j.wait_socket(0)
    j.wait_socket(1)
    t0 = j.trainer(0, TRAIN, 5, 60)
    t1 = j.trainer(1, TRAIN, 5, 60)
    wait_until_waiting_in_allreduce(t0)
    time.sleep(0.5)
    killed_at = time.time()
    j.sidecars[0].send_signal(signal.SIGKILL)
    out, _ = t0.communicate(timeout=30)
    t1.kill()
    m = re.search(r"HorovodInternalError at ([\d.]+): (.*)", out)
    assert m, out
    print("sidecar SIGKILL -> HorovodInternalError in the trainer: %.3f s" %
          (float(m.group(1)) - killed_at))
    assert "died without shutting down" in m.group(2), out
    assert "next op: HorovodInternalError" in out, out
    assert t0.returncode == 3


def test_a_restarted_sidecar_serves_again(job):
    j = job()
    j.start_sidecar(0)
    j.start_sidecar(1)
    j.wait_socket(0)
    j.wait_socket(1)
    go_on = os.path.join(j.d, "restarted")
    t0 = j.trainer(0, TRAIN, 5, 60, go_on)
    t1 = j.trainer(1, TRAIN, 5, 60)
    wait_until_waiting_in_allreduce(t0)
    j.sidecars[0].send_signal(signal.SIGKILL)
    j.sidecars[0].wait()
    os.unlink(j.socket(0))  # as the kubelet finds it: the socket file may stay too; either works
    old_log = j.log(0)
    restarted = j.start_sidecar(0)
    # Past the arena (it exited with "already exists" before), it waits for the world to form
    # again: in a static job the operator restarts the other ranks' pods too.
    deadline = time.monotonic() + 30
    while "was left by a sidecar that is gone (restarted?)" not in j.log(0):
        assert restarted.poll() is None and time.monotonic() < deadline, j.log(0)
        time.sleep(0.05)
    time.sleep(1)
    assert restarted.poll() is None, j.log(0)
    open(go_on, "w").close()
    out, _ = t0.communicate(timeout=30)
    t1.kill()
    assert "HorovodInternalError" in out and "died without shutting down" in out, out
    # The old session's next op names the restart: the operator (or the script) starts anew.
    assert re.search(r"next op: HorovodInternalError: .*a new sidecar has since started in its "
                     r"place \(restarted\)", out), out
    assert "already exists" not in j.log(0) + old_log
