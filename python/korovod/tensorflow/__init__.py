"""Horovod's TensorFlow 2 API (horovod.tensorflow) on korovod: CPU tensors, over the sidecar.
The ops run eagerly and inside tf.function graphs, asynchronously (korovod's TensorFlow op
library, built against the installed TensorFlow)."""
from korovod.exceptions import HorovodInternalError  # noqa: F401
from korovod.tensorflow.compression import Compression
from korovod.tensorflow.functions import (allgather_object, broadcast_global_variables,
                                          broadcast_object, broadcast_object_fn,
                                          broadcast_variables)
from korovod.tensorflow.gradient_aggregation import allreduce, grouped_allreduce
from korovod.tensorflow.gradient_tape import (DistributedGradientTape,
                                              PartialDistributedGradientTape)
from korovod.tensorflow.mpi_ops import (
    Adasum, Average, Max, Min, Product, ProcessSet, Sum, add_process_set, allgather, alltoall,
    barrier, broadcast, broadcast_, ccl_built, check_num_rank_power_of_2, cross_rank, cross_size,
    cuda_built, ddl_built, global_process_set, gloo_built, gloo_enabled, grouped_allgather,
    grouped_reducescatter, handle_average_backwards_compatibility, init, is_homogeneous,
    is_initialized, join, local_rank, local_rank_op, local_size, local_size_op, mpi_built,
    mpi_enabled, mpi_threads_supported, nccl_built, process_set_included_op, rank, rank_op,
    reducescatter, remove_process_set, rocm_built, shutdown, size, size_op, start_timeline,
    stop_timeline, sycl_built)
from korovod.tensorflow.optimizer import DistributedOptimizer
from korovod.tensorflow.sync_batch_norm import SyncBatchNormalization
from korovod.tensorflow import elastic, util  # noqa: E402  hvd.elastic, after what it uses
from korovod.tensorflow.util import _cache, _executing_eagerly, _make_subgraph  # noqa: F401

__all__ = [n for n in dir() if not n.startswith("_")]
