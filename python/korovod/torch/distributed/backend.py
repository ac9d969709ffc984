"""The classes torch holds for a korovod group: on torch >= 2 a subclass of c10d's Backend (torch
builds the ProcessGroup around it), on torch 1.13 a subclass of ProcessGroup. Both forward each
op to one Collectives; the method names are torch's, old and new (torch renamed
_allgather_base -> all_gather_single and friends), so one class serves every torch from 2.0 on.
allocate_tensor hands out arena blocks so that FSDP2's buffers are never staged."""
import sys

import torch
import torch.distributed as dist
from torch._C import _distributed_c10d as _c10d

from korovod.torch import mpi_ops

NEW_API = int(torch.__version__.split(".")[0]) >= 2 and hasattr(_c10d, "Backend")
_Base = _c10d.Backend if NEW_API else dist.ProcessGroup


def _torch_work(work):
    """torch 1.13 has no trampoline for a Python Work: C++ (DDP's checks and reducer) calls its
    wait() as the base class's, which never completes. So there an op called from C++ goes back
    as a C++ work over its future; one called by torch.distributed's Python functions
    (distributed_c10d.py) keeps the Python Work, whose wait() raises the op's error (a C++ wait on
    a future swallows it)."""
    if NEW_API or sys._getframe(2).f_code.co_filename.endswith("distributed_c10d.py"):
        return work
    return _c10d._create_work_from_future(work.get_future())


def _opts(opts, cls):
    """torch always passes its options; a direct call may not."""
    return opts if opts is not None else getattr(_c10d, cls)()


class KorovodBackend(_Base):
    """One torch group's korovod backend; `ops` is its Collectives."""

    def __init__(self, ops):
        super().__init__(ops.rank, ops.size)
        self._ops = ops

    def getBackendName(self):
        return "korovod"

    def shutdown(self):
        """torch >= 2 calls it when the group is destroyed; the world's ends what it opened."""
        if self._ops.world:
            from korovod.torch.distributed import creator
            creator.world_destroyed()

    def __repr__(self):
        return "KorovodBackend(group %s, rank %d of %d, process set %d)" % (
            self._ops.group, self._ops.rank, self._ops.size, self._ops.psid)

    # ---- reductions ----

    def allreduce(self, tensors, opts=None):
        return _torch_work(self._ops.allreduce(tensors, _opts(opts, "AllreduceOptions")))

    def allreduce_coalesced(self, tensors, opts=None):
        return _torch_work(self._ops.allreduce_coalesced(
            tensors, _opts(opts, "AllreduceCoalescedOptions")))

    def reduce_scatter(self, outputs, input_lists, opts=None):
        return _torch_work(self._ops.reduce_scatter(outputs, input_lists,
                                        _opts(opts, "ReduceScatterOptions")))

    def _reduce_scatter_base(self, output, inp, opts=None):
        return _torch_work(self._ops.reduce_scatter_tensor([output], [inp],
                                               _opts(opts, "ReduceScatterOptions")))

    reduce_scatter_single = _reduce_scatter_base

    def reduce_scatter_tensor_coalesced(self, outputs, inputs, opts=None):
        return _torch_work(self._ops.reduce_scatter_tensor_coalesced(outputs, inputs,
                                                         _opts(opts, "ReduceScatterOptions")))

    reduce_scatter_single_coalesced = reduce_scatter_tensor_coalesced

    def reduce(self, tensors, opts=None):
        return _torch_work(self._ops.reduce(tensors, _opts(opts, "ReduceOptions")))

    # ---- data movement ----

    def broadcast(self, tensors, opts=None):
        return _torch_work(self._ops.broadcast(tensors, _opts(opts, "BroadcastOptions")))

    def allgather(self, output_lists, inputs, opts=None):
        return _torch_work(self._ops.allgather(output_lists, inputs,
                                               _opts(opts, "AllgatherOptions")))

    def allgather_coalesced(self, output_lists, inputs, opts=None):
        return _torch_work(self._ops.allgather_coalesced(output_lists, inputs,
                                                         _opts(opts, "AllgatherOptions")))

    def _allgather_base(self, output, inp, opts=None):
        return _torch_work(self._ops.allgather_into_tensor([output], [inp],
                                                           _opts(opts, "AllgatherOptions")))

    all_gather_single = _allgather_base

    def allgather_into_tensor_coalesced(self, outputs, inputs, opts=None):
        return _torch_work(self._ops.allgather_into_tensor_coalesced(outputs, inputs,
                                                         _opts(opts, "AllgatherOptions")))

    all_gather_single_coalesced = allgather_into_tensor_coalesced

    def alltoall_base(self, output, inp, output_splits, input_splits, opts=None):
        return _torch_work(self._ops.all_to_all_single(output, inp, output_splits, input_splits,
                                           _opts(opts, "AllToAllOptions")))

    all_to_all_single = alltoall_base

    def alltoall(self, outputs, inputs, opts=None):
        return _torch_work(self._ops.alltoall(outputs, inputs, _opts(opts, "AllToAllOptions")))

    def gather(self, output_lists, inputs, opts=None):
        return _torch_work(self._ops.gather(output_lists, inputs, _opts(opts, "GatherOptions")))

    def scatter(self, outputs, input_lists, opts=None):
        return _torch_work(self._ops.scatter(outputs, input_lists, _opts(opts, "ScatterOptions")))

    def barrier(self, opts=None):
        return _torch_work(self._ops.barrier(opts))

    # ---- what the engine has not ----

    def send(self, tensors, dst, tag=0):
        return self._ops.point_to_point("send")

    def recv(self, tensors, src, tag=0):
        return self._ops.point_to_point("recv")

    def recv_anysource(self, tensors, tag=0):
        return self._ops.point_to_point("recv_anysource")

    # ---- FSDP2's buffers ----

    def supports_tensor_alloc(self, device):
        return torch.device(device).type == "cpu"

    def allocate_tensor(self, size, *, dtype, device):
        """A 1-D tensor of `size` elements; on the CPU a block of this rank's arena, which every
        op takes where it lies (no staging copy). Freed with its last reference; moved into
        ordinary memory if the session ends first."""
        device = torch.device(device)
        if device.type != "cpu" or dtype not in mpi_ops._DTYPES or size == 0:
            return torch.empty(size, dtype=dtype, device=device)
        return mpi_ops.arena_empty((int(size),), dtype)
