"""Horovod's TensorFlow collectives over the korovod sidecar: the ops of korovod's TensorFlow op
library (sidecar/tensorflow, asynchronous kernels that submit to this process's sidecar client)
and their gradients. The session (init, rank, process sets) is korovod.session's, shared with
korovod.torch."""
import ctypes
import glob
import os
import re
import threading

import tensorflow as tf
from tensorflow.python.framework import ops as _ops

import korovod
from korovod import session as _session
from korovod.reduce_ops import (  # noqa: F401
    Adasum, Average, Max, Min, Product, Sum, check_op as _check_op,
    handle_average_backwards_compatibility)
from korovod.session import psid as _psid
from korovod.session import set_rank as _set_rank
from korovod.session import set_root as _set_root
from korovod.session import set_size as _set_size
from korovod.session import (  # noqa: F401
    ProcessSet, _c, _client_or_none, _membership, add_process_set, ccl_built, cross_rank,
    cross_size, ddl_built, gloo_built, gloo_enabled, global_process_set, init, is_homogeneous,
    is_initialized, local_rank, local_size, mpi_built, mpi_enabled, mpi_threads_supported, rank,
    remove_process_set, rocm_built, shutdown, size, start_timeline, stop_timeline, sycl_built)


def _library_path():
    """The op library built against this TensorFlow: beside this package (pip install) or in the
    build tree (korovod's package path spans it)."""
    for d in korovod.__path__:
        found = sorted(glob.glob(os.path.join(d, "tensorflow", "_korovod_tf_ops*.so")))
        if found:
            return found[0]
    raise ImportError(
        "korovod.tensorflow: the TensorFlow op library (_korovod_tf_ops.so) is not installed: "
        "korovod was built where TensorFlow was not found. Install korovod with `pip install .` "
        "in the environment that has TensorFlow (docs/install.md#tensorflow)")


def _load():
    path = _library_path()
    try:
        lib = tf.load_op_library(path)
    except tf.errors.NotFoundError as e:
        raise ImportError(
            "korovod.tensorflow: %s does not load into TensorFlow %s (%s); it must be built "
            "against the TensorFlow it runs with: `pip install .` again in this environment"
            % (path, tf.__version__, e.message)) from None
    handle = ctypes.CDLL(path)  # the same loaded object: its C entry point
    handle.korovod_tf_set_client.argtypes = [ctypes.c_uint64, ctypes.c_uint64]
    handle.korovod_tf_set_client.restype = ctypes.c_int
    return lib, handle


MPI_LIB, _LIB_HANDLE = _load()
# The library has GPU kernels (built wherever TensorFlow's headers bring cuda.h): GPU tensors stay
# on the GPU through CUDA IPC to the sidecar's NCCL (docs/adr/0015).
_GPU_KERNELS = hasattr(_LIB_HANDLE, "korovod_tf_gpu_kernels")


def _device_collectives():
    """Whether GPU tensors may take the GPU kernels: built, and this rank's sidecar takes device
    tensors (its NCCL backend)."""
    return _GPU_KERNELS and _session.cuda_built()


# Set once per session (on_init): GPU tensors exist here but cannot stay on the GPU, so the ops go
# on the CPU. Without a GPU, or with the GPU path, ops are created as they are (no device scope
# per op on the hot path).
_ops_on_cpu = False


def _placed(op, *args, **kwargs):
    """Creates a collective op; on the CPU when GPU tensors cannot stay on the GPU (the sidecar
    has no device backend), where TensorFlow copies them to the host and back, as it does for
    any op without a GPU kernel."""
    if not _ops_on_cpu:
        return op(*args, **kwargs)
    with tf.device("/device:CPU:0"):
        return op(*args, **kwargs)


class _TensorFlowSession(_session.SessionHooks):
    """Hands the session's client to the op library, and takes it back before it closes (ops
    in flight then fail, with UnknownError, as the client closes)."""

    def on_init(self, client):
        global _ops_on_cpu
        api, address = client.c_api()
        if _LIB_HANDLE.korovod_tf_set_client(api, address) != 0:
            raise RuntimeError("korovod.tensorflow: the op library does not speak this client's C "
                               "API version: rebuild korovod")
        gpu_path = _GPU_KERNELS and client.device_backend == "nccl"
        _ops_on_cpu = not gpu_path and bool(tf.config.list_physical_devices("GPU"))

    def before_close(self):
        _LIB_HANDLE.korovod_tf_set_client(0, 0)


_session.on_session(_TensorFlowSession())


def _executing_eagerly():
    return tf.executing_eagerly()


def _normalize_name(name):
    """A TensorFlow tensor name as an op name (Horovod's rule)."""
    return re.sub("[^a-zA-Z0-9_]", "_", name)


_auto_names = {}
_auto_lock = threading.Lock()


def _naming(kind, name, tensor, ignore_name_scope=False, process_set=global_process_set):
    """The op's naming attributes: the name every rank gives it. In a graph, the op's node name,
    which TensorFlow makes unique (Horovod's rule: `name`, or "Horovod<Kind>_<tensor name>", under
    the current name scope unless ignore_name_scope). Eagerly, `name`, or a count per kind and
    process set, so that ranks outside a set stay in step with its members."""
    if _executing_eagerly():
        if name is None:
            psid = _psid(process_set)
            with _auto_lock:
                i = _auto_names.get((kind, psid), 0)
                _auto_names[(kind, psid)] = i + 1
            name = "%s.noname.ps%d.%d" % (kind, psid, i)
        return {"tensor_name": str(name)}
    if name is None:
        name = "Horovod%s_%s" % (kind, _normalize_name(tensor.name))
    return {"name": _normalize_name(str(name)), "use_node_name": True,
            "ignore_name_scope": bool(ignore_name_scope)}


def _check_member(process_set):
    if process_set is not None and process_set.included() is False:
        raise ValueError("korovod: rank %d is not a member of %s" % (rank(), process_set))


def check_num_rank_power_of_2(num_rank):
    return num_rank != 0 and (num_rank & (num_rank - 1)) == 0


# ---- the ops ----

def _allreduce(tensor, name=None, op=Sum, prescale_factor=1.0, postscale_factor=1.0,
               ignore_name_scope=False, process_set=global_process_set):
    """The engine's allreduce of a dense tensor (op: Sum, Average, Min, Max or Product)."""
    if op == Adasum:
        return _adasum(tensor, name, prescale_factor, postscale_factor, process_set)
    _check_member(process_set)
    return _placed(
        MPI_LIB.korovod_allreduce,
        tensor, reduce_op=int(op), prescale_factor=float(prescale_factor),
        postscale_factor=float(postscale_factor),
        **_naming("Allreduce", name, tensor, ignore_name_scope, process_set),
        process_set_id=_psid(process_set))


@_ops.RegisterGradient("KorovodAllreduce")
def _allreduce_grad(op, grad):
    """The gradient of an allreduce is the allreduce of the gradient, scaled alike."""
    return _allreduce_from_attrs(op, grad)


def _allreduce_from_attrs(op, grad):
    ps = _set_of(op.get_attr("process_set_id"))
    return _placed(
        MPI_LIB.korovod_allreduce,
        grad, reduce_op=op.get_attr("reduce_op"),
        prescale_factor=op.get_attr("prescale_factor"),
        postscale_factor=op.get_attr("postscale_factor"),
        process_set_id=_psid(ps), **_naming("AllreduceGrad", None, grad, process_set=ps))


def _set_of(psid):
    ps = _session._process_sets.get(psid)
    if ps is None:
        raise ValueError("korovod: process set %d is not registered" % psid)
    return ps


def _grouped_allreduce(tensors, name=None, op=Sum, prescale_factor=1.0, postscale_factor=1.0,
                       ignore_name_scope=False, process_set=global_process_set):
    """One engine group per dtype (negotiated and fused together), results in input order."""
    if op == Adasum:
        return [_adasum(t, None, prescale_factor, postscale_factor, process_set) for t in tensors]
    _check_member(process_set)
    tensors = list(tensors)
    if not tensors:
        return []
    by_dtype = {}
    for i, t in enumerate(tensors):
        by_dtype.setdefault(t.dtype, []).append(i)
    out = [None] * len(tensors)
    for n, (dtype, idx) in enumerate(by_dtype.items()):
        group = [tensors[i] for i in idx]
        gname = None if name is None else "%s.%d" % (name, n)
        results = _placed(
            MPI_LIB.korovod_grouped_allreduce,
            group, reduce_op=int(op), prescale_factor=float(prescale_factor),
            postscale_factor=float(postscale_factor),
            process_set_id=_psid(process_set),
            **_naming("GroupedAllreduce", gname, group[0], ignore_name_scope, process_set))
        for i, r in zip(idx, results):
            out[i] = r
    return out


@_ops.RegisterGradient("KorovodGroupedAllreduce")
def _grouped_allreduce_grad(op, *grads):
    ps = _set_of(op.get_attr("process_set_id"))
    return _placed(
        MPI_LIB.korovod_grouped_allreduce,
        list(grads), reduce_op=op.get_attr("reduce_op"),
        prescale_factor=op.get_attr("prescale_factor"),
        postscale_factor=op.get_attr("postscale_factor"),
        process_set_id=_psid(ps),
        **_naming("GroupedAllreduceGrad", None, grads[0], process_set=ps))


def _adasum(tensor, name, prescale_factor, postscale_factor, process_set):
    """Horovod's Adasum rule over an allgather, combined in float64 as a pairwise tree (the
    same on every rank; korovod.torch combines the same way)."""
    x = tf.convert_to_tensor(tensor)
    if prescale_factor != 1.0:
        x = x * tf.cast(prescale_factor, x.dtype)
    n = _set_size(process_set)
    rows = allgather(tf.expand_dims(x, 0), name=name, process_set=process_set)
    rows = [tf.cast(rows[i], tf.float64) for i in range(n)]
    while len(rows) > 1:
        nxt = []
        for i in range(0, len(rows) - 1, 2):
            a, b = tf.reshape(rows[i], [-1]), tf.reshape(rows[i + 1], [-1])
            dot = tf.reduce_sum(a * b)
            na, nb = tf.reduce_sum(a * a), tf.reduce_sum(b * b)
            ca = tf.where(na > 0, 1.0 - dot / (2.0 * tf.where(na > 0, na, 1.0)), 1.0)
            cb = tf.where(nb > 0, 1.0 - dot / (2.0 * tf.where(nb > 0, nb, 1.0)), 1.0)
            nxt.append(tf.reshape(ca * a + cb * b, tf.shape(rows[i])))
        if len(rows) % 2:
            nxt.append(rows[-1])
        rows = nxt
    out = tf.cast(rows[0], x.dtype)
    if postscale_factor != 1.0:
        out = out * tf.cast(postscale_factor, out.dtype)
    return out


def allgather(tensor, name=None, ignore_name_scope=False, process_set=global_process_set):
    """Concatenates every rank's tensor on the first dimension (which may differ by rank)."""
    _check_member(process_set)
    return _placed(
        MPI_LIB.korovod_allgather,
        tensor, **_naming("Allgather", name, tensor, ignore_name_scope, process_set),
        process_set_id=_psid(process_set))


@_ops.RegisterGradient("KorovodAllgather")
def _allgather_grad(op, grad):
    """This rank's slice of the averaged output gradient."""
    ps = _set_of(op.get_attr("process_set_id"))
    grad = _allreduce(grad, op=Average, process_set=ps)
    with tf.device("/cpu:0"):
        d = tf.reshape(tf.shape(op.inputs[0], out_type=tf.int32)[0], [1])
        d = tf.reshape(allgather(d, process_set=ps), [_set_size(ps)])
    splits = tf.split(grad, num_or_size_splits=d, axis=0)
    return splits[_set_rank(ps)]


def grouped_allgather(tensors, name=None, ignore_name_scope=False,
                      process_set=global_process_set):
    return [allgather(t, name=None if name is None else "%s.%d" % (name, i),
                      ignore_name_scope=ignore_name_scope, process_set=process_set)
            for i, t in enumerate(tensors)]


def broadcast(tensor, root_rank, name=None, ignore_name_scope=False,
              process_set=global_process_set):
    """root_rank's tensor on every rank of the set (root_rank is a global rank)."""
    _check_member(process_set)
    return _placed(
        MPI_LIB.korovod_broadcast,
        tensor, root_rank=_set_root(root_rank, process_set),
        **_naming("Broadcast", name, tensor, ignore_name_scope, process_set),
        process_set_id=_psid(process_set))


@_ops.RegisterGradient("KorovodBroadcast")
def _broadcast_grad(op, grad):
    """The averaged gradient on the root, zero elsewhere."""
    ps = _set_of(op.get_attr("process_set_id"))
    grad_reduced = _allreduce(grad, op=Average, process_set=ps)
    if _set_rank(ps) != op.get_attr("root_rank"):
        return grad_reduced * 0
    return grad_reduced


def broadcast_(variables, root_rank, name=None, process_set=global_process_set):
    """Broadcasts variables in place from root_rank (Horovod 0.28's inplace broadcast); returns
    what each assignment returns (eagerly the variables; in a graph the assignments to run)."""
    return [v.assign(broadcast(v, root_rank, name=None if name is None else "%s.%d" % (name, i),
                               process_set=process_set))
            for i, v in enumerate(variables)]


def alltoall(tensor, splits=None, name=None, ignore_name_scope=False,
             process_set=global_process_set):
    """Sends splits[i] rows of the first dimension to rank i of the set (even split: None);
    returns (output, received_splits) when splits were given, else the output, as Horovod."""
    _check_member(process_set)
    given = splits is not None
    if splits is None:
        splits = tf.zeros([0], dtype=tf.int32)
    else:
        splits = tf.cast(tf.convert_to_tensor(splits), tf.int32)
    output, received = _placed(
        MPI_LIB.korovod_alltoall,
        tensor, splits, **_naming("Alltoall", name, tensor, ignore_name_scope, process_set),
        process_set_id=_psid(process_set))
    return (output, received) if given else output


@_ops.RegisterGradient("KorovodAlltoall")
def _alltoall_grad(op, grad_wrt_output, grad_wrt_received_splits):
    ps = _set_of(op.get_attr("process_set_id"))
    recvsplits = op.outputs[1]
    grad_wrt_tensor, _ = alltoall(grad_wrt_output, splits=recvsplits, process_set=ps)  # given
    return [grad_wrt_tensor, None]


def reducescatter(tensor, device_dense="", compression=None, op=Average, name=None,
                  process_set=global_process_set, ignore_name_scope=False, prescale_factor=1.0,
                  postscale_factor=1.0):
    """Reduces every rank's tensor and gives each rank a block of the first dimension (the first
    ranks one row more when it does not divide)."""
    _check_op(op)
    if op not in (Sum, Average):
        raise ValueError("korovod: reducescatter takes op=Sum or op=Average")
    _check_member(process_set)
    ctx = None
    if compression is not None:
        tensor, ctx = compression.compress(tensor)
    with tf.device(device_dense):
        out = _placed(
            MPI_LIB.korovod_reducescatter,
            tensor, reduce_op=int(op), prescale_factor=float(prescale_factor),
            postscale_factor=float(postscale_factor),
            **_naming("Reducescatter", name, tensor, ignore_name_scope, process_set),
            process_set_id=_psid(process_set))
    if compression is not None:
        out = compression.decompress(out, ctx)
    return out


@_ops.RegisterGradient("KorovodReducescatter")
def _reducescatter_grad(op, grad):
    ps = _set_of(op.get_attr("process_set_id"))
    if op.get_attr("reduce_op") == Sum:
        grad = grad * tf.cast(_set_size(ps), grad.dtype)
    for f in ("prescale_factor", "postscale_factor"):
        v = op.get_attr(f)
        if v != 1.0:
            grad = grad * tf.cast(v, grad.dtype)
    return allgather(grad, process_set=ps)


def grouped_reducescatter(tensors, device_dense="", compression=None, op=Average, name=None,
                          process_set=global_process_set, ignore_name_scope=False,
                          prescale_factor=1.0, postscale_factor=1.0):
    return [reducescatter(t, device_dense, compression, op,
                          None if name is None else "%s.%d" % (name, i), process_set,
                          ignore_name_scope, prescale_factor, postscale_factor)
            for i, t in enumerate(tensors)]


def barrier(process_set=global_process_set):
    """Returns once every rank of the set has called it."""
    _check_member(process_set)
    return MPI_LIB.korovod_barrier(process_set_id=_psid(process_set))


def join():
    """Joins: this rank contributes zeros to the collectives others still submit, until every
    rank has joined; returns the last rank to join."""
    return int(MPI_LIB.korovod_join()) if _executing_eagerly() else MPI_LIB.korovod_join()


# Ops whose value is read when the graph runs (an elastic world changes between runs).
def rank_op(name=None):
    return MPI_LIB.korovod_rank(name=name)


def size_op(process_set_id=0, name=None):
    if process_set_id:
        return tf.constant(_set_of(process_set_id).size(), dtype=tf.int32, name=name)
    return MPI_LIB.korovod_size(name=name)


def local_rank_op(name=None):
    return tf.constant(local_rank(), dtype=tf.int32, name=name)


def local_size_op(name=None):
    return tf.constant(local_size(), dtype=tf.int32, name=name)


def process_set_included_op(process_set_id=0, name=None):
    ps = _set_of(process_set_id)
    return tf.constant(1 if ps.included() is not False else 0, dtype=tf.int32, name=name)


def nccl_built():
    """NCCL's version code when GPU tensors run on the GPU (the GPU kernels are built and this
    rank's sidecar runs NCCL), else 0."""
    return _session.nccl_built() if _GPU_KERNELS else 0


def cuda_built():
    """True when GPU tensors stay on the GPU (GPU kernels built, the sidecar's NCCL backend)."""
    return _device_collectives()
