"""Horovod's torch collectives over the korovod sidecar client (korovod._client)."""
import weakref

import torch

from korovod import session as _session
from korovod.reduce_ops import (  # noqa: F401
    Adasum, Average, Max, Min, Product, Sum, check_op as _check_op,
    handle_average_backwards_compatibility)
from korovod.session import _client
# The session (shared with korovod.tensorflow): Horovod's names for it live on here too.
from korovod.session import psid as _psid
from korovod.session import set_rank as _set_rank
from korovod.session import set_root as _set_root
from korovod.session import set_size as _set_size
from korovod.session import (  # noqa: F401
    ProcessSet, _c, _client_or_none, _env_true, _lock, _membership, add_process_set, ccl_built,
    cross_rank, cross_size, cuda_built, ddl_built, gloo_built, gloo_enabled, global_process_set,
    init, is_homogeneous, is_initialized, local_rank, local_size, mpi_built, mpi_enabled,
    mpi_threads_supported, nccl_built, rank, remove_process_set, rocm_built, shutdown, size,
    start_timeline, stop_timeline, sycl_built)
from korovod.exceptions import HorovodInternalError
from korovod.torch import cuda_ipc
from korovod.torch.compression import Compression
# _dtype: a dtype the engine reduces; _moved_dtype: also FP8, as bytes (allgather, broadcast,
# alltoall).
from korovod.torch.dtypes import DTYPES as _DTYPES
from korovod.torch.dtypes import engine_dtype as _dtype
from korovod.torch.dtypes import moved_dtype as _moved_dtype

_handles = {}  # int -> _Pending (None while being submitted); see poll/synchronize
_next_handle = 0


# ---- the arena ----
# A tensor whose memory is a block of this rank's arena (the shared memory the sidecar reads)
# reaches the engine where it lies: the client submits its arena offset instead of copying it into
# a staging block and the result back out. Any op detects it by its address; these allocate one.

_arena_tensors = weakref.WeakSet()  # handed out on arena blocks; moved off them at shutdown()


def _arena_tensor(block, shape, dtype):
    """A tensor of `shape` over `block` (an _client.ArenaBlock). Its storage holds the block, so
    the block goes back to the heap when the last tensor on it does."""
    numel = 1
    for d in shape:
        numel *= d
    flat = torch.frombuffer(block, dtype=dtype, count=numel)
    storage = flat.untyped_storage() if hasattr(flat, "untyped_storage") else flat.storage()
    # Built on the storage rather than as a view of `flat`: shutdown() can then move it with set_().
    t = torch.empty(0, dtype=dtype).set_(storage, 0, tuple(shape))
    _arena_tensors.add(t)
    return t


def arena_empty(shape, dtype=torch.float32):
    """An uninitialized CPU tensor whose memory is a block of this rank's arena: allreduce,
    broadcast and the other ops read it (and write an in-place result) where it lies, with no
    copy on the trainer side. Waits for heap space like an op does. The block is freed when the
    tensor (and every view of it) is gone; hvd.shutdown() moves the tensors this returned into
    ordinary memory."""
    shape = tuple(int(d) for d in (shape if isinstance(shape, (tuple, list, torch.Size))
                                   else (shape,)))
    if dtype not in _DTYPES:
        raise ValueError("korovod: unsupported dtype %s" % dtype)
    numel = 1
    for d in shape:
        numel *= d
    if numel == 0:  # nothing to share: an ordinary empty tensor
        return torch.empty(shape, dtype=dtype)
    nbytes = numel * torch.empty(0, dtype=dtype).element_size()
    return _arena_tensor(_c().allocate(nbytes), shape, dtype)


def arena_empty_like(tensor):
    return arena_empty(tensor.shape, tensor.dtype)


def arena_zeros_like(tensor):
    return arena_empty_like(tensor).zero_()


def is_arena_tensor(tensor):
    """Whether `tensor` is contiguous and its memory lies in this rank's arena (its ops then take
    no trainer-side copy)."""
    c = _client_or_none()
    if c is None or tensor.device.type != "cpu" or tensor.is_sparse or tensor.numel() == 0:
        return False
    return tensor.is_contiguous() and c.in_arena(tensor.data_ptr(),
                                                 tensor.numel() * tensor.element_size())


def _arena_copy(tensor, keep_free_fraction=0.5):
    """A copy of `tensor` in the arena, or None when it cannot be one (not a dense CPU tensor of
    a supported dtype) or the heap has no room to spare: the allocation never waits and leaves
    `keep_free_fraction` of the heap's capacity to the staging of other ops."""
    c = _client_or_none()
    if (c is None or tensor.device.type != "cpu" or tensor.is_sparse or tensor.numel() == 0 or
            tensor.dtype not in _DTYPES):
        return None
    nbytes = tensor.numel() * tensor.element_size()
    block = c.try_allocate(nbytes, int(c.client_heap_capacity * keep_free_fraction))
    if block is None:
        return None
    t = _arena_tensor(block, tensor.shape, tensor.dtype)
    with torch.no_grad():
        t.copy_(tensor)
    return t


def _staged_bytes():
    """What this rank's client copied between trainer memory and the arena since init(): a dict
    of staged_in_bytes, staged_out_bytes, staged_tensors and arena_tensors (submitted where they
    lie, no copy)."""
    return dict(_c().copy_stats())


def _move_off_arena():
    """Moves every tensor arena_empty() or the optimizer handed out into ordinary memory, so that
    none outlives the arena mapping (nor keeps the arena attached, which a later init() waits
    for)."""
    for t in list(_arena_tensors):
        with torch.no_grad():
            t.set_(t.clone())
    _arena_tensors.clear()


# ---- handles ----
# A handle is an int naming an op in flight (a _Pending) until synchronize() gives its result.
# Like Horovod's tensor queue, the names of unfinished ops are held per process set: a second op
# under the name of one still in flight is refused at submission (ValueError).


class _Pending:
    """An op in flight: its client handle, finish(handle) -> the result, and the
    (process set id, name) keys it holds."""
    __slots__ = ("handle", "finish", "keys")

    def __init__(self, handle, finish, keys):
        self.handle, self.finish, self.keys = handle, finish, keys


# An op hvd.shutdown() abandoned: its client handle (and with it the session's arena) is gone.
_ABANDONED = _Pending(None, None, ())

_names = {}  # (process set id, op name) -> the handle of the unfinished op holding it
# Ops started by a grouped call that failed part way: never synchronized, but the sidecar may
# still copy results into their tensors, so those stay referenced here.
_orphans = []


class _TorchSession(_session.SessionHooks):
    def before_close(self):
        # The ops of this session: they hold the client's arena, which stays attached (and a
        # later init() refused: "already has a client attached") until they go. An elastic
        # reset leaves them behind when an op failed before synchronize() (a DistributedOptimizer
        # step). Their handles stay known, abandoned: synchronize() raises HorovodInternalError.
        pending = [e for e in _handles.values() if e is not None] + list(_orphans)
        for hid in list(_handles):
            _handles[hid] = _ABANDONED
        _names.clear()
        _orphans.clear()
        return pending

    def after_close(self):
        # Arena tensors hold the arena mapping (and so the sidecar's session) until they die:
        # move them off it, as nothing will reduce them in place any more.
        _move_off_arena()


_session.on_session(_TorchSession())


def _name_free(key):
    """Under _lock. An op that has finished gives its name up even before synchronize(), as in
    Horovod (where a name is held until the op completes)."""
    hid = _names.get(key)
    if hid is None:
        return True
    entry = _handles.get(hid, False)
    if entry is None:  # still being submitted
        return False
    if entry is False or entry is _ABANDONED or entry.handle.poll():
        del _names[key]
        return True
    return False


def _release(keys, hid):
    """Under _lock: gives up the names `hid` holds."""
    for k in keys:
        if _names.get(k) == hid:
            del _names[k]


def _internal_error(e):
    return e if isinstance(e, HorovodInternalError) else HorovodInternalError(str(e))


def _start(names, process_set, submit, finish):
    """Starts one op: holds `names` in `process_set`, calls submit() -> client handle; returns the
    op's handle. Errors as in Horovod: ValueError for a name in flight, a rank outside the set or an
    invalid argument; HorovodInternalError when the sidecar refuses the op otherwise."""
    global _next_handle
    psid = _psid(process_set)
    if process_set is not None and process_set.included() is False:
        raise ValueError("korovod: rank %d is not a member of %s" % (rank(), process_set))
    keys = [(psid, n) for n in names]
    with _lock:
        if len(set(keys)) != len(keys):
            raise ValueError("korovod: one op names two tensors alike: %s" % names)
        for k in keys:
            if not _name_free(k):
                raise ValueError("korovod: an op named '%s' is already in flight (the names of "
                                 "unfinished ops must be unique)" % k[1])
        _next_handle += 1
        hid = _next_handle
        _handles[hid] = None
        _names.update((k, hid) for k in keys)
    try:
        h = submit()
    except BaseException as e:
        with _lock:
            _handles.pop(hid, None)
            _release(keys, hid)
        if type(e) is RuntimeError:  # from the client: the sidecar refused the op
            if str(e).startswith("INVALID_ARGUMENT"):
                raise ValueError(str(e)) from None
            raise HorovodInternalError(str(e)) from None
        raise
    with _lock:
        _handles[hid] = _Pending(h, finish, keys)
    return hid


def poll(handle):
    """True when the op behind `handle` has completed (synchronize() will not block)."""
    if isinstance(handle, (_SparseHandle, _SyncAll)):
        return handle.poll()
    with _lock:
        entry = _handles.get(handle)
    if entry is None:
        raise ValueError("korovod: handle %r was not created or has been cleared" % (handle,))
    if entry is _ABANDONED:
        return True  # synchronize() raises at once
    return entry.handle.poll()


def synchronize(handle):
    """Waits for the op behind `handle` and returns its output (Horovod: None for a handle that is
    unknown or already synchronized). A failed op raises HorovodInternalError."""
    if isinstance(handle, (_SparseHandle, _SyncAll)):
        return handle()
    with _lock:
        entry = _handles.get(handle)
    if entry is None:
        return None
    if entry is _ABANDONED:
        with _lock:
            _handles.pop(handle, None)
        raise HorovodInternalError("korovod: the op was abandoned by hvd.shutdown() (the session "
                                   "ended before it completed)")
    try:
        entry.handle.wait()
        return entry.finish(entry.handle)
    except RuntimeError as e:
        raise _internal_error(e) from None
    finally:
        with _lock:
            _handles.pop(handle, None)
            _release(entry.keys, handle)


# ---- reduction ops and names ----

_reduce_op = handle_average_backwards_compatibility


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


def _contiguous(tensor):
    t = tensor.detach()
    return t if t.is_contiguous() else t.contiguous()


def _host(tensor):
    """`tensor`'s data as a contiguous CPU tensor. Allreduce and broadcast take CUDA tensors where
    they lie (cuda_ipc); the other ops stage a CUDA tensor through host memory."""
    t = tensor.detach()
    if t.is_cuda:
        return t.to("cpu", memory_format=torch.contiguous_format)
    return t if t.is_contiguous() else t.contiguous()


def _like(result, tensor):
    """A host-staged op's result, on `tensor`'s device."""
    return result.to(tensor.device) if tensor.is_cuda else result


def _device_ref(tensor, keep):
    """cuda_ipc.buffer_ref of `tensor`; an empty tensor (no memory) stands on a one-element
    placeholder on its device, kept in `keep` until the op completes."""
    if tensor.numel() == 0:
        tensor = torch.empty(1, dtype=tensor.dtype, device=tensor.device)
        keep.append(tensor)
    return cuda_ipc.buffer_ref(tensor, _c())


def _one_device(kind, tensors):
    """The UUID of the device an op's tensors are on; ValueError unless all are CUDA tensors of
    one device."""
    devices = {t.get_device() for t in tensors}
    if len(devices) != 1 or not all(t.is_cuda for t in tensors):
        raise ValueError("korovod: %s of tensors on several devices (%s); one device per rank "
                         "(torch.cuda.set_device(hvd.local_rank()))" %
                         (kind, sorted(str(t.device) for t in tensors)))
    return cuda_ipc.device_uuid(devices.pop())


def _device_submit(kind, tensors, submit_one):
    """(ready events kept until the op completes, submit) for `submit_one(uuid, event_handle)`,
    once the op's tensors are checked to share one device."""
    uuid = _one_device(kind, tensors)
    events = []

    def submit():
        events.append(cuda_ipc.ready_event(tensors[0]))
        return submit_one(uuid, events[-1].ipc_handle())

    return events, submit


def _copy_back(dst, buf):
    """Copies an op's result from its contiguous buffer into `dst` when they are not the same
    memory (a non-contiguous dst); autograd does not see the copy, as with Horovod's C++ ops."""
    if buf.data_ptr() != dst.data_ptr() or buf.stride() != dst.stride():
        with torch.no_grad():
            dst.copy_(buf)
    return dst


class _GroupHandle:
    """The member handles of one grouped op, polled and waited on as one handle."""

    def __init__(self, handles):
        self.handles = handles

    def poll(self):
        return all(h.poll() for h in self.handles)

    def wait(self):
        # Every member is waited for before an error is raised: until then the sidecar may still
        # copy a result into a member's tensor.
        error = None
        for h in self.handles:
            try:
                h.wait()
            except RuntimeError as e:
                error = error or e
        if error is not None:
            raise error


def _start_each(submits, keep):
    """Calls each of `submits` (-> client handle) and returns the handles as one _GroupHandle. If
    one fails, those already started run on unsynchronized: `keep` (their tensors) stays alive."""
    handles = []
    try:
        for submit in submits:
            handles.append(submit())
    except BaseException:
        if handles:
            with _lock:
                _orphans.append((handles, keep))
        raise
    return _GroupHandle(handles)


def _group_names(name, kind, process_set, count):
    if count == 0:
        raise ValueError("korovod: a grouped %s of no tensors" % kind)
    base = _name(name, kind, process_set)
    return ["%s.%d" % (base, i) for i in range(count)]


# ---- allreduce ----

def _adasum_combine(a, b):
    """Adasum of two gradients (Maleki et al., as Horovod's adasum.h): each keeps the part not
    already along the other, so orthogonal gradients add and parallel ones average."""
    dot = torch.dot(a, b)
    anormsq, bnormsq = torch.dot(a, a), torch.dot(b, b)
    acoeff = 1.0 - dot / anormsq * 0.5 if anormsq >= 1e-8 else 1.0
    bcoeff = 1.0 - dot / bnormsq * 0.5 if bnormsq >= 1e-8 else 1.0
    return acoeff * a + bcoeff * b


def _adasum_tree(rows):
    """Combines the set's gradients in Horovod's order: ranks at distance 1, then 2, 4, ...
    (recursive halving-doubling); a rank without a partner at a level passes its value up."""
    rows = list(rows)
    step = 1
    while step < len(rows):
        for i in range(0, len(rows) - step, 2 * step):
            rows[i] = _adasum_combine(rows[i], rows[i + step])
        step *= 2
    return rows[0]


def _adasum_async(tensor, output, name, prescale_factor, postscale_factor, process_set):
    """Adasum allreduce: every rank gathers the set's (prescaled) tensors and combines them in
    float64 in the same order, so every rank gets the same, deterministic result."""
    if tensor.dtype not in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        raise ValueError("korovod: Adasum reduces floating-point tensors only, not %s" %
                         tensor.dtype)
    src = (_host(tensor).to(torch.float64) * float(prescale_factor)).reshape(1, -1)
    src = src.to(tensor.dtype).contiguous()
    name = _name(name, "allreduce", process_set)

    def finish(h, src=src):
        rows = _result_tensor(h, src.dtype).to(torch.float64)
        combined = _adasum_tree(list(rows)) * float(postscale_factor)
        with torch.no_grad():
            output.copy_(combined.reshape(output.shape).to(output.dtype))
        return output

    return _start([name], process_set,
                  _allgather_submit(src, _dtype(src), name, _psid(process_set)), finish)


def _allreduce_async(tensor, output, name, op, prescale_factor, postscale_factor, process_set):
    """Starts an allreduce of `tensor` into `output` (same shape and dtype; may be `tensor`)."""
    _check_op(op)
    if op == Adasum:
        return _adasum_async(tensor, output, name, prescale_factor, postscale_factor, process_set)
    dtype = _dtype(tensor, "allreduce", name)
    src = _contiguous(tensor)
    buf = _contiguous(output) if output.is_contiguous() else torch.empty_like(
        output.detach(), memory_format=torch.contiguous_format)
    name = _name(name, "allreduce", process_set)
    psid = _psid(process_set)
    events = None

    def submit():
        return _c().allreduce(src.data_ptr(), buf.data_ptr(), dtype, list(src.shape), name, op,
                              float(prescale_factor), float(postscale_factor), psid)

    if src.is_cuda or buf.is_cuda:  # reduced where it lies on the GPU (NCCL in the sidecar)
        events, submit = _device_submit("allreduce", [src, buf], lambda uuid, ev: (
            _c().device_allreduce(uuid, cuda_ipc.buffer_ref(src, _c()),
                                  cuda_ipc.buffer_ref(buf, _c()), dtype, list(src.shape), ev,
                                  name, op, float(prescale_factor), float(postscale_factor),
                                  psid)))

    def finish(_h, src=src, events=events):
        return _copy_back(output, buf)

    return _start([name], process_set, submit, finish)


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                    postscale_factor=1.0, process_set=global_process_set):
    """Starts averaging (op) `tensor` over the ranks of process_set; `tensor` is not modified.
    Returns a handle for poll() and synchronize()."""
    op = _reduce_op(op, average)
    output = torch.empty_like(tensor.detach(), memory_format=torch.contiguous_format)
    return _allreduce_async(tensor, output, name, op, prescale_factor, postscale_factor,
                            process_set)


class HorovodAllreduce(torch.autograd.Function):
    """allreduce as an autograd function: the gradient is the allreduce (same op and scales) of
    the output's gradient."""

    @staticmethod
    def forward(ctx, tensor, average, name, op, prescale_factor, postscale_factor, process_set):
        ctx.average = average
        ctx.op = op
        ctx.prescale_factor = prescale_factor
        ctx.postscale_factor = postscale_factor
        ctx.process_set = process_set
        handle = allreduce_async(tensor, average, name, op, prescale_factor, postscale_factor,
                                 process_set)
        return synchronize(handle)

    @staticmethod
    def backward(ctx, grad_output):
        return (allreduce(grad_output, average=ctx.average, op=ctx.op,
                          prescale_factor=ctx.prescale_factor,
                          postscale_factor=ctx.postscale_factor, process_set=ctx.process_set),
                None, None, None, None, None, None)


def allreduce(tensor, average=None, name=None, compression=Compression.none, op=None,
              prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    """Averages (op) `tensor` over the ranks of process_set and returns the result; `tensor` is
    not modified. Differentiable."""
    tensor_compressed, ctx = compression.compress(tensor)
    summed = HorovodAllreduce.apply(tensor_compressed, average, name, op, prescale_factor,
                                    postscale_factor, process_set)
    return compression.decompress(summed, ctx)


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                     postscale_factor=1.0, process_set=global_process_set):
    """Starts an in-place allreduce of `tensor`; synchronize() returns `tensor`."""
    op = _reduce_op(op, average)
    return _allreduce_async(tensor, tensor, name, op, prescale_factor, postscale_factor,
                            process_set)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
               postscale_factor=1.0, process_set=global_process_set):
    return synchronize(allreduce_async_(tensor, average, name, op, prescale_factor,
                                        postscale_factor, process_set))


def _grouped_allreduce_async(tensors, outputs, name, op, prescale_factor, postscale_factor,
                             process_set):
    """Starts one grouped allreduce of `tensors` into `outputs`: the sidecar hands the tensors of
    each dtype to the engine as one group, negotiated and fused together."""
    tensors, outputs = list(tensors), list(outputs)
    names = _group_names(name, "grouped_allreduce", process_set, len(tensors))
    _check_op(op)
    if op == Adasum:
        raise NotImplementedError("korovod: grouped allreduce with op=Adasum is not built; "
                                  "allreduce each tensor with op=Adasum")
    dtypes = [_dtype(t, "grouped allreduce", n) for t, n in zip(tensors, names)]
    srcs = [_contiguous(t) for t in tensors]
    bufs = [_contiguous(o) if o.is_contiguous() else
            torch.empty_like(o.detach(), memory_format=torch.contiguous_format) for o in outputs]
    psid = _psid(process_set)
    by_dtype = {}
    for i, dt in enumerate(dtypes):
        by_dtype.setdefault(dt, []).append(i)

    if any(t.is_cuda for t in srcs + bufs):
        # CUDA tensors: one device allreduce each; the engine still fuses those of one cycle.
        uuid = _one_device("grouped allreduce", srcs + bufs)
        events = []

        def device_one(i):
            def submit_one():
                events.append(cuda_ipc.ready_event(srcs[i]))
                return _c().device_allreduce(
                    uuid, cuda_ipc.buffer_ref(srcs[i], _c()),
                    cuda_ipc.buffer_ref(bufs[i], _c()), dtypes[i], list(srcs[i].shape),
                    events[-1].ipc_handle(), names[i], op, float(prescale_factor),
                    float(postscale_factor), psid)
            return submit_one

        return _start(names, process_set,
                      lambda: _start_each([device_one(i) for i in range(len(srcs))],
                                          (srcs, bufs, events)),
                      lambda _h, srcs=srcs, events=events: tuple(
                          _copy_back(o, b) for o, b in zip(outputs, bufs)))

    def submit_group(dt, idx):
        return lambda: _c().grouped_allreduce(
            [srcs[i].data_ptr() for i in idx], [bufs[i].data_ptr() for i in idx],
            [list(srcs[i].shape) for i in idx], [names[i] for i in idx], dt, op,
            float(prescale_factor), float(postscale_factor), psid)

    def submit():
        # One engine group per dtype (the wire format has one dtype per group).
        groups = _start_each([submit_group(dt, idx) for dt, idx in by_dtype.items()],
                             (srcs, bufs))
        handles = [None] * len(tensors)
        for idx, members in zip(by_dtype.values(), groups.handles):
            for i, h in zip(idx, members):
                handles[i] = h
        return _GroupHandle(handles)

    def finish(_h, srcs=srcs):
        return tuple(_copy_back(o, b) for o, b in zip(outputs, bufs))

    return _start(names, process_set, submit, finish)


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                            postscale_factor=1.0, process_set=global_process_set):
    """Starts a grouped allreduce of `tensors` (not modified); synchronize() returns the
    outputs."""
    op = _reduce_op(op, average)
    outputs = [torch.empty_like(t.detach(), memory_format=torch.contiguous_format)
               for t in tensors]
    return _grouped_allreduce_async(tensors, outputs, name, op, prescale_factor,
                                    postscale_factor, process_set)


class HorovodGroupedAllreduce(torch.autograd.Function):
    """grouped_allreduce as an autograd function: the gradients are the grouped allreduce of the
    outputs' gradients."""

    @staticmethod
    def forward(ctx, average, name, op, prescale_factor, postscale_factor, process_set,
                *tensors):
        ctx.average = average
        ctx.op = op
        ctx.prescale_factor = prescale_factor
        ctx.postscale_factor = postscale_factor
        ctx.process_set = process_set
        handle = grouped_allreduce_async(list(tensors), average, name, op, prescale_factor,
                                         postscale_factor, process_set)
        return synchronize(handle)

    @staticmethod
    def backward(ctx, *grad_output):
        grad_reduced = grouped_allreduce(list(grad_output), average=ctx.average, op=ctx.op,
                                         prescale_factor=ctx.prescale_factor,
                                         postscale_factor=ctx.postscale_factor,
                                         process_set=ctx.process_set)
        return (None, None, None, None, None, None, *grad_reduced)


def grouped_allreduce(tensors, average=None, name=None, compression=Compression.none, op=None,
                      prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    """Allreduces a list of tensors as one group; returns the list of results. Differentiable."""
    tensors_compressed, ctxs = zip(*[compression.compress(t) for t in tensors]) if tensors \
        else ((), ())
    summed = HorovodGroupedAllreduce.apply(average, name, op, prescale_factor, postscale_factor,
                                           process_set, *tensors_compressed)
    return [compression.decompress(t, ctx) for t, ctx in zip(summed, ctxs)]


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                             postscale_factor=1.0, process_set=global_process_set):
    """Starts an in-place grouped allreduce; synchronize() returns the tensors."""
    op = _reduce_op(op, average)
    return _grouped_allreduce_async(tensors, tensors, name, op, prescale_factor,
                                    postscale_factor, process_set)


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                       postscale_factor=1.0, process_set=global_process_set):
    return synchronize(grouped_allreduce_async_(tensors, average, name, op, prescale_factor,
                                                postscale_factor, process_set))


class _SyncAll:
    """The handle of several ops started as one (grouped allgather of CUDA tensors): poll() and
    synchronize() take it; synchronize returns the list of results."""

    def __init__(self, handles):
        self._handles = handles
        self._result = None

    def poll(self):
        return self._result is not None or all(poll(h) for h in self._handles)

    def __call__(self):
        if self._result is None:
            results, error = [], None
            for h in self._handles:  # every one is waited for before an error is raised
                try:
                    results.append(synchronize(h))
                except HorovodInternalError as e:
                    error = error or e
            if error is not None:
                raise error
            self._result = results
        return self._result


# The peers' indices are checked (torch >= 2.0 warns unless told whether to; 1.13 cannot check).
_SPARSE_CHECKS = ({"check_invariants": True}
                  if hasattr(torch.sparse, "check_sparse_tensor_invariants") else {})


class _SparseHandle:
    """sparse_allreduce_async's handle. Callable, as Horovod's (a function giving the result);
    poll() and synchronize() take it too."""

    def __init__(self, tensor, indices_handle, values_handle, op, process_set):
        self._tensor, self._op, self._process_set = tensor, op, process_set
        self._indices, self._values = indices_handle, values_handle
        self._result = None

    def poll(self):
        return self._result is not None or (poll(self._values) and poll(self._indices))

    def __call__(self):
        if self._result is None:
            values = synchronize(self._values)
            indices = synchronize(self._indices)
            t = self._tensor
            if self._op == Average:
                values = values / _set_size(self._process_set)
            # Duplicate indices (one per contributing rank) stay: they sum when coalesced.
            self._result = torch.sparse_coo_tensor(indices.transpose(0, 1), values, t.size(),
                                                   dtype=values.dtype, **_SPARSE_CHECKS)
        return self._result


def sparse_allreduce_async(tensor, name, op, process_set=global_process_set):
    """Horovod's sparse allreduce: allgathers the sparse tensor's indices and values over the ranks
    of process_set; the handle's result (handle(), or synchronize(handle)) is the sparse sum (or
    average, op=Average) with every rank's entries."""
    _check_op(op)
    if op not in (Sum, Average):
        raise ValueError("korovod: sparse allreduce supports Sum and Average only")
    t = tensor
    _dtype(t._values(), "sparse allreduce", name)  # summed here: FP8 refused as by allreduce
    name = _name(name, "sparse_allreduce", process_set)
    # Allgather concatenates along dimension 0: indices go as (nnz, ndim) and back.
    indices_handle = allgather_async(t._indices().transpose(0, 1).contiguous(),
                                     name="%s.indices" % name, process_set=process_set)
    values_handle = allgather_async(t._values(), name="%s.values" % name,
                                    process_set=process_set)
    return _SparseHandle(t, indices_handle, values_handle, op, process_set)


# ---- allgather ----

def _result_tensor(h, dtype):
    out = torch.empty(list(h.shape), dtype=dtype)
    h.copy_output(out.data_ptr(), out.numel() * out.element_size())
    return out


def _allgather_submit(src, dtype, name, psid):
    return lambda: _c().allgather(src.data_ptr(), dtype, list(src.shape), name, psid)


def allgather_async(tensor, name=None, process_set=global_process_set):
    """Starts concatenating every rank's `tensor` along dimension 0 (first dimensions may
    differ); synchronize() returns the result."""
    dtype = _moved_dtype(tensor, "allgather", name)
    name = _name(name, "allgather", process_set)
    if tensor.is_cuda:
        return _device_allgather_async(tensor, dtype, name, process_set)
    src = _host(tensor)
    return _start([name], process_set, _allgather_submit(src, dtype, name, _psid(process_set)),
                  lambda h, s=src: _like(_result_tensor(h, s.dtype), tensor))


def _device_allgather_async(tensor, dtype, name, process_set):
    """A CUDA tensor gathered into a CUDA output: every rank's first dimension is gathered first
    (a small CPU allgather) so that the output can be allocated on the device up front."""
    src = _contiguous(tensor)
    if src.dim() == 0:
        raise ValueError("korovod: allgather needs a tensor with at least one dimension")
    rows = synchronize(allgather_async(torch.tensor([src.shape[0]], dtype=torch.int64),
                                       name=name + ".rows", process_set=process_set))
    out = torch.empty((int(rows.sum()),) + tuple(src.shape[1:]), dtype=src.dtype,
                      device=src.device)
    psid = _psid(process_set)
    keep = []
    events, submit = _device_submit("allgather", [src, out], lambda uuid, ev: (
        _c().device_allgather(uuid, _device_ref(src, keep), _device_ref(out, keep),
                              out.numel() * out.element_size(), dtype, list(src.shape), ev, name,
                              psid)))
    return _start([name], process_set, submit, lambda h, src=src, events=events, keep=keep: out)


class HorovodAllgather(torch.autograd.Function):
    """allgather as an autograd function: the gradient is this rank's slice of the averaged
    output gradient."""

    @staticmethod
    def forward(ctx, tensor, name, process_set):
        ctx.dim = tensor.shape[0] if tensor.dim() else 0
        ctx.process_set = process_set
        return synchronize(allgather_async(tensor, name, process_set))

    @staticmethod
    def backward(ctx, grad_output):
        grad_reduced = allreduce(grad_output, op=Average, process_set=ctx.process_set)
        dims = allgather(torch.tensor([ctx.dim], dtype=torch.int32), process_set=ctx.process_set)
        r = _set_rank(ctx.process_set)
        offset = int(dims[:r].sum()) if r else 0
        return grad_reduced.narrow(0, offset, ctx.dim), None, None


def allgather(tensor, name=None, process_set=global_process_set):
    """Concatenates every rank's tensor along dimension 0 (first dimensions may differ).
    Differentiable."""
    return HorovodAllgather.apply(tensor, name, process_set)


def grouped_allgather_async(tensors, name=None, process_set=global_process_set):
    """Starts allgathers of every tensor of the list, as one handle; synchronize() returns the
    list of results."""
    tensors = list(tensors)
    names = _group_names(name, "grouped_allgather", process_set, len(tensors))
    dtypes = [_moved_dtype(t, "grouped allgather", n) for t, n in zip(tensors, names)]
    if any(t.is_cuda for t in tensors):
        # Each gathered on its device (own handle), waited for together.
        hids = [_device_allgather_async(t, dt, n, process_set)
                for t, dt, n in zip(tensors, dtypes, names)]
        return _SyncAll(hids)
    srcs = [_host(t) for t in tensors]
    psid = _psid(process_set)
    submits = [_allgather_submit(s, dt, n, psid) for s, dt, n in zip(srcs, dtypes, names)]
    return _start(names, process_set, lambda: _start_each(submits, srcs),
                  lambda g: [_like(_result_tensor(h, s.dtype), t)
                             for h, s, t in zip(g.handles, srcs, tensors)])


class HorovodGroupedAllgather(torch.autograd.Function):
    """grouped_allgather as an autograd function (gradients as HorovodAllgather's)."""

    @staticmethod
    def forward(ctx, name, process_set, *tensors):
        ctx.dims = [t.shape[0] if t.dim() else 0 for t in tensors]
        ctx.process_set = process_set
        return tuple(synchronize(grouped_allgather_async(list(tensors), name, process_set)))

    @staticmethod
    def backward(ctx, *grad_output):
        grad_reduced = grouped_allreduce(list(grad_output), op=Average,
                                         process_set=ctx.process_set)
        dims = grouped_allgather([torch.tensor([d], dtype=torch.int32) for d in ctx.dims],
                                 process_set=ctx.process_set)
        r = _set_rank(ctx.process_set)
        offsets = [int(d[:r].sum()) if r else 0 for d in dims]
        return (None, None, *[g.narrow(0, o, d)
                              for g, o, d in zip(grad_reduced, offsets, ctx.dims)])


def grouped_allgather(tensors, name=None, process_set=global_process_set):
    """allgather of each tensor of the list; returns the list of results. Differentiable."""
    return list(HorovodGroupedAllgather.apply(name, process_set, *tensors))


# ---- broadcast ----

def broadcast_async_(tensor, root_rank, name=None, process_set=global_process_set):
    """Starts broadcasting root_rank's `tensor` into `tensor` on every rank of process_set
    (root_rank: a global rank); synchronize() returns `tensor`."""
    dtype = _moved_dtype(tensor, "broadcast", name)
    root = _set_root(root_rank, process_set)
    buf = _contiguous(tensor)
    name = _name(name, "broadcast", process_set)
    psid = _psid(process_set)

    events = None

    def submit():
        return _c().broadcast(buf.data_ptr(), dtype, list(buf.shape), root, name, psid)

    if buf.is_cuda:  # broadcast where it lies on the GPU
        events, submit = _device_submit("broadcast", [buf], lambda uuid, ev: (
            _c().device_broadcast(uuid, cuda_ipc.buffer_ref(buf, _c()), dtype, list(buf.shape),
                                  root, ev, name, psid)))

    return _start([name], process_set, submit,
                  lambda h, events=events: _copy_back(tensor, buf))


def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set):
    """Starts a broadcast of root_rank's `tensor` into a new tensor (`tensor` is not modified)."""
    output = tensor.detach().clone(memory_format=torch.contiguous_format)
    return broadcast_async_(output, root_rank, name, process_set)


class HorovodBroadcast(torch.autograd.Function):
    """broadcast as an autograd function: the gradient is the averaged output gradient on the
    root, zero elsewhere."""

    @staticmethod
    def forward(ctx, tensor, root_rank, name, process_set):
        ctx.root_rank = root_rank
        ctx.process_set = process_set
        return synchronize(broadcast_async(tensor, root_rank, name, process_set))

    @staticmethod
    def backward(ctx, grad_output):
        grad_reduced = allreduce(grad_output, op=Average, process_set=ctx.process_set)
        if rank() != ctx.root_rank:
            grad_reduced = grad_reduced * 0
        return grad_reduced, None, None, None


def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    """Returns root_rank's `tensor` on every rank of process_set (root_rank: a global rank).
    Differentiable."""
    return HorovodBroadcast.apply(tensor, root_rank, name, process_set)


def broadcast_(tensor, root_rank, name=None, process_set=global_process_set):
    return synchronize(broadcast_async_(tensor, root_rank, name, process_set))


# ---- alltoall ----

def _alltoall_splits(src, splits, set_size):
    """Checks `splits` as Horovod does (ValueError) and returns them as a list."""
    if src.dim() == 0:
        raise ValueError("korovod: alltoall needs a tensor with at least one dimension")
    if splits is None:
        split_list = []
    elif torch.is_tensor(splits):
        if splits.dim() > 1:
            raise ValueError("alltoall expects a 1D splits tensor")
        if splits.dtype != torch.int32:
            raise ValueError("alltoall expects splits to contain 32-bit integer elements.")
        split_list = [int(s) for s in splits.tolist()]
    else:
        split_list = [int(s) for s in splits]
    if not split_list:
        if src.shape[0] % set_size:
            raise ValueError("splits not provided, but first dimension of tensor is not an even "
                             "multiple of the number of workers.")
        return [src.shape[0] // set_size] * set_size
    if len(split_list) != set_size:
        raise ValueError("Number of entries in splits does not equal number of workers.")
    if any(s < 0 for s in split_list):
        raise ValueError("alltoall splits must not be negative")
    if sum(split_list) > src.shape[0]:
        raise ValueError("Sum of splits entries is greater than the first dimension of tensor.")
    return split_list


def alltoall_async(tensor, splits=None, name=None, process_set=global_process_set):
    """Starts an alltoall: slices of dimension 0 (`splits` rows, or equal parts) go to the ranks
    of process_set in order; synchronize() returns (received tensor, received splits)."""
    dtype = _moved_dtype(tensor, "alltoall", name)
    split_list = _alltoall_splits(tensor, splits, _set_size(process_set))
    name = _name(name, "alltoall", process_set)
    psid = _psid(process_set)
    if tensor.is_cuda:
        return _device_alltoall_async(tensor, split_list, dtype, name, process_set)
    # Horovod sends the rows the splits cover; rows past their sum stay behind.
    src = _host(tensor.narrow(0, 0, sum(split_list)))

    def submit():
        return _c().alltoall(src.data_ptr(), dtype, list(src.shape), split_list, name, psid)

    def finish(h):
        return (_like(_result_tensor(h, src.dtype), tensor),
                torch.tensor(list(h.received_splits), dtype=torch.int32))

    return _start([name], process_set, submit, finish)


def _device_alltoall_async(tensor, split_list, dtype, name, process_set):
    """A CUDA tensor exchanged into a CUDA output: the splits go first (a small CPU alltoall), so
    that this rank knows what it receives and allocates the output on the device up front."""
    src = _contiguous(tensor.narrow(0, 0, sum(split_list)))
    received = synchronize(alltoall_async(torch.tensor(split_list, dtype=torch.int64),
                                          name=name + ".splits", process_set=process_set))[0]
    out = torch.empty((int(received.sum()),) + tuple(src.shape[1:]), dtype=src.dtype,
                      device=src.device)
    psid = _psid(process_set)
    keep = []
    events, submit = _device_submit("alltoall", [src, out], lambda uuid, ev: (
        _c().device_alltoall(uuid, _device_ref(src, keep), _device_ref(out, keep),
                             out.numel() * out.element_size(), dtype, list(src.shape),
                             split_list, ev, name, psid)))

    def finish(h, src=src, events=events, keep=keep):
        return out, torch.tensor(list(h.received_splits), dtype=torch.int32)

    return _start([name], process_set, submit, finish)


class HorovodAlltoall(torch.autograd.Function):
    """alltoall as an autograd function: the gradient is the alltoall of the output gradient with
    the received splits."""

    @staticmethod
    def forward(ctx, tensor, splits, name, process_set):
        output, received_splits = synchronize(alltoall_async(tensor, splits, name, process_set))
        ctx.process_set = process_set
        ctx.recvsplits = received_splits
        if splits is None:
            return output
        ctx.mark_non_differentiable(received_splits)
        return output, received_splits

    @staticmethod
    def backward(ctx, grad_output, *dead_gradients):
        grad_wrt_tensor, _ = alltoall(grad_output, splits=ctx.recvsplits,
                                      process_set=ctx.process_set)
        return grad_wrt_tensor, None, None, None


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """Scatters slices of dim 0 (by `splits`) to the ranks; returns what this rank received
    (and, when `splits` is given, the received splits). Differentiable."""
    return HorovodAlltoall.apply(tensor, splits, name, process_set)


# ---- reducescatter ----

def _reducescatter_submit(tensor, name, op, process_set, prescale_factor, postscale_factor):
    """Checks one reducescatter input; returns (contiguous input, submit())."""
    if op is None:
        op = Average
    _check_op(op)
    if op == Adasum:  # as in Horovod: Adasum is an allreduce
        raise NotImplementedError("korovod: reducescatter does not support op=Adasum")
    dtype = _dtype(tensor, "reducescatter", name)
    if tensor.dim() == 0:
        raise ValueError("korovod: reducescatter does not support scalar inputs")
    psid = _psid(process_set)
    if tensor.is_cuda:
        # This rank's block of dimension 0 (the first ranks get one more row), on the device.
        src = _contiguous(tensor)
        n, r, d0 = _set_size(process_set), _set_rank(process_set), src.shape[0]
        out = torch.empty((d0 // n + (1 if r < d0 % n else 0),) + tuple(src.shape[1:]),
                          dtype=src.dtype, device=src.device)
        keep = []
        events, submit = _device_submit("reducescatter", [src, out], lambda uuid, ev: (
            _c().device_reducescatter(uuid, _device_ref(src, keep), _device_ref(out, keep),
                                      out.numel() * out.element_size(), dtype, list(src.shape),
                                      ev, name, op, float(prescale_factor),
                                      float(postscale_factor), psid)))
        return src, submit, lambda h, events=events, keep=keep: out
    src = _host(tensor)
    return src, lambda: _c().reducescatter(src.data_ptr(), dtype, list(src.shape), name, op,
                                           float(prescale_factor), float(postscale_factor), psid), \
        lambda h: _like(_result_tensor(h, src.dtype), tensor)


def reducescatter_async(tensor, name=None, op=Average, process_set=global_process_set,
                        prescale_factor=1.0, postscale_factor=1.0):
    """Starts reducing `tensor` over the ranks of process_set and scattering dimension 0 (this
    rank gets its block); synchronize() returns the block."""
    name = _name(name, "reducescatter", process_set)
    _src, submit, result = _reducescatter_submit(tensor, name, op, process_set, prescale_factor,
                                                 postscale_factor)
    return _start([name], process_set, submit, result)


class HorovodReducescatter(torch.autograd.Function):
    """reducescatter as an autograd function: the gradient is the allgather of the output
    gradient, scaled as the forward scaled (times the set size for Sum)."""

    @staticmethod
    def forward(ctx, tensor, name, op, process_set, prescale_factor, postscale_factor):
        ctx.op = op
        ctx.process_set = process_set
        ctx.prescale_factor = prescale_factor
        ctx.postscale_factor = postscale_factor
        return synchronize(reducescatter_async(tensor, name, op, process_set, prescale_factor,
                                               postscale_factor))

    @staticmethod
    def backward(ctx, grad_output):
        return (allgather(_reducescatter_grad_scale(ctx, grad_output),
                          process_set=ctx.process_set), None, None, None, None, None)


def _reducescatter_grad_scale(ctx, grad):
    if ctx.op == Sum:
        grad = grad * _set_size(ctx.process_set)
    if ctx.prescale_factor != 1.0:
        grad = grad * ctx.prescale_factor
    if ctx.postscale_factor != 1.0:
        grad = grad * ctx.postscale_factor
    return grad


def reducescatter(tensor, name=None, compression=Compression.none, op=Average,
                  process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0):
    """Reduces `tensor` over the ranks of process_set and returns this rank's block of dimension
    0. Differentiable."""
    tensor_compressed, ctx = compression.compress(tensor)
    reduced = HorovodReducescatter.apply(tensor_compressed, name, op, process_set,
                                         prescale_factor, postscale_factor)
    return compression.decompress(reduced, ctx)


def grouped_reducescatter_async(tensors, name=None, op=Average, process_set=global_process_set,
                                prescale_factor=1.0, postscale_factor=1.0):
    """Starts a reducescatter of every tensor of the list, as one handle; synchronize() returns
    the list of blocks."""
    tensors = list(tensors)
    names = _group_names(name, "grouped_reducescatter", process_set, len(tensors))
    pairs = [_reducescatter_submit(t, n, op, process_set, prescale_factor, postscale_factor)
             for t, n in zip(tensors, names)]
    srcs = [p[0] for p in pairs]
    return _start(names, process_set, lambda: _start_each([p[1] for p in pairs], srcs),
                  lambda g: [p[2](h) for h, p in zip(g.handles, pairs)])


class HorovodGroupedReducescatter(torch.autograd.Function):
    """grouped_reducescatter as an autograd function (gradients as HorovodReducescatter's)."""

    @staticmethod
    def forward(ctx, name, op, process_set, prescale_factor, postscale_factor, *tensors):
        ctx.op = op
        ctx.process_set = process_set
        ctx.prescale_factor = prescale_factor
        ctx.postscale_factor = postscale_factor
        return tuple(synchronize(grouped_reducescatter_async(
            list(tensors), name, op, process_set, prescale_factor, postscale_factor)))

    @staticmethod
    def backward(ctx, *grad_output):
        grads = [_reducescatter_grad_scale(ctx, g) for g in grad_output]
        return (None, None, None, None, None,
                *grouped_allgather(grads, process_set=ctx.process_set))


def grouped_reducescatter(tensors, name=None, compression=Compression.none, op=Average,
                          process_set=global_process_set, prescale_factor=1.0,
                          postscale_factor=1.0):
    """reducescatter of each tensor of the list; returns the list of blocks. Differentiable."""
    pairs = [compression.compress(t) for t in tensors]
    reduced = HorovodGroupedReducescatter.apply(name, op, process_set, prescale_factor,
                                                postscale_factor, *[p[0] for p in pairs])
    return [compression.decompress(t, p[1]) for t, p in zip(reduced, pairs)]


# ---- barrier, join ----

def barrier(process_set=global_process_set):
    """Returns once every rank of process_set has called barrier()."""
    try:
        _c().barrier(_psid(process_set), _name(None, "barrier", process_set)).wait()
    except RuntimeError as e:
        raise _internal_error(e) from None


def join(device=-1):
    """Blocks until every rank has joined; returns the rank that joined last."""
    try:
        h = _c().join(0, _name(None, "join", global_process_set))
        h.wait()
    except RuntimeError as e:
        raise _internal_error(e) from None
    return h.last_joined_rank
