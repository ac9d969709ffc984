"""SyncBatchNormalization: Keras batch normalization whose batch statistics are those of every
rank's batch together (Horovod's hvd.SyncBatchNormalization), on Keras 3 and tf_keras."""
import tensorflow as tf

from korovod.tensorflow import mpi_ops


class SyncBatchNormalization(tf.keras.layers.BatchNormalization):
    """BatchNormalization with the mean and variance taken over the whole global batch: each
    rank's moments are combined by one allreduce (Var = E[X^2] - E[X]^2)."""

    def __init__(self, fused=False, **kwargs):
        if fused in (True, None):
            raise ValueError("SyncBatchNormalization does not support fused=True.")
        if not kwargs.get("name"):
            kwargs["name"] = "sync_batch_normalization"
        if tf.keras.__name__.startswith("tf_keras"):
            kwargs["fused"] = fused  # Keras 2 has a fused kernel, which must stay off
        super().__init__(**kwargs)  # Keras 3 has none

    def _moments(self, *args, **kwargs):
        worker_mean, worker_variance = super()._moments(*args, **kwargs)
        n = mpi_ops.size()
        if n == 1:
            return worker_mean, worker_variance
        worker_mean_of_square = worker_variance + tf.math.square(worker_mean)
        stack = tf.stack([worker_mean, worker_mean_of_square])
        group = mpi_ops._allreduce(stack, op=mpi_ops.Sum) / tf.cast(n, stack.dtype)
        group_mean, group_mean_of_square = tf.unstack(group)
        return group_mean, group_mean_of_square - tf.math.square(group_mean)
