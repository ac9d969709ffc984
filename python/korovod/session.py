"""The trainer's session with its sidecar, shared by korovod's framework bindings (torch,
tensorflow): init/shutdown, the ranks and sizes, process sets and timelines. A process has one
session, whichever bindings it imports; each binding registers hooks (on_session) to hand the
client to its ops and to abandon its ops in flight at shutdown."""
import atexit
import numbers
import os
import sys
import threading

from korovod.exceptions import HorovodInternalError


def _import_client():
    """korovod._client, its own libraries bound to each other. TensorFlow makes its copies of the
    protobuf, absl and gRPC symbols global when it loads (RTLD_GLOBAL, for custom ops); loaded
    after it, the client's gRPC and protobuf (Debian's, other versions) would bind to those and
    crash. RTLD_DEEPBIND puts the client's own libraries ahead of the global scope."""
    if "korovod._client" in sys.modules:
        return sys.modules["korovod._client"]
    flags = sys.getdlopenflags()
    sys.setdlopenflags(os.RTLD_NOW | os.RTLD_DEEPBIND)
    try:
        from korovod import _client as client
    finally:
        sys.setdlopenflags(flags)
    return client


_client = _import_client()


class SessionHooks:
    """What a framework binding does when the session starts and ends."""

    def on_init(self, client):
        pass

    def before_close(self):
        return None

    def after_close(self):
        pass


def on_session(hooks):
    """Registers a SessionHooks (once per binding); runs its on_init now if a session is open."""
    with _lock:
        _hooks.append(hooks)
        client = _client_obj
    if client is not None:
        hooks.on_init(client)


_lock = threading.Lock()
_client_obj = None
# Framework bindings' hooks (on_session): on_init(client) after init() connected; before_close()
# under _lock before the client closes (what it returns is kept until then: ops whose tensors the
# client may still write); after_close() once it has.
_hooks = []


class ProcessSet:
    """A set of ranks that collectives may be restricted to (process_set=...), as Horovod's: pass
    it to hvd.init(process_sets=[...]) or hvd.add_process_set(); process_set_id is set once it is
    registered and None before (or after hvd.remove_process_set)."""

    def __init__(self, ranks_or_comm=None):
        self.ranks = None
        self.process_set_id = None
        if ranks_or_comm is not None:
            ranks = sorted(ranks_or_comm)
            if any(isinstance(r, bool) or not isinstance(r, numbers.Integral) for r in ranks):
                raise ValueError("ProcessSet should be initialized with a list of process ranks "
                                 "(korovod has no MPI communicators)")
            self.ranks = [int(r) for r in ranks]

    def _id(self):
        if self.process_set_id is None:
            raise ValueError("process set %s is not registered: pass it to hvd.init(process_sets="
                             "...) or hvd.add_process_set() (or it was removed)" % (self.ranks,))
        return self.process_set_id

    def _invalidate(self):
        self.process_set_id = None

    def size(self):
        """The number of ranks, or None if the set is not registered."""
        if self.process_set_id is None:
            return None
        return size() if self.ranks is None else len(self.ranks)

    def rank(self):
        """This process's rank within the set, or None if the set is not registered."""
        if self.process_set_id is None:
            return None
        r = rank()
        if self.ranks is None:  # the global set before hvd.init() (rank() raised already)
            return r
        if r not in self.ranks:
            raise ValueError("Process is not part of provided process set.")
        return self.ranks.index(r)

    def included(self):
        """Whether this process is in the set, or None if the set has no ranks yet."""
        if self.ranks is None:
            return None
        return rank() in self.ranks

    def __str__(self):
        return "ProcessSet(process_set_id=%s, ranks=%s)" % (self.process_set_id, self.ranks)

    __repr__ = __str__


global_process_set = ProcessSet()
global_process_set.process_set_id = 0
_process_sets = {0: global_process_set}  # id -> the registered ProcessSet object
_dynamic_process_sets = False  # HOROVOD_DYNAMIC_PROCESS_SETS, read by init()


def _env_true(name):
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def init(comm=None, process_sets=None):
    """Connects to this rank's sidecar (KOROVOD_SOCKET, set by korovodrun or the operator).

    process_sets: None; a list of ProcessSet objects registered now (every rank passes the same
    list; an entry with the ranks of the world or of an earlier entry raises ValueError after the
    others are registered); or "dynamic", which sets HOROVOD_DYNAMIC_PROCESS_SETS=1 so that
    add_process_set/remove_process_set may be called later.
    """
    global _client_obj, _dynamic_process_sets
    if process_sets is None:
        process_sets = []
    elif isinstance(process_sets, str):
        if process_sets.lower() != "dynamic":
            raise ValueError("process_sets must be a list of ProcessSet objects or \"dynamic\", "
                             "not %r" % (process_sets,))
        os.environ["HOROVOD_DYNAMIC_PROCESS_SETS"] = "1"
        process_sets = []
    process_sets = [ps if isinstance(ps, ProcessSet) else ProcessSet(ps) for ps in process_sets]
    with _lock:
        if _client_obj is not None:
            return
        path = os.environ.get("KOROVOD_SOCKET")
        if not path:
            raise RuntimeError("korovod: not started by korovodrun (KOROVOD_SOCKET unset)")
        timeout = float(os.environ.get("KOROVOD_CONNECT_TIMEOUT", "60"))
        try:
            _client_obj = _client.Client.connect(path, timeout)
        except Exception as e:
            # hvd.elastic recovers from HorovodInternalError: a sidecar that is restarting (or
            # gone) is that kind of failure, not a bug in the script.
            raise HorovodInternalError("korovod: no session with the sidecar at %s: %s"
                                       % (path, e)) from e
        global_process_set.ranks = list(range(_client_obj.size))
        for ps in _process_sets.values():
            if ps is not global_process_set:
                ps._invalidate()
        _process_sets.clear()
        _process_sets[0] = global_process_set
        _dynamic_process_sets = _env_true("HOROVOD_DYNAMIC_PROCESS_SETS")
        for h in _hooks:
            h.on_init(_client_obj)
    duplicates = []
    for i, ps in enumerate(process_sets):
        if ps.ranks is None or _registered_id(ps.ranks) is not None:
            ps._invalidate()
            duplicates.append(i)
        else:
            _register_process_set(ps)
    if duplicates:
        raise ValueError("korovod could not be initialized because process_sets entry number %d "
                         "is a duplicate: %s" % (duplicates[0], process_sets[duplicates[0]]))


def shutdown():
    """Detaches from the sidecar. Ops still in flight are abandoned: their synchronize() raises
    HorovodInternalError, and nothing is written into their tensors any more."""
    global _client_obj
    with _lock:
        client, _client_obj = _client_obj, None
        if client is None:
            return
        kept = [h.before_close() for h in _hooks]
    # Dropping the client stops its completion thread (the pending ops finish as aborted) before
    # anything else goes: the bindings keep the tensors of ops in flight until then, so the client
    # never copies a result into freed memory.
    del client
    del kept
    for h in _hooks:
        h.after_close()


atexit.register(shutdown)


def is_initialized():
    return _client_obj is not None


def _client_or_none():
    return _client_obj


def _membership():
    """(epoch, formed_version, version, update) of this session: hvd.elastic's commit asks whether
    the membership moved since the epoch formed. All zeros for a static job (no sidecar call)."""
    c = _client_obj
    if c is None or c.epoch == 0:
        return (0, 0, 0, 0)
    return tuple(c.membership())


def _c():
    c = _client_obj
    if c is None:
        raise ValueError("korovod has not been initialized; use hvd.init().")
    return c


def rank():
    return _c().rank


def size():
    return _c().size


def local_rank():
    return _c().local_rank


def local_size():
    return _c().local_size


def cross_rank():
    return _c().cross_rank


def cross_size():
    return _c().cross_size


def is_homogeneous():
    return True


def mpi_threads_supported():
    return False


def mpi_enabled():
    return False


def mpi_built():
    return False


def gloo_enabled():
    return False


def gloo_built():
    return False


def nccl_built():
    """NCCL's version code when this rank's sidecar runs GPU tensors on NCCL, else 0 (before
    init() too: the sidecar, not this process, has NCCL)."""
    c = _client_or_none()
    return c.nccl_version if c is not None and c.device_backend == "nccl" else 0


def ddl_built():
    return False


def ccl_built():
    return False


def cuda_built():
    """True when this rank's sidecar takes CUDA tensors where they lie (its NCCL backend)."""
    c = _client_or_none()
    return c is not None and c.device_backend == "nccl"


def sycl_built():
    return False


def rocm_built():
    return False


def _registered_id(ranks):
    for psid, ps in _process_sets.items():
        if ps.ranks == list(ranks):
            return psid
    return None


def _register_process_set(ps):
    ps.process_set_id = _c().add_process_set(ps.ranks)
    _process_sets[ps.process_set_id] = ps
    return ps


def add_process_set(process_set):
    """Registers a process set (a ProcessSet or a list of ranks) on every rank and returns it.

    Collective: every rank calls it with the same ranks, in the same order. Needs
    HOROVOD_DYNAMIC_PROCESS_SETS=1 (or hvd.init(process_sets="dynamic")); a set with the ranks of
    a registered one (the world included) raises ValueError, as in Horovod."""
    _c()  # ValueError before hvd.init()
    if not _dynamic_process_sets:
        raise ValueError("Set HOROVOD_DYNAMIC_PROCESS_SETS=1 to allow adding process sets after "
                         "Horovod initialization.")
    ps = process_set if isinstance(process_set, ProcessSet) else ProcessSet(process_set)
    if ps.ranks is None:
        raise ValueError("add_process_set needs a ProcessSet with ranks")
    if _registered_id(ps.ranks) is not None:
        raise ValueError("Attempted to add a duplicate process set: %s" % ps)
    return _register_process_set(ps)


def remove_process_set(process_set):
    """Removes a registered process set on every rank (collective, like add_process_set) and
    invalidates it; returns whether a set was removed (False for the global set or a set that is
    not registered). Needs HOROVOD_DYNAMIC_PROCESS_SETS=1."""
    psid = process_set.process_set_id
    if psid is None or psid == 0:
        return False
    process_set._invalidate()
    c = _c()
    if not _dynamic_process_sets:
        raise ValueError("Set HOROVOD_DYNAMIC_PROCESS_SETS=1 to allow removing process sets after "
                         "Horovod initialization.")
    removed = c.remove_process_set(psid)
    registered = _process_sets.pop(psid, None)
    if registered is not None:
        registered._invalidate()
    return bool(removed)


def psid(process_set):
    """The id the engine knows a process set by (None: the world)."""
    return 0 if process_set is None else process_set._id()


def set_size(process_set):
    return size() if process_set is None else process_set.size()


def set_rank(process_set):
    return rank() if process_set is None else process_set.rank()


def set_root(root_rank, process_set):
    """Horovod's root_rank is a global rank; the engine takes the root's rank in the set."""
    root = int(root_rank)
    if process_set is None or process_set is global_process_set or process_set.ranks is None:
        return root
    if root not in process_set.ranks:
        raise ValueError("korovod: broadcast root rank %d is not a member of %s"
                         % (root, process_set))
    return process_set.ranks.index(root)


def start_timeline(file_path, mark_cycles=False):
    _c().start_timeline(file_path, mark_cycles)


def stop_timeline():
    _c().stop_timeline()
