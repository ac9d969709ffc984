"""What a torch tensor and a torch ReduceOp become on the engine: the engine's dtype and
reduction op, FP8 and other dtypes the engine has no arithmetic for sent as bytes where the op
only moves them, complex tensors reduced as their real pairs, DTensors unwrapped to their local
shard."""
import torch
import torch.distributed as dist

from korovod.reduce_ops import Average, Max, Min, Product, Sum
from korovod.torch.mpi_ops import _DTYPES
from korovod.session import _client

_RED = dist.ReduceOp.RedOpType if hasattr(dist.ReduceOp, "RedOpType") else dist.ReduceOp
_OPS = {_RED.SUM: Sum, _RED.AVG: Average, _RED.MIN: Min, _RED.MAX: Max, _RED.PRODUCT: Product}
_BITWISE = {_RED.BAND: "BAND", _RED.BOR: "BOR", _RED.BXOR: "BXOR"}
_FP8 = tuple(getattr(torch, n) for n in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz",
                                         "float8_e5m2fnuz", "float8_e8m0fnu")
             if hasattr(torch, n))


class Refused(Exception):
    """An argument the backend refuses: the message says why (the caller names the op)."""


def local(tensor):
    """A DTensor's local shard (the tensor this rank holds), any other tensor itself."""
    if hasattr(tensor, "_local_tensor") and type(tensor).__name__ == "DTensor":
        return tensor._local_tensor
    return tensor


def engine_op(reduce_op, dtype):
    """(engine op, prescale factor) for a torch ReduceOp; Refused for what the engine cannot
    reduce (bitwise ops, FP8)."""
    kind = getattr(reduce_op, "op", reduce_op)
    if kind in _BITWISE:
        raise Refused("the korovod engine has no bitwise reductions (ReduceOp.%s)" %
                      _BITWISE[kind])
    if dtype in _FP8:
        raise Refused("the korovod engine cannot reduce %s (FP8 goes through allgather, "
                      "broadcast and all_to_all only, as bytes)" % dtype)
    if kind == _RED.PREMUL_SUM:
        factor = getattr(reduce_op, "factor", None)
        if factor is None:
            raise Refused("ReduceOp.PREMUL_SUM without a readable factor on torch %s" %
                          torch.__version__)
        return Sum, float(factor)
    if kind not in _OPS:
        raise Refused("unknown reduction %r" % (reduce_op,))
    return _OPS[kind], 1.0


def reducible(tensor):
    """(tensor as the engine reduces it, engine dtype): complex as its real pairs."""
    t = tensor
    if t.is_complex():
        t = torch.view_as_real(t)
    if t.dtype not in _DTYPES:
        raise Refused("the korovod engine cannot reduce %s" % tensor.dtype)
    return t, _DTYPES[t.dtype]


def movable(tensor):
    """(contiguous tensor as the engine moves it, engine dtype): a dtype the engine has no name for
    (FP8, complex, uint32, ...) goes as its bytes, flattened to one dimension of bytes per
    element-row so that dimension 0 is kept."""
    t = tensor if tensor.is_contiguous() else tensor.contiguous()
    if t.dtype in _DTYPES:
        return t, _DTYPES[t.dtype]
    d0 = t.shape[0] if t.dim() else 1
    if t.numel() == 0:
        return torch.empty((d0, 0), dtype=torch.uint8, device=t.device), _client.DataType.uint8
    return t.reshape(d0, -1).view(torch.uint8), _client.DataType.uint8


def check_device(tensor):
    if tensor.device.type not in ("cpu", "cuda"):
        raise Refused("tensors on %s (korovod takes CPU and CUDA tensors)" % tensor.device)
    if tensor.is_sparse:
        raise Refused("sparse tensors (allgather their indices and values instead)")
