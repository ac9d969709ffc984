"""Horovod's torch collectives over the korovod sidecar client (korovod._client)."""
import atexit
import os
import threading

import torch

from korovod import _client

Average = _client.AVERAGE
Sum = _client.SUM
Min = _client.MIN
Max = _client.MAX
Product = _client.PRODUCT
Adasum = None  # not supported by korovod

_DTYPES = {
    torch.uint8: _client.DataType.uint8,
    torch.int8: _client.DataType.int8,
    torch.int32: _client.DataType.int32,
    torch.int64: _client.DataType.int64,
    torch.float16: _client.DataType.float16,
    torch.bfloat16: _client.DataType.bfloat16,
    torch.float32: _client.DataType.float32,
    torch.float64: _client.DataType.float64,
}

_lock = threading.Lock()
_client_obj = None
_handles = {}  # int -> (ClientHandle, finish(ClientHandle) -> result)
_next_handle = 0


class ProcessSet:
    """A set of ranks that collectives may be restricted to (process_set=...)."""

    def __init__(self, ranks_or_comm=None):
        self.ranks = None if ranks_or_comm is None else sorted(int(r) for r in ranks_or_comm)
        self.process_set_id = None

    def _id(self):
        if self.process_set_id is None:
            raise ValueError("process set not registered: call hvd.add_process_set first")
        return self.process_set_id

    def size(self):
        return len(self.ranks) if self.ranks is not None else size()

    def rank(self):
        r = rank()
        if self.ranks is None:
            return r
        return self.ranks.index(r) if r in self.ranks else -1

    def included(self):
        return self.ranks is None or rank() in self.ranks

    def __repr__(self):
        return "ProcessSet(process_set_id=%s, ranks=%s)" % (self.process_set_id, self.ranks)


global_process_set = ProcessSet()
global_process_set.process_set_id = 0


def init(comm=None, process_sets=None):
    """Connects to this rank's sidecar (KOROVOD_SOCKET, set by korovodrun or the operator)."""
    global _client_obj
    with _lock:
        if _client_obj is not None:
            return
        path = os.environ.get("KOROVOD_SOCKET")
        if not path:
            raise RuntimeError("korovod: not started by korovodrun (KOROVOD_SOCKET unset)")
        timeout = float(os.environ.get("KOROVOD_CONNECT_TIMEOUT", "60"))
        _client_obj = _client.Client.connect(path, timeout)
        global_process_set.ranks = list(range(_client_obj.size))
    for ps in process_sets or []:
        add_process_set(ps)


def shutdown():
    """Waits for nothing and detaches from the sidecar; ops in flight are abandoned."""
    global _client_obj
    with _lock:
        _handles.clear()
        _client_obj = None


atexit.register(shutdown)


def is_initialized():
    return _client_obj is not None


def _c():
    c = _client_obj
    if c is None:
        raise ValueError("korovod has not been initialized; use hvd.init().")
    return c


def rank():
    return _c().rank


def size():
    return _c().size


def local_rank():
    return _c().local_rank


def local_size():
    return _c().local_size


def cross_rank():
    return _c().cross_rank


def cross_size():
    return _c().cross_size


def is_homogeneous():
    return True


def mpi_threads_supported():
    return False


def mpi_enabled():
    return False


def mpi_built():
    return False


def gloo_enabled():
    return False


def gloo_built():
    return False


def nccl_built():
    return 0


def ddl_built():
    return False


def ccl_built():
    return False


def cuda_built():
    return False


def rocm_built():
    return False


def add_process_set(process_set):
    """Registers a process set (a ProcessSet or a list of ranks) on every rank (collective)."""
    ps = process_set if isinstance(process_set, ProcessSet) else ProcessSet(process_set)
    ps.process_set_id = _c().add_process_set(ps.ranks)
    return ps


def remove_process_set(process_set):
    raise NotImplementedError("korovod: remove_process_set is not supported")


def start_timeline(file_path, mark_cycles=False):
    _c().start_timeline(file_path, mark_cycles)


def stop_timeline():
    _c().stop_timeline()


def _dtype(tensor):
    if tensor.device.type != "cpu":
        raise ValueError("korovod: only CPU tensors are supported (got %s)" % tensor.device)
    try:
        return _DTYPES[tensor.dtype]
    except KeyError:
        raise ValueError("korovod: unsupported dtype %s" % tensor.dtype) from None


def _register(h, finish):
    global _next_handle
    with _lock:
        _next_handle += 1
        _handles[_next_handle] = (h, finish)
        return _next_handle


def poll(handle):
    """True when the op behind `handle` has completed (synchronize() will not block)."""
    with _lock:
        entry = _handles.get(handle)
    if entry is None:
        raise ValueError("korovod: unknown handle %r" % (handle,))
    return entry[0].poll()


def synchronize(handle):
    """Waits for the async op and returns its output (releases the handle)."""
    with _lock:
        entry = _handles.pop(handle, None)
    if entry is None:
        raise ValueError("korovod: unknown handle %r" % (handle,))
    h, finish = entry
    h.wait()
    return finish(h)


def _op(op, average):
    if op is not None and average is not None:
        raise ValueError("korovod: pass either op or average, not both")
    if average is not None:
        return Average if average else Sum
    if op is None:
        return Average
    if op is Adasum:
        raise NotImplementedError("korovod: Adasum is not supported")
    return op


def _psid(process_set):
    return 0 if process_set is None else process_set._id()


_auto_names = {}


def _auto_name(kind, process_set):
    """Names unnamed ops by a counter per (kind, process set): ranks outside a process set
    then stay in step with its members."""
    psid = _psid(process_set)
    with _lock:
        n = _auto_names.get((kind, psid), 0)
        _auto_names[(kind, psid)] = n + 1
    return "%s.noname.ps%d.%d" % (kind, psid, n)


def _name(name, kind="op", process_set=None):
    return _auto_name(kind, process_set) if name is None else str(name)


# ---- allreduce ----

def _allreduce_into(tensor, output, name, op, prescale, postscale, process_set):
    """Starts an allreduce of `tensor` into `output` (both contiguous, same shape/dtype)."""
    h = _c().allreduce(tensor.data_ptr(), output.data_ptr(), _dtype(tensor), list(tensor.shape),
                       _name(name, "allreduce", process_set), op, float(prescale),
                       float(postscale), _psid(process_set))
    return h


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                     postscale_factor=1.0, process_set=global_process_set):
    op = _op(op, average)
    if tensor.is_contiguous():
        buf = tensor
        def finish(h, t=tensor):
            return t
    else:
        buf = tensor.contiguous()
        def finish(h, t=tensor, b=buf):
            t.copy_(b)
            return t
    h = _allreduce_into(buf, buf, name, op, prescale_factor, postscale_factor, process_set)
    return _register(h, finish)


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                    postscale_factor=1.0, process_set=global_process_set):
    op = _op(op, average)
    src = tensor.detach().contiguous()
    out = torch.empty_like(src, memory_format=torch.contiguous_format)
    h = _allreduce_into(src, out, name, op, prescale_factor, postscale_factor, process_set)
    return _register(h, lambda h, s=src, o=out: o)


def allreduce(tensor, average=None, name=None, compression=None, op=None,
              prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    from korovod.torch.compression import Compression
    compression = compression or Compression.none
    compressed, ctx = compression.compress(tensor)
    out = synchronize(allreduce_async(compressed, average, name, op, prescale_factor,
                                      postscale_factor, process_set))
    return compression.decompress(out, ctx)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
               postscale_factor=1.0, process_set=global_process_set):
    return synchronize(allreduce_async_(tensor, average, name, op, prescale_factor,
                                        postscale_factor, process_set))


def _check_group(tensors):
    if not tensors:
        raise ValueError("korovod: empty tensor list")
    dt = tensors[0].dtype
    if any(t.dtype != dt for t in tensors):
        raise ValueError("korovod: grouped allreduce needs tensors of one dtype")


class _GroupHandle:
    """The member handles of one grouped allreduce, polled and waited on as one handle."""

    def __init__(self, handles):
        self._handles = handles

    def poll(self):
        return all(h.poll() for h in self._handles)

    def wait(self):
        # Every member is waited for before an error is raised: until then the sidecar may still
        # copy a result into a member's tensor.
        error = None
        for h in self._handles:
            try:
                h.wait()
            except RuntimeError as e:
                error = error or e
        if error is not None:
            raise error


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                             postscale_factor=1.0, process_set=global_process_set):
    """Starts one grouped allreduce: the sidecar hands the tensors to the engine as one group,
    negotiated and fused together (Horovod's grouped_allreduce)."""
    _check_group(tensors)
    op = _op(op, average)
    bufs = [t if t.is_contiguous() else t.contiguous() for t in tensors]
    base = _name(name, "grouped_allreduce", process_set)
    names = ["%s.%d" % (base, i) for i in range(len(bufs))]
    hs = _c().grouped_allreduce([b.data_ptr() for b in bufs], [b.data_ptr() for b in bufs],
                                [list(b.shape) for b in bufs], names, _dtype(bufs[0]), op,
                                float(prescale_factor), float(postscale_factor),
                                _psid(process_set))
    def finish_all(_h, ts=tensors, bs=bufs):
        for t, b in zip(ts, bs):
            if t is not b:
                t.copy_(b)
        return list(ts)
    return _register(_GroupHandle(hs), finish_all)


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                            postscale_factor=1.0, process_set=global_process_set):
    outs = [t.detach().clone(memory_format=torch.contiguous_format) for t in tensors]
    return grouped_allreduce_async_(outs, average, name, op, prescale_factor, postscale_factor,
                                    process_set)


def grouped_allreduce(tensors, average=None, name=None, compression=None, op=None,
                      prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    from korovod.torch.compression import Compression
    compression = compression or Compression.none
    pairs = [compression.compress(t) for t in tensors]
    outs = synchronize(grouped_allreduce_async([p[0] for p in pairs], average, name, op,
                                               prescale_factor, postscale_factor, process_set))
    return [compression.decompress(o, p[1]) for o, p in zip(outs, pairs)]


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                       postscale_factor=1.0, process_set=global_process_set):
    return synchronize(grouped_allreduce_async_(tensors, average, name, op, prescale_factor,
                                                postscale_factor, process_set))


# ---- ops with outputs of size known at completion ----

def _result_tensor(h, dtype):
    out = torch.empty(list(h.shape), dtype=dtype)
    h.copy_output(out.data_ptr(), out.numel() * out.element_size())
    return out


def allgather_async(tensor, name=None, process_set=global_process_set):
    src = tensor.detach().contiguous()
    h = _c().allgather(src.data_ptr(), _dtype(src), list(src.shape),
                       _name(name, "allgather", process_set), _psid(process_set))
    return _register(h, lambda h, s=src: _result_tensor(h, s.dtype))


def allgather(tensor, name=None, process_set=global_process_set):
    """Concatenates every rank's tensor along dimension 0 (first dimensions may differ)."""
    return synchronize(allgather_async(tensor, name, process_set))


def grouped_allgather(tensors, name=None, process_set=global_process_set):
    hs = [allgather_async(t, "%s.%d" % (name, i) if name else None, process_set)
          for i, t in enumerate(tensors)]
    return [synchronize(h) for h in hs]


def broadcast_async_(tensor, root_rank, name=None, process_set=global_process_set):
    buf = tensor if tensor.is_contiguous() else tensor.contiguous()
    h = _c().broadcast(buf.data_ptr(), _dtype(buf), list(buf.shape), int(root_rank),
                       _name(name, "broadcast", process_set), _psid(process_set))
    def finish(h, t=tensor, b=buf):
        if t is not b:
            t.copy_(b)
        return t
    return _register(h, finish)


def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set):
    out = tensor.detach().clone(memory_format=torch.contiguous_format)
    return broadcast_async_(out, root_rank, name, process_set)


def broadcast_(tensor, root_rank, name=None, process_set=global_process_set):
    return synchronize(broadcast_async_(tensor, root_rank, name, process_set))


def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    return synchronize(broadcast_async(tensor, root_rank, name, process_set))


def alltoall_async(tensor, splits=None, name=None, process_set=global_process_set):
    src = tensor.detach().contiguous()
    if splits is None:
        n = process_set.size() if process_set is not None else size()
        if src.dim() == 0 or src.shape[0] % n:
            raise ValueError("korovod: alltoall without splits needs dim 0 divisible by size")
        split_list = [src.shape[0] // n] * n
    else:
        split_list = [int(s) for s in (splits.tolist() if torch.is_tensor(splits) else splits)]
    h = _c().alltoall(src.data_ptr(), _dtype(src), list(src.shape), split_list,
                      _name(name, "alltoall", process_set), _psid(process_set))
    def finish(h, s=src, with_splits=splits is not None):
        out = _result_tensor(h, s.dtype)
        if with_splits:
            return out, torch.tensor(list(h.received_splits), dtype=torch.int32)
        return out
    return _register(h, finish)


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """Scatters slices of dim 0 (by `splits`) to the ranks; returns what this rank received
    (and, when `splits` is given, the received splits)."""
    return synchronize(alltoall_async(tensor, splits, name, process_set))


def reducescatter_async(tensor, name=None, op=Average, process_set=global_process_set,
                        prescale_factor=1.0, postscale_factor=1.0):
    src = tensor.detach().contiguous()
    h = _c().reducescatter(src.data_ptr(), _dtype(src), list(src.shape),
                           _name(name, "reducescatter", process_set), op,
                           float(prescale_factor), float(postscale_factor), _psid(process_set))
    return _register(h, lambda h, s=src: _result_tensor(h, s.dtype))


def reducescatter(tensor, name=None, compression=None, op=Average,
                  process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0):
    from korovod.torch.compression import Compression
    compression = compression or Compression.none
    compressed, ctx = compression.compress(tensor)
    out = synchronize(reducescatter_async(compressed, name, op, process_set, prescale_factor,
                                          postscale_factor))
    return compression.decompress(out, ctx)


def barrier(process_set=global_process_set):
    _c().barrier(_psid(process_set), _name(None, "barrier", process_set)).wait()


def join(device=-1):
    """Blocks until every rank has joined; returns the rank that joined last."""
    h = _c().join(0, _name(None, "join", global_process_set))
    h.wait()
    return h.last_joined_rank
