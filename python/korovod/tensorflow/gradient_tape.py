"""DistributedGradientTape: a tf.GradientTape whose gradient() returns the gradients reduced
across ranks (Horovod's hvd.DistributedGradientTape), and PartialDistributedGradientTape, whose
local layers' gradients stay local."""
import tensorflow as tf

from korovod.tensorflow import mpi_ops
from korovod.tensorflow.compression import Compression
from korovod.tensorflow.gradient_aggregation import make_allreduce_grads_fn
from korovod.tensorflow.mpi_ops import Average, global_process_set


def _key(v):
    """A variable's identity (Keras 3 variables have no ref())."""
    return v.ref() if hasattr(v, "ref") else id(v)


class _DistributedGradientTape:
    """Wraps the user's tape (recording continues on it): gradient() reduces what it computes,
    except for the gradients of sources registered as local (register_local_source), which stay
    this rank's own (divided by the set's size when scale_local_gradients). Every other attribute
    is the tape's own."""

    def __init__(self, tape, allreduce_grads, process_set, scale_local_gradients):
        self._korovod_tape = tape
        self._korovod_allreduce = allreduce_grads
        self._korovod_process_set = process_set
        self._korovod_scale_local = scale_local_gradients
        self._korovod_local = set()

    def register_local_source(self, source):
        """Registers a source (variable) as worker local: its gradient is not reduced."""
        self._korovod_local.add(_key(source))

    def gradient(self, target, sources, output_gradients=None, **kwargs):
        kwargs.pop("use_generic_names", None)
        grads = self._korovod_tape.gradient(target, sources, output_gradients, **kwargs)
        flat_sources = tf.nest.flatten(sources)
        flat = list(tf.nest.flatten(grads))
        if self._korovod_process_set.included() is False:
            return grads  # not in the set: the local gradients, as Horovod leaves them
        shared = [i for i, v in enumerate(flat_sources) if _key(v) not in self._korovod_local]
        reduced = self._korovod_allreduce([flat[i] for i in shared],
                                          [flat_sources[i] for i in shared])
        for i, g in zip(shared, reduced):
            flat[i] = g
        if self._korovod_scale_local and self._korovod_local:
            n = mpi_ops._set_size(self._korovod_process_set)
            for i, v in enumerate(flat_sources):
                g = flat[i]
                if _key(v) not in self._korovod_local or g is None:
                    continue
                if isinstance(g, tf.IndexedSlices):
                    flat[i] = tf.IndexedSlices(g.values / tf.cast(n, g.values.dtype), g.indices,
                                               g.dense_shape)
                else:
                    flat[i] = g / tf.cast(n, g.dtype)
        return tf.nest.pack_sequence_as(grads, flat)

    def get_local_and_global_gradients(self, target, sources, output_gradients=None, **kwargs):
        """([(local source, its gradient)], [(other source, its reduced gradient)])."""
        gradients = self.gradient(target, sources, output_gradients, **kwargs)
        local, shared = [], []
        for s, g in zip(sources, gradients):
            (local if _key(s) in self._korovod_local else shared).append((s, g))
        return local, shared

    def __enter__(self):
        self._korovod_tape.__enter__()
        return self

    def __exit__(self, *exc):
        return self._korovod_tape.__exit__(*exc)

    def __getattr__(self, name):
        return getattr(self._korovod_tape, name)


def DistributedGradientTape(gradtape, device_dense="", device_sparse="",
                            compression=Compression.none, sparse_as_dense=False, op=Average,
                            gradient_predivide_factor=1.0, num_groups=0, groups=None,
                            process_set=global_process_set, scale_local_gradients=True):
    """The tape's gradients averaged (op) over the ranks of process_set. groups: lists of
    variables reduced together, or num_groups (an int) groups; none: one op per gradient (the
    engine fuses them anyway)."""
    if gradient_predivide_factor != 1.0 and op != Average:
        raise ValueError("gradient_predivide_factor not supported with op != Average")
    if num_groups != 0:
        if groups is not None:
            raise ValueError("num_groups and groups cannot both be given")
        groups = int(num_groups)
    if groups is not None and not isinstance(groups, int):
        if not all(isinstance(g, (list, tuple)) for g in groups):
            raise ValueError("groups should be a non-negative integer or a list of list of "
                             "tf.Variable.")
    mpi_ops._c()  # ValueError before hvd.init()
    fn = make_allreduce_grads_fn("DistributedGradientTape", device_dense, device_sparse,
                                 compression, sparse_as_dense, op, gradient_predivide_factor,
                                 groups, process_set)
    return _DistributedGradientTape(gradtape, fn, process_set, scale_local_gradients)


def PartialDistributedGradientTape(gradtape, device_dense="", device_sparse="",
                                   compression=Compression.none, sparse_as_dense=False,
                                   op=Average, gradient_predivide_factor=1.0, num_groups=0,
                                   groups=None, process_set=global_process_set, local_layers=None,
                                   scale_local_gradients=True):
    """A DistributedGradientTape whose `local_layers`' trainable weights are local sources."""
    tape = DistributedGradientTape(gradtape, device_dense, device_sparse, compression,
                                   sparse_as_dense, op, gradient_predivide_factor, num_groups,
                                   groups, process_set, scale_local_gradients)
    layers = local_layers or []
    if not isinstance(layers, (list, tuple)):
        layers = [layers]
    for layer in layers:
        for v in layer.trainable_weights:
            tape.register_local_source(v)
    return tape
