"""Horovod's PyTorch API (horovod.torch) on korovod: CPU tensors, over the sidecar."""
from korovod.exceptions import HorovodInternalError
from korovod.torch.compression import Compression
from korovod.torch.mpi_ops import (
    Adasum, Average, Max, Min, Product, ProcessSet, Sum, add_process_set, allgather,
    allgather_async, allreduce, allreduce_, allreduce_async, allreduce_async_, alltoall,
    alltoall_async, arena_empty, arena_empty_like, arena_zeros_like, barrier, broadcast,
    broadcast_, broadcast_async, broadcast_async_, ccl_built, cross_rank, cross_size, cuda_built,
    ddl_built, global_process_set, gloo_built, gloo_enabled, grouped_allgather,
    grouped_allgather_async, grouped_allreduce, grouped_allreduce_, grouped_allreduce_async,
    grouped_allreduce_async_, grouped_reducescatter, grouped_reducescatter_async, init,
    is_arena_tensor, is_homogeneous, is_initialized, join, local_rank, local_size, mpi_built,
    mpi_enabled, mpi_threads_supported, nccl_built, poll, rank, reducescatter,
    reducescatter_async, remove_process_set, rocm_built, shutdown, size, sparse_allreduce_async,
    start_timeline, stop_timeline, synchronize, _staged_bytes)
from korovod.torch.optimizer import DistributedOptimizer
from korovod.torch.functions import (allgather_object, broadcast_object,
                                     broadcast_optimizer_state, broadcast_parameters)
from korovod.torch.sync_batch_norm import SyncBatchNorm
from korovod.torch import elastic  # hvd.elastic: after functions and mpi_ops, which it uses

__all__ = [n for n in dir() if not n.startswith("_")]
