"""hvd.DistributedOptimizer of horovod.tensorflow: a Keras optimizer (Keras 3 or tf_keras) is
wrapped as horovod.tensorflow.keras does; a TensorFlow 1 optimizer (tf.compat.v1.train) gets
compute_gradients() that returns the reduced gradients."""
import tensorflow as tf

from korovod.tensorflow.compression import Compression
from korovod.tensorflow.gradient_aggregation import make_allreduce_grads_fn
from korovod.tensorflow.mpi_ops import Average, global_process_set


class _DistributedLegacyOptimizer(tf.compat.v1.train.Optimizer):
    """A tf.compat.v1.train.Optimizer whose compute_gradients() allreduces what the wrapped one
    computes; the rest is the wrapped optimizer's."""

    def __init__(self, optimizer, name, use_locking, allreduce_grads):
        super().__init__(name=name, use_locking=use_locking)
        self._optimizer = optimizer
        self._allreduce_grads = allreduce_grads

    def compute_gradients(self, *args, **kwargs):
        gradients = self._optimizer.compute_gradients(*args, **kwargs)
        grads, variables = zip(*gradients)
        return list(zip(self._allreduce_grads(list(grads), list(variables)), variables))

    def apply_gradients(self, *args, **kwargs):
        return self._optimizer.apply_gradients(*args, **kwargs)

    def get_slot(self, *args, **kwargs):
        return self._optimizer.get_slot(*args, **kwargs)

    def get_slot_names(self, *args, **kwargs):
        return self._optimizer.get_slot_names(*args, **kwargs)

    def variables(self, *args, **kwargs):
        return self._optimizer.variables(*args, **kwargs)


def DistributedOptimizer(optimizer, name=None, use_locking=False, device_dense="",
                         device_sparse="", compression=Compression.none, sparse_as_dense=False,
                         backward_passes_per_step=1, op=Average, gradient_predivide_factor=1.0,
                         average_aggregated_gradients=False, num_groups=0, groups=None,
                         process_set=global_process_set, scale_local_gradients=True):
    """An optimizer whose gradients are averaged (op) over the ranks of process_set."""
    if isinstance(optimizer, tf.compat.v1.train.Optimizer):
        if backward_passes_per_step != 1:
            raise NotImplementedError("korovod: backward_passes_per_step > 1 with a TensorFlow 1 "
                                      "optimizer (local gradient aggregation) is not supported")
        if num_groups != 0:
            groups = int(num_groups)
        name = name or "Distributed%s" % type(optimizer).__name__
        fn = make_allreduce_grads_fn(name, device_dense, device_sparse, compression,
                                     sparse_as_dense, op, gradient_predivide_factor, groups,
                                     process_set)
        return _DistributedLegacyOptimizer(optimizer, name, use_locking, fn)
    from korovod import _keras
    keras = tf.keras
    if not isinstance(optimizer, keras.optimizers.Optimizer):
        try:
            import keras as keras3
            if isinstance(optimizer, keras3.optimizers.Optimizer):
                keras = keras3
        except ImportError:
            pass
    if not isinstance(optimizer, keras.optimizers.Optimizer):
        raise ValueError("Provided optimizer doesn't inherit from either legacy TensorFlow or "
                         "Keras optimizer: %s" % optimizer)
    return _keras.create_distributed_optimizer(
        keras, optimizer, name, device_dense, device_sparse, compression, sparse_as_dense,
        gradient_predivide_factor, op, backward_passes_per_step, average_aggregated_gradients,
        num_groups, groups, process_set, scale_local_gradients)
