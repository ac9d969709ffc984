"""`horovod.common.elastic` on korovod: the same State, ObjectState and run_fn as korovod.elastic."""
from korovod.elastic import HostUpdateResult, ObjectState, State, run_fn  # noqa: F401
