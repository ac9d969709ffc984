"""korovod-local-ranks: runs a trainer command once per local rank of a worker pod.

  korovod-local-ranks [--] command [args...]

The operator wraps the trainer container's command with it when a worker holds several ranks
(spec.worker.ranksPerWorker), as torchrun --nproc-per-node does. It reads what the operator sets
in the trainer container: KOROVOD_RANK (the pod's first rank), KOROVOD_SIZE, KOROVOD_LOCAL_SIZE
(ranks in this pod), KOROVOD_CROSS_RANK, KOROVOD_CROSS_SIZE and KOROVOD_SOCKET (containing
"{local_rank}"). Local rank i runs with KOROVOD_RANK = first + i, KOROVOD_LOCAL_RANK = i, its own
socket, and the HOROVOD_* copies of every rank variable; each output line is prefixed "[rank] ".
torchrun's variables too (init_process_group's env://): RANK and LOCAL_RANK per local rank;
WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK (the pod's index, KOROVOD_CROSS_RANK), MASTER_ADDR (the
host of KOROVOD_COORDINATOR, rank 0's pod) and MASTER_PORT (29500) unless the pod sets them.
Every GPU of the pod stays visible, as Horovod scripts expect
(torch.cuda.set_device(hvd.local_rank())).

Exit: 0 when every local rank exits 0. When one fails (exit code or signal), the others are sent
SIGTERM (SIGKILL after a grace period), and the pod's trainer exits with the failed rank's status,
naming it, so the worker fails as a rank death does. SIGTERM/SIGINT are passed on to every rank.
"""
import os
import signal
import subprocess
import sys
import threading
import time

GRACE_S = 10.0
_VARS = ("RANK", "SIZE", "LOCAL_RANK", "LOCAL_SIZE", "CROSS_RANK", "CROSS_SIZE")


class UsageError(Exception):
    pass


def _int(env, name, lo):
    value = env.get(name)
    if value is None or value == "":
        raise UsageError("%s is not set (the operator sets it in a worker of several ranks)" % name)
    try:
        n = int(value)
    except ValueError:
        raise UsageError("%s=%s is not an integer" % (name, value)) from None
    if n < lo:
        raise UsageError("%s=%s must be at least %d" % (name, value, lo))
    return n


def _torchrun_vars(e, rank, size, local_rank, local_size, node):
    """torchrun's variables for one local rank: its own rank always (a pod-wide value cannot be
    right for several ranks), the rest unless the pod has them."""
    e["RANK"], e["LOCAL_RANK"] = str(rank), str(local_rank)
    coordinator = e.get("KOROVOD_COORDINATOR", "")
    defaults = {"WORLD_SIZE": size, "LOCAL_WORLD_SIZE": local_size, "GROUP_RANK": node,
                "MASTER_ADDR": coordinator.rsplit(":", 1)[0] if coordinator else "127.0.0.1",
                "MASTER_PORT": 29500}
    for name, value in defaults.items():
        e.setdefault(name, str(value))


def rank_environments(env):
    """One environment per local rank, from the pod's. Raises UsageError."""
    first = _int(env, "KOROVOD_RANK", 0)
    size = _int(env, "KOROVOD_SIZE", 1)
    local_size = _int(env, "KOROVOD_LOCAL_SIZE", 1)
    cross_rank = _int(env, "KOROVOD_CROSS_RANK", 0)
    cross_size = _int(env, "KOROVOD_CROSS_SIZE", 1)
    socket = env.get("KOROVOD_SOCKET", "")
    if first + local_size > size:
        raise UsageError("ranks %d..%d of KOROVOD_RANK + KOROVOD_LOCAL_SIZE go past KOROVOD_SIZE=%d"
                         % (first, first + local_size - 1, size))
    if local_size > 1 and "{local_rank}" not in socket:
        raise UsageError('KOROVOD_SOCKET=%s must contain "{local_rank}": each local rank has its '
                         "own socket" % socket)
    out = []
    for i in range(local_size):
        e = dict(env)
        values = {"RANK": first + i, "SIZE": size, "LOCAL_RANK": i, "LOCAL_SIZE": local_size,
                  "CROSS_RANK": cross_rank, "CROSS_SIZE": cross_size}
        for name in _VARS:
            e["KOROVOD_" + name] = e["HOROVOD_" + name] = str(values[name])
        e["KOROVOD_SOCKET"] = socket.replace("{local_rank}", str(i))
        _torchrun_vars(e, first + i, size, i, local_size, cross_rank)
        out.append(e)
    return out


def _pump(stream, prefix, sink, lock):
    for line in iter(stream.readline, b""):
        with lock:
            sink.write(prefix + line)
            sink.flush()
    stream.close()


def describe(code):
    return "was killed by signal %d" % -code if code < 0 else "exited with code %d" % code


def run(command, envs, out=None, err=None):
    """Runs `command` once per environment; returns the exit status (see the module doc)."""
    out = out or sys.stdout.buffer
    err = err or sys.stderr.buffer
    lock = threading.Lock()
    procs, pumps = [], []
    for e in envs:
        p = subprocess.Popen(command, env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        prefix = ("[%s] " % e["KOROVOD_RANK"]).encode()
        for stream, sink in ((p.stdout, out), (p.stderr, err)):
            t = threading.Thread(target=_pump, args=(stream, prefix, sink, lock), daemon=True)
            t.start()
            pumps.append(t)
        procs.append(p)

    def say(msg):
        with lock:
            err.write(("korovod-local-ranks: %s\n" % msg).encode())
            err.flush()

    stopping = []

    def stop_all(sig):
        for p in procs:
            if p.poll() is None:
                try:
                    p.send_signal(sig)
                except ProcessLookupError:
                    pass

    def on_signal(signum, _frame):
        stopping.append(signum)
        stop_all(signum)

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    status = 0
    try:
        kill_at = None
        while any(p.poll() is None for p in procs):
            for i, p in enumerate(procs):
                code = p.poll()
                if code not in (None, 0) and status == 0 and not stopping:
                    status = code if code > 0 else 128 - code
                    say("local rank %d (rank %s) %s; stopping the other local ranks"
                        % (i, envs[i]["KOROVOD_RANK"], describe(code)))
                    stop_all(signal.SIGTERM)
                    kill_at = time.monotonic() + GRACE_S
            if kill_at is not None and time.monotonic() > kill_at:
                stop_all(signal.SIGKILL)
                kill_at = None
            time.sleep(0.05)
        if status == 0:
            for i, p in enumerate(procs):
                if p.returncode != 0:
                    status = p.returncode if p.returncode > 0 else 128 - p.returncode
                    if not stopping:
                        say("local rank %d (rank %s) %s" % (i, envs[i]["KOROVOD_RANK"],
                                                            describe(p.returncode)))
                    break
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        for t in pumps:
            t.join(timeout=5)
    return status


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv or argv[0] in ("-h", "--help"):
        sys.stderr.write(__doc__)
        return 0 if argv else 2
    try:
        envs = rank_environments(os.environ)
    except UsageError as e:
        sys.stderr.write("korovod-local-ranks: %s\n" % e)
        return 2
    return run(argv, envs)


if __name__ == "__main__":
    sys.exit(main())
