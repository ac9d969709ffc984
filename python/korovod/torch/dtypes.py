"""torch dtypes as the engine's DataType: which tensors each op takes, and what the refusals say.

FP8 (torch >= 2.1's float8_* and the packed float4_e2m1fn_x2, one byte per element) has no
engine type and no arithmetic there: the ops that only move data (allgather, broadcast,
alltoall) send such a tensor as its bytes (uint8, same shape, so rows and splits are unchanged)
and the result comes back in the tensor's own dtype; a reduction refuses it, naming the dtype.
"""
import torch

from korovod.session import _client

DTYPES = {
    torch.uint8: _client.DataType.uint8,
    torch.int8: _client.DataType.int8,
    torch.int32: _client.DataType.int32,
    torch.int64: _client.DataType.int64,
    torch.float16: _client.DataType.float16,
    torch.bfloat16: _client.DataType.bfloat16,
    torch.float32: _client.DataType.float32,
    torch.float64: _client.DataType.float64,
    torch.int16: _client.DataType.int16,
    torch.bool: _client.DataType.bool,
}
if hasattr(torch, "uint16"):  # torch >= 2.3
    DTYPES[torch.uint16] = _client.DataType.uint16

# The one-byte float formats this torch has (none on 1.13).
BYTE_DTYPES = frozenset(
    getattr(torch, n) for n in ("float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2",
                                "float8_e5m2fnuz", "float8_e8m0fnu", "float4_e2m1fn_x2")
    if hasattr(torch, n))


def _check_device(tensor):
    if tensor.device.type not in ("cpu", "cuda"):
        raise ValueError("korovod: tensors on %s are not supported (CPU and CUDA tensors are)" %
                         tensor.device)


def engine_dtype(tensor, kind=None, name=None):
    """The engine's DataType for a tensor an op reduces (or any op where FP8 is not taken).
    ValueError naming the dtype, and the op and tensor when given, for any other dtype."""
    _check_device(tensor)
    try:
        return DTYPES[tensor.dtype]
    except KeyError:
        pass
    what = "" if kind is None else " for %s%s" % (kind, "" if name is None else " of %r" % name)
    if tensor.dtype in BYTE_DTYPES:
        raise ValueError("korovod: unsupported dtype %s%s: the engine does not reduce FP8 "
                         "tensors (allgather, broadcast and alltoall send them as bytes); "
                         "reduce a wider dtype, e.g. tensor.to(torch.bfloat16)" %
                         (tensor.dtype, what))
    raise ValueError("korovod: unsupported dtype %s%s" % (tensor.dtype, what))


def moved_dtype(tensor, kind=None, name=None):
    """The engine's DataType for a tensor an op only moves (allgather, broadcast, alltoall): an
    FP8 tensor goes as uint8, its bytes unchanged."""
    _check_device(tensor)
    if tensor.dtype in BYTE_DTYPES:
        return _client.DataType.uint8
    return engine_dtype(tensor, kind, name)
