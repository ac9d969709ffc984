"""A sidecar for a trainer that torchrun (or any env:// launcher) started: no korovodrun, no pod
sidecar, so no KOROVOD_SOCKET. Each rank starts its own korovod-sidecar, as korovodrun does:

- it binds the sidecar's data listener itself (on the address that routes to MASTER_ADDR, port 0)
  and hands the socket down (KOROVOD_LISTEN_FD), so no port is chosen and then raced for;
- the ranks exchange those addresses, their hosts and rank 0's job key and job id through the
  store torch hands the backend (torch's TCPStore at MASTER_ADDR:MASTER_PORT);
- the sidecar gets KOROVOD_PEERS, KOROVOD_HOSTS, the key in a 0600 file, its own unix socket and
  shared-memory prefix, and dies with the trainer (PR_SET_PDEATHSIG; SIGTERM at the world group's
  destruction or exit).

Trust: the job key travels through torch's store, which is not authenticated: whoever can reach
MASTER_ADDR:MASTER_PORT while the job starts can read it and join the ring. Under korovodrun or a
HorovodJob (KOROVOD_SOCKET set) nothing goes through the store.
"""
import atexit
import ctypes
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

_KEY = "korovod/launch/"
_proc = None
_dir = None


def _find_sidecar():
    """korovod-sidecar: $KOROVOD_SIDECAR, next to this Python's scripts (pip install), on PATH,
    or in the build tree beside the extension (<build>/bin)."""
    looked = []
    explicit = os.environ.get("KOROVOD_SIDECAR")
    if explicit:
        if os.access(explicit, os.X_OK):
            return explicit
        raise RuntimeError("korovod: KOROVOD_SIDECAR=%s is not an executable file" % explicit)
    candidates = [os.path.join(os.path.dirname(sys.executable), "korovod-sidecar")]
    on_path = shutil.which("korovod-sidecar")
    if on_path:
        candidates.append(on_path)
    import korovod.session as s
    client_dir = os.path.dirname(os.path.abspath(s._client.__file__))
    candidates.append(os.path.join(client_dir, "..", "..", "bin", "korovod-sidecar"))
    for c in candidates:
        looked.append(os.path.normpath(c))
        if os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    raise RuntimeError("korovod: no korovod-sidecar for a trainer started without korovodrun "
                       "(KOROVOD_SOCKET unset); looked in %s, and PATH; set KOROVOD_SIDECAR" %
                       ", ".join(looked))


def _local_address():
    """The address of the interface that routes to MASTER_ADDR (loopback for a local job)."""
    master = os.environ.get("MASTER_ADDR", "127.0.0.1")
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((socket.gethostbyname(master), 9))
            return s.getsockname()[0]
    except OSError:
        return "127.0.0.1"


def _get(store, key):
    v = store.get(_KEY + key)
    return v.decode() if isinstance(v, bytes) else str(v)


def _die_with_parent():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _environment(rank, size, listener, store):
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    local_size = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    node = int(os.environ.get("GROUP_RANK", os.environ.get("GROUP_RANK", "0")))
    host = "%s:%d" % listener.getsockname()
    store.set(_KEY + "peer/%d" % rank, host)
    store.set(_KEY + "host/%d" % rank, socket.gethostname())
    if rank == 0:
        store.set(_KEY + "job", secrets.token_hex(6))
        store.set(_KEY + "key", secrets.token_hex(32))
    peers = [_get(store, "peer/%d" % r) for r in range(size)]
    hosts = [_get(store, "host/%d" % r) for r in range(size)]
    job, key = _get(store, "job"), _get(store, "key")
    key_file = os.path.join(_dir, "job.key")
    fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(key)
    env = dict(os.environ)
    cross_size = max(size // max(local_size, 1), 1)
    env.update({
        "KOROVOD_RANK": str(rank), "KOROVOD_SIZE": str(size),
        "KOROVOD_LOCAL_RANK": str(local_rank), "KOROVOD_LOCAL_SIZE": str(local_size),
        "KOROVOD_CROSS_RANK": str(min(node, cross_size - 1)), "KOROVOD_CROSS_SIZE": str(cross_size),
        "KOROVOD_PEERS": ",".join(peers), "KOROVOD_HOSTS": ",".join(hosts),
        "KOROVOD_LISTEN_FD": str(listener.fileno()), "KOROVOD_JOB_KEY_FILE": key_file,
        "KOROVOD_SOCKET": os.path.join(_dir, "sidecar.sock"),
        "KOROVOD_SHM_PREFIX": "/korovod-%s-" % job})
    return env


def start_sidecar(store, rank, size, timeout_s=None):
    """Starts this rank's sidecar and points the session at it (KOROVOD_SOCKET); waits for its
    socket up to KOROVOD_START_TIMEOUT_SECONDS (60); raises naming the sidecar's exit and its last
    lines if it ends first."""
    global _proc, _dir
    binary = _find_sidecar()
    _dir = tempfile.mkdtemp(prefix="korovod-torchrun-%d-" % rank)
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind((_local_address(), 0))
    listener.listen(128)
    env = _environment(rank, size, listener, store)
    log_path = os.path.join(_dir, "sidecar.log")
    with open(log_path, "wb") as log:
        _proc = subprocess.Popen([binary], env=env, stdout=log, stderr=subprocess.STDOUT,
                                 pass_fds=[listener.fileno()], preexec_fn=_die_with_parent)
    listener.close()
    atexit.register(stop_sidecar)
    limit = timeout_s or float(os.environ.get("KOROVOD_START_TIMEOUT_SECONDS", "60"))
    deadline = time.monotonic() + limit
    sock = env["KOROVOD_SOCKET"]
    while not os.path.exists(sock):
        code = _proc.poll()
        if code is not None or time.monotonic() > deadline:
            with open(log_path, "rb") as f:
                tail = f.read()[-2000:].decode(errors="replace")
            stop_sidecar()
            raise RuntimeError("korovod: rank %d: the sidecar %s %s; its last lines:\n%s" % (
                rank, binary, "exited with %s" % code if code is not None else
                "made no socket within %.0f s" % limit, tail))
        time.sleep(0.05)  # the sidecar creates its socket once; nothing to block on until then
    os.environ["KOROVOD_SOCKET"] = sock
    for name in ("RANK", "SIZE", "LOCAL_RANK", "LOCAL_SIZE", "CROSS_RANK", "CROSS_SIZE"):
        os.environ["KOROVOD_" + name] = env["KOROVOD_" + name]


def stop_sidecar():
    """Stops the sidecar this process started (SIGTERM: it cleans its shared memory up)."""
    global _proc, _dir
    proc, _proc = _proc, None
    if proc is not None:
        from korovod import session
        session.shutdown()  # the session first: its ops end as aborted, not as a lost sidecar
    if proc is not None and proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if _dir is not None and proc is not None:
        os.environ.pop("KOROVOD_SOCKET", None)
        shutil.rmtree(_dir, ignore_errors=True)
        _dir = None
