"""Variables and Python objects across ranks: broadcast_variables, broadcast_object,
allgather_object (Horovod's horovod.tensorflow.functions)."""
import io

import cloudpickle
import numpy as np
import tensorflow as tf

from korovod.tensorflow import mpi_ops
from korovod.tensorflow.mpi_ops import allgather, broadcast, global_process_set, rank, size

_broadcast_fns = {}


def broadcast_variables(variables, root_rank, process_set=global_process_set, inplace=False):
    """Assigns root_rank's values to `variables` on every rank of the set. Eagerly, the
    broadcasts run as one graph (traced once per list of variables), so they are in flight
    together and fused, not one round trip per variable."""
    variables = list(variables)
    if not variables:
        return None
    if not tf.executing_eagerly():
        return tf.group(*[v.assign(broadcast(v, root_rank, process_set=process_set))
                          for v in variables])
    key = (tuple(id(v) for v in variables), int(root_rank), mpi_ops._psid(process_set))
    fn = _broadcast_fns.get(key)
    if fn is None:
        @tf.function(autograph=False)
        def fn():
            for v in variables:
                v.assign(broadcast(v, root_rank, process_set=process_set))
        _broadcast_fns[key] = fn
    fn()
    return None


def _value(t, session):
    """A tensor's value: eagerly its numpy(); in a TensorFlow 1 graph, run in `session` or the
    default session."""
    if tf.executing_eagerly():
        return t.numpy()
    sess = session or tf.compat.v1.get_default_session()
    if sess is None:
        raise ValueError("korovod: broadcast_object/allgather_object in a TensorFlow 1 graph need "
                         "session= or a default session")
    return sess.run(t)


def _suffixed(name, suffix):
    return None if name is None else name + suffix


def broadcast_global_variables(root_rank):
    """TensorFlow 1 graphs: broadcasts every global variable from root_rank (an op to run).
    Eagerly there are no global variables: RuntimeError, as in Horovod."""
    if tf.executing_eagerly():
        raise RuntimeError("hvd.broadcast_global_variables() does not support eager execution. "
                           "Please use `hvd.broadcast_variables(<model/optimizer variables>)` "
                           "instead.")
    return broadcast_variables(tf.compat.v1.global_variables(), root_rank)


def _to_bytes(obj):
    b = io.BytesIO()
    cloudpickle.dump(obj, b)
    return np.frombuffer(b.getvalue(), dtype=np.uint8)


def broadcast_object(obj, root_rank=0, session=None, name=None, process_set=global_process_set):
    """root_rank's `obj` (any picklable object) on every rank of the set. Unnamed, the ops are
    named by their order (not by the object's type, which may differ between the root and the
    others)."""
    if mpi_ops._set_rank(process_set) == mpi_ops._set_root(root_rank, process_set):
        payload = _to_bytes(obj)
    else:
        payload = np.zeros([0], dtype=np.uint8)
    n = broadcast(tf.constant([payload.size], dtype=tf.int64), root_rank,
                  name=_suffixed(name, ".sz"), process_set=process_set)
    n = int(_value(n, session)[0])
    if payload.size != n:
        payload = np.zeros([n], dtype=np.uint8)
    data = broadcast(tf.constant(payload), root_rank, name=_suffixed(name, ".t"),
                     process_set=process_set)
    return cloudpickle.loads(_value(data, session).tobytes())


def broadcast_object_fn(root_rank=0, session=None, name=None, process_set=global_process_set):
    """A function broadcasting its argument from root_rank (Horovod's broadcast_object_fn)."""
    def fn(obj):
        return broadcast_object(obj, root_rank, session, name, process_set)
    return fn


def allgather_object(obj, session=None, name=None, process_set=global_process_set):
    """Every rank's `obj`, as a list in rank order of the set."""
    payload = _to_bytes(obj)
    sizes = _value(allgather(tf.constant([payload.size], dtype=tf.int64),
                             name=_suffixed(name, ".sz"), process_set=process_set), session)
    data = _value(allgather(tf.constant(payload), name=_suffixed(name, ".t"),
                            process_set=process_set), session)
    out, off = [], 0
    for s in sizes:
        out.append(cloudpickle.loads(data[off:off + s].tobytes()))
        off += s
    return out


__all__ = ["broadcast_variables", "broadcast_global_variables", "broadcast_object",
           "broadcast_object_fn", "allgather_object", "rank", "size"]
