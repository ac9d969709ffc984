"""torch process groups as engine process sets. The engine registers a process set collectively
over the world (every rank, the same order), but torch calls a backend's creator on a new group's
members only; so korovod wraps torch's group helper (`_new_process_group_helper`, which every rank
calls for every new group) and registers the set there, on every rank, before torch builds the
group. A group of the world's ranks is the engine's world set (0); groups of equal ranks share
one set. Sets are removed (collectively again) when the world group is destroyed."""
import functools
import inspect
import sys
import threading

from torch.distributed import distributed_c10d as _c10d

from korovod import session as _session

BACKEND_NAME = "korovod"

_lock = threading.Lock()
_sets = {}  # tuple(sorted global ranks) -> engine process set id (the world's not here)
_order = []  # the sets in registration order: removed in it, the same on every rank


def _uses_korovod(backend):
    return backend is not None and BACKEND_NAME in str(backend).lower()


def register(ranks):
    """Registers the engine process set for a group of `ranks` (global), on every rank; returns
    its id. Collective over the world when the set is new."""
    key = tuple(sorted(int(r) for r in ranks))
    client = _session._c()
    if key == tuple(range(client.size)):
        return 0
    with _lock:
        if key in _sets:
            return _sets[key]
    psid = _session._registered_id(list(key))  # one the script registered through hvd
    if psid is None:
        psid = client.add_process_set(list(key))
        with _lock:
            _order.append(key)
    with _lock:
        _sets[key] = psid
    return psid


def lookup(ranks):
    """The engine process set of a group of `ranks`, registered by register()."""
    key = tuple(sorted(int(r) for r in ranks))
    client = _session._c()
    if not key or key == tuple(range(client.size)):
        return 0
    with _lock:
        psid = _sets.get(key)
    if psid is None:
        raise RuntimeError("korovod: rank %d: no engine process set for the group of ranks %s "
                           "(korovod registers one when every rank calls new_group(); "
                           "use_local_synchronization=True is not supported)" %
                           (client.rank, list(key)))
    return psid


def remove_all():
    """Removes the process sets this module registered (collective over the world: every rank
    destroys the world group)."""
    with _lock:
        keys, _order[:] = list(_order), []
        ids = [_sets.pop(k) for k in keys if k in _sets]
        _sets.clear()
    client = _session._client_or_none()
    if client is None:
        return
    for psid in ids:
        client.remove_process_set(psid)


def forget():
    """The session ended: its process sets went with it."""
    with _lock:
        _sets.clear()
        _order[:] = []


def _wrap_group_helper():
    helper = _c10d._new_process_group_helper
    if getattr(helper, "_korovod_wrapped", False):
        return
    signature = inspect.signature(helper)

    @functools.wraps(helper)
    def wrapped(*args, **kwargs):
        bound = signature.bind_partial(*args, **kwargs).arguments
        ranks = bound.get("global_ranks_in_group") or []
        if ranks and _uses_korovod(bound.get("backend")) and _session.is_initialized():
            caller = sys._getframe(1).f_locals  # torch's _new_group_with_tag
            if caller.get("use_local_synchronization"):
                raise ValueError("korovod: new_group(use_local_synchronization=True) is not "
                                 "supported: the engine registers a group's process set on "
                                 "every rank, so every rank calls new_group()")
            register(ranks)
        return helper(*args, **kwargs)

    wrapped._korovod_wrapped = True
    _c10d._new_process_group_helper = wrapped


def install():
    """Wraps torch's group helper once (idempotent)."""
    _wrap_group_helper()
