"""CUDA tensors to the sidecar without a host copy.

A tensor travels as the CUDA IPC handle of the allocation it lies in (PyTorch's caching allocator
hands out blocks of larger allocations), the allocation's base and size, and the tensor's offset
in it; an interprocess event recorded on the tensor's current stream orders its producer before
the collective. The sidecar maps each allocation once (docs/adr/0013). The handles come from the
CUDA driver API through ctypes, so the extension links no CUDA library and a CPU-only install
never loads one.

Memory without a legacy IPC handle (cuMemCreate: PyTorch's expandable segments) is exported
instead: each physical piece the tensor spans as a POSIX file descriptor, sent once to the sidecar
on its memory channel under an export id that the op then names (docs/adr/0013). The pieces stay
retained here while they are cached, so a handle value cannot be reused by another allocation
while an export id still names it.
"""

import ctypes
import itertools
import os
import threading
import weakref

import torch

_driver = None
_uuids = {}

# DeviceBufferRecord::handle_kind (sidecar/arena/arena_layout.h).
HANDLE_IPC = 0
HANDLE_EXPORTED = 1
_CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE = 10
_CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES = 14
_CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE = 17
_CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR = 1
_MAX_PIECES = 32  # kMaxMemoryFdsPerMessage

_exports_lock = threading.Lock()
# Per client (session): (device, first piece's base) -> (pieces, export id). A new client (a new
# session) sends its pieces again.
_exports = weakref.WeakKeyDictionary()
_export_ids = itertools.count(1)


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


def _attribute(lib, ctype, attribute, ptr):
    """A pointer attribute, or None where this driver does not know it."""
    value = ctype()
    rc = lib.cuPointerGetAttribute(ctypes.byref(value), attribute, ctypes.c_uint64(ptr))
    return value.value if rc == 0 else None


def _address_range(lib, ptr):
    base = ctypes.c_uint64()
    size = ctypes.c_size_t()
    _check(lib.cuMemGetAddressRange_v2(ctypes.byref(base), ctypes.byref(size),
                                       ctypes.c_uint64(ptr)), "cuMemGetAddressRange")
    return base.value, size.value


def buffer_ref(tensor, client=None):
    """(handle, allocation base, allocation size, the tensor's offset, handle kind) of a contiguous
    CUDA tensor: the allocation's legacy IPC handle, or for memory that has none (expandable
    segments) an export id whose pieces were sent to `client`'s sidecar first. IPC handles are not
    cached: an allocation freed and made again at the same address has a new handle."""
    lib = _lib()
    ptr = tensor.data_ptr()
    with torch.cuda.device(tensor.device):
        legacy = _attribute(lib, ctypes.c_int, _CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, ptr)
        if legacy == 0:
            return _exported_ref(lib, tensor, ptr, client)
        base, size = _address_range(lib, ptr)
        handle = (ctypes.c_char * 64)()
        _check(lib.cuIpcGetMemHandle(handle, ctypes.c_uint64(base)), "cuIpcGetMemHandle")
    return bytes(handle), base, size, ptr - base, HANDLE_IPC


def _refuse_pool(lib, ptr):
    """cudaMallocAsync's pools: their pointers have no IPC handle and no exportable piece."""
    pool = _attribute(lib, ctypes.c_void_p, _CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, ptr)
    if pool:
        raise RuntimeError(
            "korovod: this CUDA tensor comes from a cudaMallocAsync memory pool "
            "(PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync), which the sidecar cannot map: "
            "the device's default pool is not exportable. Use PyTorch's native allocator "
            "(backend:native, the default), with or without expandable_segments:True")


def _pieces(lib, ptr, nbytes):
    """The physical pieces [(base, size)] that [ptr, ptr + nbytes) spans: an expandable segment
    maps one per granule (2 MiB or 20 MiB) back to back."""
    pieces = []
    end = ptr + max(nbytes, 1)
    at = ptr
    while at < end:
        base, size = _address_range(lib, at)
        pieces.append((base, size))
        at = base + size
        if len(pieces) > _MAX_PIECES:
            raise RuntimeError(
                "korovod: a CUDA tensor of %d bytes spans more than %d pieces of an expandable "
                "segment; the sidecar maps at most %d per allocation" % (nbytes, _MAX_PIECES,
                                                                         _MAX_PIECES))
    return pieces


def _retain(lib, base):
    handle = ctypes.c_uint64()
    _check(lib.cuMemRetainAllocationHandle(ctypes.byref(handle), ctypes.c_uint64(base)),
           "cuMemRetainAllocationHandle")
    return handle.value


def _export_fd(lib, handle, base):
    fd = ctypes.c_int(-1)
    rc = lib.cuMemExportToShareableHandle(ctypes.byref(fd), ctypes.c_uint64(handle),
                                          _CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                                          ctypes.c_ulonglong(0))
    if rc != 0:
        allowed = _attribute(lib, ctypes.c_uint64, _CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES, base)
        raise RuntimeError(
            "korovod: cannot export a CUDA allocation without an IPC handle as a file descriptor "
            "(cuMemExportToShareableHandle: CUDA driver error %d; allowed handle types %s). "
            "It was made without CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR: with PyTorch, use "
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True with a build that requests that "
            "handle type (Linux builds do), or expandable_segments:False (legacy IPC handles)"
            % (rc, "unknown" if allowed is None else hex(allowed)))
    return fd.value


def _exported_ref(lib, tensor, ptr, client):
    _refuse_pool(lib, ptr)
    if client is None:
        raise RuntimeError("korovod: CUDA memory without an IPC handle needs the sidecar client")
    nbytes = tensor.numel() * tensor.element_size()
    spans = _pieces(lib, ptr, nbytes)
    handles = [_retain(lib, b) for b, _ in spans]
    pieces = tuple((b, s, h) for (b, s), h in zip(spans, handles))
    key = (tensor.device.index, spans[0][0])
    with _exports_lock:
        cache = _exports.setdefault(client, {})
        known = cache.get(key)
        if known is not None and known[0] == pieces:
            for h in handles:  # this cache's own retain is already held
                lib.cuMemRelease(ctypes.c_uint64(h))
            export_id = known[1]
        else:
            export_id = next(_export_ids)
            fds = []
            try:
                fds = [_export_fd(lib, h, b) for b, _, h in pieces]
                client.send_device_memory([(export_id, [s for _, s, _ in pieces])], fds)
            except BaseException:
                for h in handles:
                    lib.cuMemRelease(ctypes.c_uint64(h))
                raise
            finally:
                for fd in fds:
                    os.close(fd)
            if known is not None:  # a new allocation where the old one was: let the old go
                for _, _, h in known[0]:
                    lib.cuMemRelease(ctypes.c_uint64(h))
            cache[key] = (pieces, export_id)
    handle = export_id.to_bytes(8, "little") + bytes(56)
    base = spans[0][0]
    return handle, base, sum(s for _, s in spans), ptr - base, HANDLE_EXPORTED


def ready_event(tensor):
    """An interprocess event recorded now on the tensor's current stream: the collective starts once
    the work queued before it (the tensor's producer) is done. Keep it until the op completes."""
    event = torch.cuda.Event(interprocess=True)
    event.record(torch.cuda.current_stream(tensor.device))
    return event
