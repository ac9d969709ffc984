"""Elastic training under korovodrun: hvd.elastic scripts on workers that die and come back.

Each test runs `korovodrun --min-np/--max-np/--host-discovery-script ... python3
elastic_worker.py` (or the elastic synthetic benchmark) with virtual hosts (127.0.0.x), kills
trainers and sidecars mid-step, grows the world back through the discovery script, and checks what
a user sees: the job goes on, the sizes it went through, the recovery time, the final model, and
the error when too few workers are left.

Environment: KOROVOD_BUILD_DIR (default <repo>/build), PYTHON (default the running interpreter).
"""
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
BUILD = os.environ.get("KOROVOD_BUILD_DIR", os.path.join(REPO, "build"))
KOROVODRUN = os.path.join(BUILD, "bin", "korovodrun")
PYTHON = os.environ.get("PYTHON", sys.executable)
WORKER = os.path.join(HERE, "elastic_worker.py")


def _env(extra):
    env = dict(os.environ)
    paths = [os.path.join(REPO, "python"), os.path.join(BUILD, "python")]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env.setdefault("OMP_NUM_THREADS", "1")
    env.update(extra)
    return env


def korovodrun(args, script_args, env, timeout=300):
    cmd = [KOROVODRUN] + args + [PYTHON] + script_args
    return subprocess.run(cmd, env=_env(env), capture_output=True, text=True, timeout=timeout)


def steps(out):
    """[(step, size, epoch, time)] as rank 0 printed them."""
    return [(int(m.group(1)), int(m.group(2)), int(m.group(3)), float(m.group(4)))
            for m in re.finditer(r"\] step (\d+) size (\d+) epoch (\d+) at ([0-9.]+)", out)]


def sizes_in_order(rows):
    out = []
    for _, size, _, _ in rows:
        if not out or out[-1] != size:
            out.append(size)
    return out


def recovery_seconds(out, rows):
    """For each fault: seconds from the kill to the first step of the next epoch."""
    gaps = []
    for m in re.finditer(r"fault: killing the \w+ of worker \S+ at step \d+ at ([0-9.]+)", out):
        t = float(m.group(1))
        after = [r for r in rows if r[3] > t]
        if after:
            gaps.append(after[0][3] - t)
    return gaps


def test_training_survives_a_killed_trainer_and_a_killed_sidecar(tmp_path):
    """4 workers; a trainer is SIGKILLed mid-step, later a sidecar: each time the survivors go on
    at 3 (a new epoch, no restart), the discovery script brings a new host, the world grows back
    to 4, and the final weights equal a single-process run of every step exactly once."""
    hosts = tmp_path / "hosts"
    hosts.write_text("localhost\n127.0.0.2\n127.0.0.3\n127.0.0.4\n")
    p = korovodrun(
        ["--min-np", "2", "--max-np", "4", "--host-discovery-script", "cat %s" % hosts,
         "--elastic-timeout", "60"],
        [WORKER],
        {"ELASTIC_TEST_DIR": str(tmp_path), "ELASTIC_STEPS": "60",
         "ELASTIC_FAULTS": "trainer@127.0.0.4@8,sidecar@127.0.0.3@30",
         "ELASTIC_SPARE_HOSTS": "127.0.0.5,127.0.0.6"})
    out = p.stdout + p.stderr
    assert p.returncode == 0, out[-6000:]
    assert (tmp_path / "result.txt").read_text().startswith("match"), out[-4000:]
    assert "final weights match the single-process reference" in out
    rows = steps(p.stdout)
    assert [r[0] for r in rows] == list(range(60)), rows  # every step once, in order, on rank 0
    assert sizes_in_order(rows) == [4, 3, 4, 3, 4], sizes_in_order(rows)
    epochs = [r[2] for r in rows]
    assert epochs == sorted(epochs) and epochs[-1] >= 5, epochs
    assert re.search(r"worker 127\.0\.0\.4:0\.\d+ trainer was killed by signal 9 \(SIGKILL\): "
                     r"dropped; host 127\.0\.0\.4 blacklisted; 3 workers remain", out), out[-4000:]
    assert re.search(r"worker 127\.0\.0\.3:0\.\d+ sidecar was killed by signal 9 \(SIGKILL\): "
                     r"dropped; host 127\.0\.0\.3 blacklisted", out), out[-4000:]
    gaps = recovery_seconds(out, rows)
    assert len(gaps) == 2, out[-4000:]
    print("recovery (kill -> training again): trainer %.3f s, sidecar %.3f s" % tuple(gaps))


def test_ops_left_unsynchronized_by_a_failure_do_not_block_the_reset(tmp_path):
    """Each step submits its allreduces asynchronously and synchronizes them in order (as
    DistributedOptimizer does): when a trainer dies, the survivors' first synchronize raises and
    the second op of the broken epoch is never synchronized. The reset (shutdown, init) must not
    be refused for it ("arena ... already has a client attached"): the survivors go on at 2.
    Horovod's own pytorch_synthetic_benchmark_elastic.py hit this."""
    hosts = tmp_path / "hosts"
    hosts.write_text("localhost\n127.0.0.2\n127.0.0.3\n")
    p = korovodrun(
        ["--min-np", "2", "--max-np", "3", "--host-discovery-script", "cat %s" % hosts,
         "--elastic-timeout", "60"],
        [WORKER],
        {"ELASTIC_TEST_DIR": str(tmp_path), "ELASTIC_STEPS": "30", "ELASTIC_FULL_SIZE": "3",
         "ELASTIC_ASYNC": "1", "ELASTIC_FAULTS": "trainer@127.0.0.3@6"})
    out = p.stdout + p.stderr
    assert p.returncode == 0, out[-6000:]
    assert "already has a client attached" not in out, out[-4000:]
    assert "final weights match the single-process reference" in out, out[-4000:]
    assert sizes_in_order(steps(p.stdout)) == [3, 2], out[-4000:]


def test_below_min_np_the_survivors_wait_then_fail_naming_the_counts(tmp_path):
    """3 workers, --min-np 3: a trainer dies and no other host is discovered (its own is
    blacklisted): the survivors wait --elastic-timeout for one, then the job fails with how many
    workers there were and how many were needed."""
    hosts = tmp_path / "hosts"
    hosts.write_text("localhost\n127.0.0.2\n127.0.0.3\n")
    p = korovodrun(
        ["-np", "3", "--min-np", "3", "--host-discovery-script", "cat %s" % hosts,
         "--elastic-timeout", "3"],
        [WORKER],
        {"ELASTIC_TEST_DIR": str(tmp_path), "ELASTIC_STEPS": "40",
         "ELASTIC_FAULTS": "trainer@127.0.0.3@5", "ELASTIC_FULL_SIZE": "3"}, timeout=120)
    out = p.stdout + p.stderr
    assert p.returncode != 0, out[-4000:]
    assert "2 workers alive, at least 3 needed" in out, out[-4000:]
    assert "waited 3 s for more" in out, out[-4000:]
    assert not (tmp_path / "result.txt").exists()


def test_a_script_that_fails_everywhere_fails_the_job_at_once(tmp_path):
    """A fixed pool (-H, no cooldown) whose every worker fails: no host can ever take a worker
    again, so the job fails at once naming why, instead of waiting out the elastic timeout (600 s
    here, past this test's deadline)."""
    p = korovodrun(
        ["--min-np", "2", "-H", "localhost:1,127.0.0.2:1"],
        ["-c", "import sys; sys.exit('training script bug')"], {}, timeout=120)
    out = p.stdout + p.stderr
    assert p.returncode != 0, out[-4000:]
    assert "training script bug" in out, out[-4000:]
    assert "no host of -H can take a worker any more" in out, out[-4000:]


def test_a_removed_host_comes_back_after_its_cooldown(tmp_path):
    """--blacklist-cooldown-range: the host of a failed worker is offered again after the
    cooldown, and the world grows back onto it (no spare host is ever added)."""
    hosts = tmp_path / "hosts"
    hosts.write_text("localhost\n127.0.0.2\n127.0.0.3\n")
    p = korovodrun(
        ["--min-np", "2", "--max-np", "3", "--host-discovery-script", "cat %s" % hosts,
         "--blacklist-cooldown-range", "1", "2", "--elastic-timeout", "60"],
        [WORKER],
        {"ELASTIC_TEST_DIR": str(tmp_path), "ELASTIC_STEPS": "60", "ELASTIC_FULL_SIZE": "3",
         "ELASTIC_FAULTS": "trainer@127.0.0.3@6"})
    out = p.stdout + p.stderr
    assert p.returncode == 0, out[-6000:]
    assert "final weights match the single-process reference" in out
    assert "host 127.0.0.3 blacklisted for 1 s" in out, out[-4000:]
    assert sizes_in_order(steps(p.stdout)) == [3, 2, 3], out[-4000:]


def _pids_of_worker(parent, prefix, comm_prefix):
    """Children of `parent` (this test's korovodrun, not another test's) whose KOROVOD_WORKER_ID
    starts with `prefix` and whose name with `comm_prefix`."""
    pids = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/environ" % pid, "rb") as f:
                env = f.read().split(b"\0")
            with open("/proc/%s/comm" % pid) as f:
                comm = f.read().strip()
            with open("/proc/%s/stat" % pid) as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if ppid == parent and comm.startswith(comm_prefix) and any(
                e.startswith(("KOROVOD_WORKER_ID=" + prefix).encode()) for e in env):
            pids.append(int(pid))
    return pids


def run_killing_a_worker(cmd, env, marker, prefix, timeout=300):
    """Runs korovodrun `cmd`; at the first output line containing `marker` SIGKILLs the trainers
    of the workers whose id starts with `prefix`. Returns (output, returncode, killed)."""
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True)
    lines = []
    killed = False
    try:
        for line in p.stdout:
            lines.append(line)
            if not killed and marker in line:
                victims = _pids_of_worker(p.pid, prefix, "python")
                assert victims, "".join(lines)
                for pid in victims:
                    os.kill(pid, 9)
                killed = True
        p.wait(timeout=timeout)
    finally:
        if p.poll() is None:
            p.kill()
    return "".join(lines), p.returncode, killed


def test_the_elastic_synthetic_benchmark_runs_through_a_failure(tmp_path):
    """Horovod's elastic synthetic benchmark (our copy: same flags and state, a CPU-sized model)
    with hvd.DistributedOptimizer and hvd.elastic.TorchState: a worker's trainer is killed from
    outside after the first iteration; the other two finish every iteration and print the total."""
    hosts = tmp_path / "hosts"
    hosts.write_text("localhost:2\n127.0.0.2:1\n")
    cmd = [KOROVODRUN, "--min-np", "2", "--max-np", "3", "--host-discovery-script",
           "cat %s" % hosts, "--elastic-timeout", "60", PYTHON,
           os.path.join(REPO, "examples", "pytorch_synthetic_benchmark_elastic.py"),
           "--model", "mlp", "--batch-size", "8", "--num-warmup-batches", "2",
           "--num-batches-per-iter", "5", "--num-iters", "8"]
    out, rc, killed = run_killing_a_worker(cmd, _env({}), "Iter #1:", "127.0.0.2:")
    assert killed, out[-4000:]
    assert rc == 0, out[-6000:]
    assert re.search(r"Iter #7: [0-9.]+ img/sec per CPU \(2 CPUs\)", out), out[-4000:]
    assert re.search(r"Total img/sec on 2 CPU\(s\): [0-9.]+", out), out[-4000:]
    assert "dropped; host 127.0.0.2 blacklisted" in out, out[-4000:]
