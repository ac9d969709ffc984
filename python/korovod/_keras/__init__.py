"""The Keras half of korovod, shared by horovod.tensorflow.keras (tf.keras) and horovod.keras
(the keras package): DistributedOptimizer and load_model for a given Keras module, Keras 3 or
tf_keras (Keras 2). Collectives come from korovod.tensorflow."""
import types

import tensorflow as tf

from korovod.tensorflow import mpi_ops
from korovod.tensorflow.compression import Compression
from korovod.tensorflow.gradient_aggregation import make_allreduce_grads_fn
from korovod.tensorflow.mpi_ops import Average, global_process_set


def keras_major(keras):
    """3 for Keras 3, 2 for tf_keras (whose tf.keras module has no __version__)."""
    if keras.__name__.startswith("tf_keras"):
        return 2
    return int(str(getattr(keras, "__version__", "3")).split(".")[0])


def _is_distributed(optimizer):
    return getattr(optimizer, "_korovod_allreduce", None) is not None


def _distributed_class(keras, base):
    """A subclass of the optimizer's class whose update first reduces the gradients: Keras 3
    routes every update through apply() (apply_gradients and model.fit included); Keras 2
    optimizers through apply_gradients()."""
    if keras_major(keras) >= 3:
        class _Distributed(base):
            # Keras 3's apply() filters empty gradients, unscales a loss-scaled one, then (in
            # _backend_apply_gradients) clips and updates: every step, or with gradient
            # accumulation (backward_passes_per_step) only on the update step, with the
            # accumulated gradients. Reducing where they are clipped communicates on update steps
            # only, and before clipping, as Horovod reduces before the optimizer transforms them.
            def _backend_apply_gradients(self, grads, trainable_variables):
                # In a plain object: a list set on the optimizer would become a tracked child.
                self._korovod_applying.variables = list(trainable_variables)
                try:
                    return super()._backend_apply_gradients(grads, trainable_variables)
                finally:
                    self._korovod_applying.variables = None

            def _clip_gradients(self, grads):
                variables = self._korovod_applying.variables
                if variables is not None:  # not called by an update: nothing to reduce
                    grads = self._korovod_reduce(list(grads), variables)
                return super()._clip_gradients(grads)
    else:
        class _Distributed(base):
            def apply_gradients(self, grads_and_vars, *args, **kwargs):
                grads_and_vars = list(grads_and_vars)
                grads = self._korovod_reduce([g for g, _ in grads_and_vars],
                                             [v for _, v in grads_and_vars])
                return super().apply_gradients(list(zip(grads, [v for _, v in grads_and_vars])),
                                               *args, **kwargs)

    def _korovod_reduce(self, grads, variables):
        if self._korovod_process_set.included() is False:
            return grads
        scale = self._korovod_local_scale
        if scale != 1.0:
            grads = [None if g is None else g * tf.cast(scale, g.dtype) for g in grads]
        return self._korovod_allreduce(grads, variables)

    _Distributed._korovod_reduce = _korovod_reduce
    _Distributed.__name__ = base.__name__
    _Distributed.__qualname__ = base.__qualname__
    # Saved models name the base class: they load anywhere, and load_model distributes them.
    _Distributed.__module__ = base.__module__
    return _Distributed


def _attach(optimizer, name, device_dense, device_sparse, compression, sparse_as_dense,
            gradient_predivide_factor, op, groups, process_set, local_scale):
    optimizer._korovod_allreduce = make_allreduce_grads_fn(
        name or "Distributed%s" % type(optimizer).__name__, device_dense, device_sparse,
        compression, sparse_as_dense, op, gradient_predivide_factor, groups, process_set)
    optimizer._korovod_process_set = process_set
    optimizer._korovod_local_scale = local_scale
    optimizer._korovod_applying = types.SimpleNamespace(variables=None)


def create_distributed_optimizer(keras, optimizer, name=None, device_dense="", device_sparse="",
                                 compression=Compression.none, sparse_as_dense=False,
                                 gradient_predivide_factor=1.0, op=Average,
                                 backward_passes_per_step=1, average_aggregated_gradients=False,
                                 num_groups=0, groups=None, process_set=global_process_set,
                                 scale_local_gradients=True):
    """A new optimizer of the same class and configuration whose updates use gradients averaged
    (op) over the ranks of process_set."""
    if _is_distributed(optimizer):
        raise ValueError("the optimizer is already a korovod DistributedOptimizer")
    if op == mpi_ops.Adasum:
        raise NotImplementedError("korovod: DistributedOptimizer(op=hvd.Adasum) (Horovod's delta "
                                  "optimizer) is not supported; hvd.allreduce(op=hvd.Adasum) is")
    if num_groups != 0:
        if groups is not None:
            raise ValueError("num_groups and groups cannot both be given")
        groups = int(num_groups)
    if int(backward_passes_per_step) < 1:
        raise ValueError("backward_passes_per_step must be >= 1")
    mpi_ops._c()  # ValueError before hvd.init()
    config = optimizer.get_config()
    local_scale = 1.0
    if backward_passes_per_step > 1:
        if keras_major(keras) < 3:
            raise NotImplementedError("korovod: backward_passes_per_step > 1 needs a Keras 3 "
                                      "optimizer (its gradient_accumulation_steps)")
        # Keras 3 accumulates and applies every n steps, with the mean of the n gradients,
        # reduced over the ranks on that step only; Horovod applies their sum unless
        # average_aggregated_gradients.
        config["gradient_accumulation_steps"] = int(backward_passes_per_step)
        if not average_aggregated_gradients:
            local_scale = float(backward_passes_per_step)
    cls = _distributed_class(keras, type(optimizer))
    new = cls.from_config(config)
    _attach(new, name, device_dense, device_sparse, compression, sparse_as_dense,
            gradient_predivide_factor, op, groups, process_set, local_scale)
    return new


def make_distributed_in_place(keras, optimizer, compression=Compression.none):
    """The same optimizer object (its state kept), made distributed: load_model's way."""
    if optimizer is None or _is_distributed(optimizer):
        return optimizer
    optimizer.__class__ = _distributed_class(keras, type(optimizer))
    _attach(optimizer, None, "", "", compression, False, 1.0, Average, None, global_process_set,
            1.0)
    return optimizer


def load_model(keras, filepath, custom_optimizers=None, custom_objects=None,
               compression=Compression.none):
    """keras.models.load_model, with the model's optimizer (its restored state kept) made a
    DistributedOptimizer."""
    objects = dict(custom_objects or {})
    for opt in custom_optimizers or []:
        objects.setdefault(opt.__name__, opt)
    model = keras.models.load_model(filepath, custom_objects=objects or None)
    opt = getattr(model, "optimizer", None)
    if opt is not None:
        make_distributed_in_place(keras, opt, compression)
    return model
