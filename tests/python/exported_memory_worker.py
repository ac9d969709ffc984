"""Device memory without an IPC handle through the Python client, on the host device
(KOROVOD_DEVICE_BACKEND=host; no GPU): each rank's "allocation" is two memfds mapped back to back
(an expandable segment's pieces), sent to the sidecar with send_device_memory and named by export
id (handle kind 1) in device_allreduce and device_broadcast, which write the results where the
tensor lies. A wrong tuple and an unsent export id fail by name. Prints "[r] rank r OK"."""

import ctypes
import mmap
import os
import struct

import korovod.torch as hvd
from korovod.session import _c as session_client
from korovod import _client as ext

PAGE = mmap.PAGESIZE
PIECE = 4 * PAGE
HANDLE_EXPORTED = 1

libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                      ctypes.c_long]
PROT_NONE, PROT_RW = 0, 3
MAP_SHARED, MAP_PRIVATE, MAP_FIXED, MAP_ANONYMOUS = 0x01, 0x02, 0x10, 0x20


def segment(pieces):
    """`pieces` memfds of PIECE bytes mapped back to back: (their fds, the view's address)."""
    fds = []
    for _ in range(pieces):
        fd = os.memfd_create("korovod-test-piece")
        os.ftruncate(fd, PIECE)
        fds.append(fd)
    base = libc.mmap(None, pieces * PIECE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
    assert base not in (None, ctypes.c_void_p(-1).value), ctypes.get_errno()
    for i, fd in enumerate(fds):
        at = libc.mmap(base + i * PIECE, PIECE, PROT_RW, MAP_SHARED | MAP_FIXED, fd, 0)
        assert at == base + i * PIECE, ctypes.get_errno()
    return fds, base


def ref(export_id, base, nbytes, offset):
    return (export_id.to_bytes(8, "little") + bytes(56), base, nbytes, offset, HANDLE_EXPORTED)


def main():
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    c = session_client()
    uuid = b"kvhostdevice" + bytes(3) + bytes([rank])  # HostDeviceApi's device `rank`
    fds, base = segment(2)
    c.send_device_memory([(1, [PIECE, PIECE])], fds)
    for fd in fds:
        os.close(fd)  # the sidecar holds its own copies now
    n = PIECE // 4  # a tensor spanning both pieces: PIECE bytes from the middle of the first
    offset = PIECE // 2
    floats = (ctypes.c_float * n).from_address(base + offset)
    for step in range(2):
        for i in range(n):
            floats[i] = rank + step + i % 7
        t = ref(1, base, 2 * PIECE, offset)
        c.device_allreduce(uuid, t, t, ext.DataType.float32, [n], None, "seg.grad").wait(60)
        total = sum(r + step for r in range(size))
        for i in (0, n // 2, n - 1):
            assert floats[i] == total + size * (i % 7), (step, i, floats[i])
    for i in range(16):
        floats[i] = 100 * rank + i
    t = ref(1, base, 2 * PIECE, offset)
    c.device_broadcast(uuid, t, ext.DataType.float32, [16], 1, None, "seg.weights").wait(60)
    assert [floats[i] for i in (0, 15)] == [100.0, 115.0], list(floats[:16])
    # The 4-item tuple (a legacy IPC handle) still parses; an unsent export id fails by name.
    try:
        c.device_allreduce(uuid, ref(99, base, 2 * PIECE, 0), ref(99, base, 2 * PIECE, 0),
                           ext.DataType.float32, [4], None, "unsent").wait(60)
        raise AssertionError("an unsent export id was accepted")
    except RuntimeError as e:
        assert "no file descriptors were received for export id 99" in str(e), e
    try:
        c.device_allreduce(uuid, (b"x" * 64, base), ref(1, base, 2 * PIECE, 0),
                           ext.DataType.float32, [4], None, "short")
        raise AssertionError("a 2-item device buffer was accepted")
    except ValueError as e:
        assert "(handle, base, bytes, offset[, kind])" in str(e), e
    print("[%d] rank %d OK" % (rank, rank), flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
