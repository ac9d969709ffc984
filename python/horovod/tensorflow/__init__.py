"""`horovod.tensorflow` on korovod: re-exports korovod.tensorflow."""
import sys as _sys

from korovod.tensorflow import *  # noqa: F401,F403
from korovod.tensorflow import __all__  # noqa: F401
from korovod.tensorflow import _cache, _executing_eagerly, _make_subgraph  # noqa: F401
from korovod.tensorflow import (compression, elastic, functions, gradient_aggregation,
                                gradient_tape, mpi_ops, sync_batch_norm, util)

# Horovod's submodules by their Horovod names (`from horovod.tensorflow.mpi_ops import Sum`).
for _m in (compression, elastic, functions, mpi_ops, sync_batch_norm, util):
    _sys.modules["horovod.tensorflow." + _m.__name__[len("korovod.tensorflow."):]] = _m
del _m
