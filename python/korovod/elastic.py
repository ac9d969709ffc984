"""Horovod's elastic state and retry loop (horovod.common.elastic), framework independent.

Horovod learns of host changes from its driver's notifications; korovod asks the sidecar instead:
the membership query returns this rank's membership epoch and the membership versions, and a
commit whose query shows a version past the one the current epoch formed at raises
HostsUpdatedInterrupt on every rank at once (rank 0's answer is broadcast, as Horovod broadcasts
its timestamps). The framework's reset (korovod.torch.elastic: shutdown, then init) makes the
sidecar join the next membership epoch.
"""
import copy
import enum
import functools
import os

from korovod.exceptions import HorovodInternalError, HostsUpdatedInterrupt

__all__ = ["HostUpdateResult", "State", "ObjectState", "run_fn"]


class HostUpdateResult(enum.IntFlag):
    """What changed in the job's hosts (Horovod's bits: removed | added == mixed)."""
    no_update = 0
    removed = 1
    added = 2
    mixed = 3


def _torch_membership():
    # Resolved at call time: korovod.torch imports this module, and tests swap the query.
    from korovod.torch import mpi_ops
    query = getattr(mpi_ops, "_membership", None)
    if query is None:
        raise NotImplementedError("korovod.torch.mpi_ops._membership is missing: this build "
                                  "cannot query the sidecar's membership")
    return query()


def _copy(value):
    # A snapshot must not share mutable values (state.img_secs.append) with the live attribute,
    # or restore() could not undo them; what cannot be deep-copied is kept by reference.
    try:
        return copy.deepcopy(value)
    except Exception:  # noqa: BLE001 - locks, sockets, C handles: keep the object itself
        return value


class State:
    """State kept in memory across workers; subclasses say how to save, restore and sync it.

    bcast_object(obj) returns rank 0's obj on every rank; get_rank() returns this rank.
    get_membership() returns (epoch, formed_version, version, update); None means korovod.torch's
    sidecar query, looked up at each call.
    """

    def __init__(self, bcast_object, get_rank, get_membership=None):
        self._bcast_object = bcast_object
        self._rank = get_rank
        self._get_membership = get_membership
        self._last_updated_timestamp = 0
        self._reset_callbacks = []

    def register_reset_callbacks(self, callbacks):
        """Callbacks run after every reset (a worker added or removed), e.g. to rescale the
        learning rate for the new size."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self):
        self.reset()
        for callback in self._reset_callbacks:
            callback()

    def on_hosts_updated(self, timestamp, update_res):
        """Horovod's driver notification. Kept for API compatibility only: korovod reads host
        changes from the sidecar's membership in check_host_updates()."""

    def commit(self):
        """Saves the state, then raises HostsUpdatedInterrupt if the hosts changed. Commits copy
        the state: commit every few batches rather than every one."""
        self.save()
        self.check_host_updates()

    def check_host_updates(self):
        """Raises HostsUpdatedInterrupt, on every rank alike, when the membership changed since
        the current epoch formed (or since the last interrupt); skip_sync when hosts were only
        removed, as the survivors' committed state is already the same everywhere."""
        query = self._get_membership or _torch_membership
        epoch, formed_version, version, update = (int(v) for v in query())
        if epoch == 0 and version == 0:
            return  # not an elastic job: nothing can change, and no collective is needed
        prev = max(self._last_updated_timestamp, formed_version)
        last = max(prev, version)
        bits = update if last > prev else HostUpdateResult.no_update
        # Ranks may see a new version at slightly different times: rank 0's view decides.
        prev, last, bits = self._bcast_object((prev, last, int(bits)))
        self._last_updated_timestamp = last
        if last > prev:
            raise HostsUpdatedInterrupt(bits == HostUpdateResult.removed)

    def save(self):
        """Saves the state to host memory."""
        raise NotImplementedError()

    def restore(self):
        """Restores the last committed state, undoing uncommitted changes."""
        raise NotImplementedError()

    def sync(self):
        """Makes every worker's state rank 0's."""
        raise NotImplementedError()

    def reset(self):
        """Adjusts the state after a reset, before it is synchronized."""


class ObjectState(State):
    """State of plain Python objects, each given as a keyword argument and kept as an attribute
    of the same name."""

    def __init__(self, bcast_object, get_rank, get_membership=None, **kwargs):
        self._bcast_object = bcast_object
        self._saved_state = {k: _copy(v) for k, v in kwargs.items()}
        # The live attributes are the caller's objects; the snapshot is a copy.
        for attr, value in kwargs.items():
            setattr(self, attr, value)
        super().__init__(bcast_object=bcast_object, get_rank=get_rank,
                         get_membership=get_membership)

    def save(self):
        self._saved_state = {attr: _copy(getattr(self, attr)) for attr in self._saved_state}

    def restore(self):
        self._set_attrs()

    def sync(self):
        if self._saved_state:
            self._saved_state = self._bcast_object(self._saved_state)
            self._set_attrs()  # copies: the snapshot stays apart from the attributes

    def _set_attrs(self):
        for attr, value in self._saved_state.items():
            setattr(self, attr, _copy(value))


def run_fn(func, reset):
    """Wraps func(state, ...) in Horovod's elastic loop: sync the state, run; on
    HorovodInternalError restore the last commit, on HostsUpdatedInterrupt keep it; then reset
    (re-initialize), run the reset callbacks and go again (syncing unless only hosts were
    removed). Outside an elastic job (HOROVOD_ELASTIC unset) HorovodInternalError propagates: a
    static world has no next epoch."""

    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        skip_sync = False
        while True:
            try:
                if not skip_sync:
                    state.sync()
                return func(state, *args, **kwargs)
            except HorovodInternalError:
                if os.environ.get("HOROVOD_ELASTIC") != "1":
                    # A static world cannot form again without the lost rank: retrying would spin
                    # on a broken world for ever. The error ends this trainer; its launcher (or
                    # the operator) restarts the world.
                    raise
                state.restore()
                skip_sync = False
            except HostsUpdatedInterrupt as e:
                skip_sync = e.skip_sync
            reset()
            state.on_reset()

    return wrapper
