"""CUDA tensors to the sidecar without a host copy.

A tensor travels as the CUDA IPC handle of the allocation it lies in (PyTorch's caching allocator
hands out blocks of larger allocations), the allocation's base and size, and the tensor's offset
in it; an interprocess event recorded on the tensor's current stream orders its producer before
the collective. The sidecar maps each allocation once (docs/adr/0013). The handles come from the
CUDA driver API through ctypes, so the extension links no CUDA library and a CPU-only install
never loads one.
"""

import ctypes

import torch

_driver = None
_uuids = {}


def _lib():
    global _driver
    if _driver is None:
        try:
            _driver = ctypes.CDLL("libcuda.so.1")
        except OSError as e:
            raise RuntimeError("korovod: CUDA tensors need the CUDA driver (libcuda.so.1): %s" % e)
        _check(_driver.cuInit(0), "cuInit")
    return _driver


def _check(rc, what):
    if rc != 0:
        name = ctypes.c_char_p()
        if _driver is not None:
            _driver.cuGetErrorName(rc, ctypes.byref(name))
        raise RuntimeError("korovod: %s failed: CUDA driver error %d (%s)" %
                           (what, rc, name.value.decode() if name.value else "?"))


def device_uuid(ordinal):
    """The device's 16-byte UUID: the sidecar finds the same device by it, whatever
    CUDA_VISIBLE_DEVICES each process has."""
    if ordinal not in _uuids:
        lib = _lib()
        dev = ctypes.c_int()
        _check(lib.cuDeviceGet(ctypes.byref(dev), ordinal), "cuDeviceGet")
        uuid = (ctypes.c_char * 16)()
        _check(lib.cuDeviceGetUuid(uuid, dev), "cuDeviceGetUuid")
        _uuids[ordinal] = bytes(uuid)
    return _uuids[ordinal]


def buffer_ref(tensor):
    """(IPC handle of the allocation, its base, its size, the tensor's offset) of a contiguous CUDA
    tensor. Not cached: an allocation freed and made again at the same address has a new handle."""
    lib = _lib()
    ptr = tensor.data_ptr()
    base = ctypes.c_uint64()
    size = ctypes.c_size_t()
    with torch.cuda.device(tensor.device):
        _check(lib.cuMemGetAddressRange_v2(ctypes.byref(base), ctypes.byref(size),
                                           ctypes.c_uint64(ptr)), "cuMemGetAddressRange")
        handle = (ctypes.c_char * 64)()
        _check(lib.cuIpcGetMemHandle(handle, ctypes.c_uint64(base.value)), "cuIpcGetMemHandle")
    return bytes(handle), base.value, size.value, ptr - base.value


def ready_event(tensor):
    """An interprocess event recorded now on the tensor's current stream: the collective starts once
    the work queued before it (the tensor's producer) is done. Keep it until the op completes."""
    event = torch.cuda.Event(interprocess=True)
    event.record(torch.cuda.current_stream(tensor.device))
    return event
