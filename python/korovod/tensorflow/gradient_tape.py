"""DistributedGradientTape: a tf.GradientTape whose gradient() returns the gradients reduced
across ranks (Horovod's hvd.DistributedGradientTape)."""
import tensorflow as tf

from korovod.tensorflow import mpi_ops
from korovod.tensorflow.compression import Compression
from korovod.tensorflow.gradient_aggregation import make_allreduce_grads_fn
from korovod.tensorflow.mpi_ops import Average, global_process_set


class _DistributedGradientTape:
    """Wraps the user's tape (recording continues on it): gradient() reduces what it computes;
    every other attribute is the tape's own."""

    def __init__(self, tape, allreduce_grads, process_set, scale_local_gradients):
        self._korovod_tape = tape
        self._korovod_allreduce = allreduce_grads
        self._korovod_process_set = process_set
        self._korovod_scale_local = scale_local_gradients

    def gradient(self, target, sources, output_gradients=None, **kwargs):
        grads = self._korovod_tape.gradient(target, sources, output_gradients, **kwargs)
        flat_sources = tf.nest.flatten(sources)
        flat = tf.nest.flatten(grads, expand_composites=False)
        if self._korovod_process_set.included() is False:
            return grads  # not in the set: the local gradients, as Horovod leaves them
        reduced = self._korovod_allreduce(flat, flat_sources)
        return tf.nest.pack_sequence_as(grads, reduced)

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
    if num_groups != 0:
        if groups is not None:
            raise ValueError("num_groups and groups cannot both be given")
        groups = int(num_groups)
    if groups is not None and not isinstance(groups, int):
        if not all(isinstance(g, (list, tuple)) for g in groups):
            raise ValueError("groups must be a list of lists of tf.Variables")
    mpi_ops._c()  # ValueError before hvd.init()
    fn = make_allreduce_grads_fn("DistributedGradientTape", device_dense, device_sparse,
                                 compression, sparse_as_dense, op, gradient_predivide_factor,
                                 groups, process_set)
    return _DistributedGradientTape(gradtape, fn, process_set, scale_local_gradients)


class PartialDistributedGradientTape(_DistributedGradientTape):
    """Horovod's PartialDistributedGradientTape: the gradients of `local_layers`' variables stay
    local (scaled by 1/size when scale_local_gradients), the others are reduced."""

    def __init__(self, gradtape, device_dense="", device_sparse="",
                 compression=Compression.none, sparse_as_dense=False, op=Average,
                 gradient_predivide_factor=1.0, num_groups=0, groups=None,
                 process_set=global_process_set, local_layers=None, scale_local_gradients=True):
        inner = DistributedGradientTape(gradtape, device_dense, device_sparse, compression,
                                        sparse_as_dense, op, gradient_predivide_factor,
                                        num_groups, groups, process_set, scale_local_gradients)
        super().__init__(gradtape, inner._korovod_allreduce, process_set, scale_local_gradients)
        layers = local_layers or []
        if not isinstance(layers, (list, tuple)):
            layers = [layers]
        self._korovod_local = {id(v) for layer in layers for v in layer.trainable_weights}

    def gradient(self, target, sources, output_gradients=None, **kwargs):
        grads = self._korovod_tape.gradient(target, sources, output_gradients, **kwargs)
        flat_sources = tf.nest.flatten(sources)
        flat = list(tf.nest.flatten(grads))
        shared = [i for i, v in enumerate(flat_sources) if id(v) not in self._korovod_local]
        reduced = self._korovod_allreduce([flat[i] for i in shared],
                                          [flat_sources[i] for i in shared])
        for i, r in zip(shared, reduced):
            flat[i] = r
        if self._korovod_scale_local:
            n = mpi_ops._set_size(self._korovod_process_set)
            for i, v in enumerate(flat_sources):
                if id(v) in self._korovod_local and flat[i] is not None:
                    flat[i] = flat[i] / tf.cast(n, flat[i].dtype)
        return tf.nest.pack_sequence_as(grads, flat)
