"""`horovod.torch` on korovod: re-exports korovod.torch."""
import sys as _sys

from korovod.torch import *  # noqa: F401,F403
from korovod.torch import __all__  # noqa: F401
from korovod.torch import compression, elastic, functions, mpi_ops, optimizer, sync_batch_norm

# Horovod's submodules by their Horovod names (`from horovod.torch.mpi_ops import Sum`,
# `from horovod.torch.elastic import ElasticSampler`): the same module objects as korovod's, so
# either name sees the same state.
for _m in (compression, elastic, elastic.sampler, elastic.state, functions, mpi_ops, optimizer,
           sync_batch_norm):
    _sys.modules["horovod.torch." + _m.__name__[len("korovod.torch."):]] = _m
del _m
