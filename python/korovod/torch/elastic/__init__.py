"""Horovod's elastic API for PyTorch (horovod.torch.elastic, `hvd.elastic`) on korovod.

`@hvd.elastic.run` retries the training function after a failed collective or a membership
change; a reset re-initializes korovod, which makes this rank's sidecar join the job's next
membership epoch (korovodrun --min-np/--max-np/--host-discovery-script start elastic jobs).
"""
from korovod.elastic import ObjectState, State, run_fn
from korovod.torch import mpi_ops
from korovod.torch.elastic.sampler import ElasticSampler
from korovod.torch.elastic.state import TorchState


def run(func):
    """Decorator for the elastic training function func(state, ...).

    Before func runs, the state is synced from rank 0 (a newcomer gets the others' state). A
    HorovodInternalError (a worker died) restores the last commit; a HostsUpdatedInterrupt
    (raised by state.commit() when workers were added or removed) keeps it. Either way korovod
    is re-initialized in the new membership, the reset callbacks run, and func runs again.

    func must not start with a collective: a newcomer would run it while the others sync.
    """
    return run_fn(func, _reset)


def _reset():
    # Looked up at call time so that a test can stand in for the sidecar.
    mpi_ops.shutdown()
    mpi_ops.init()


__all__ = ["ElasticSampler", "ObjectState", "State", "TorchState", "run"]
