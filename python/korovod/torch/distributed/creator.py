"""The function torch calls to make a korovod group (Backend.register_backend's creator): opens
the process's korovod session (the one hvd.init() would open; a script doing both shares it),
checks torch's rank and world against the sidecar's, and builds the group's backend over its
engine process set."""
import os

from korovod import session as _session
from korovod.torch.distributed import errors, groups, launch
from korovod.torch.distributed.backend import KorovodBackend
from korovod.torch.distributed.collectives import Collectives
from korovod.torch.distributed.work import _seconds

# Whether this module opened the session (then destroying the world group closes it); a script
# that called hvd.init() first keeps its session.
_owns_session = False


def _open_session(store, rank, size):
    global _owns_session
    if _session.is_initialized():
        return _session._c()
    if not os.environ.get("KOROVOD_SOCKET"):
        launch.start_sidecar(store, rank, size)  # torchrun: no korovodrun, no pod sidecar
    _session.init()
    _owns_session = True
    return _session._c()


def create(store, group_rank, group_size, timeout, group_name, global_ranks):
    """The group's KorovodBackend. global_ranks: the group's global ranks ([] for the world)."""
    if not global_ranks:
        client = _open_session(store, group_rank, group_size)
        if client.rank != group_rank or client.size != group_size:
            raise errors.BackendError(
                "korovod: torch was given rank %d of a world of %d, but this trainer's sidecar "
                "is rank %d of %d (KOROVOD_SOCKET=%s): launch with korovodrun (or torchrun "
                "alone), not both with different worlds" % (
                    group_rank, group_size, client.rank, client.size,
                    os.environ.get("KOROVOD_SOCKET", "")))
        psid = 0
    else:
        client = _session._c()
        ranks = sorted(int(r) for r in global_ranks)
        if ranks.index(client.rank) != group_rank:
            raise errors.BackendError(
                "korovod: rank %d: torch made it rank %d of group %s, the engine's process set "
                "of ranks %s makes it %d" % (client.rank, group_rank, group_name, ranks,
                                             ranks.index(client.rank)))
        psid = groups.lookup(ranks)
    ops = Collectives(client, psid, str(group_name), group_rank, group_size, _seconds(timeout))
    ops.world = not global_ranks
    return KorovodBackend(ops)


def create_extended(dist_backend_opts, backend_options=None):
    """register_backend(..., extended_api=True)'s creator: torch's _DistributedBackendOptions."""
    groups.install()  # before any new_group(): every rank registers each group's process set
    o = dist_backend_opts
    return create(o.store, o.group_rank, o.group_size, o.timeout, o.group_id,
                  list(o.global_ranks_in_group))


def world_destroyed():
    """The world group is gone: the process sets of its subgroups go (collectively), and the
    session when this module opened it."""
    global _owns_session
    try:
        if _session.is_initialized():
            groups.remove_all()
    finally:
        groups.forget()
        if _owns_session:
            _owns_session = False
            _session.shutdown()
            launch.stop_sidecar()
