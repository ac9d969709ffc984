"""The horovod.keras / horovod.tensorflow.keras module contents for a given Keras module."""
import types

import korovod.tensorflow as _hvd
from korovod import _keras
from korovod._keras.callbacks import make_callbacks
from korovod._keras.elastic import make_elastic
from korovod.tensorflow.compression import Compression
from korovod.tensorflow.mpi_ops import Average, global_process_set

# Horovod's keras modules re-export the basics and collectives of horovod.tensorflow.
_SHARED = [
    "init", "shutdown", "is_initialized", "size", "local_size", "cross_size", "rank",
    "local_rank", "cross_rank", "is_homogeneous", "mpi_threads_supported", "mpi_enabled",
    "mpi_built", "gloo_enabled", "gloo_built", "nccl_built", "ddl_built", "ccl_built",
    "cuda_built", "rocm_built", "sycl_built", "start_timeline", "stop_timeline", "ProcessSet",
    "global_process_set", "add_process_set", "remove_process_set", "Average", "Sum", "Adasum",
    "Min", "Max", "Product", "Compression", "broadcast_object", "allgather_object", "barrier",
    "join", "HorovodInternalError",
]


def build(keras, module_name):
    """Fills a horovod.keras-like namespace for `keras`; returns (names, callbacks module,
    elastic module)."""
    ns = {n: getattr(_hvd, n) for n in _SHARED}

    def DistributedOptimizer(optimizer, name=None, device_dense="", device_sparse="",
                             compression=Compression.none, sparse_as_dense=False,
                             gradient_predivide_factor=1.0, op=Average,
                             backward_passes_per_step=1, average_aggregated_gradients=False,
                             num_groups=0, groups=None, process_set=global_process_set,
                             scale_local_gradients=True):
        """An optimizer that averages (op) the gradients over the ranks before each update."""
        return _keras.create_distributed_optimizer(
            keras, optimizer, name, device_dense, device_sparse, compression, sparse_as_dense,
            gradient_predivide_factor, op, backward_passes_per_step,
            average_aggregated_gradients, num_groups, groups, process_set,
            scale_local_gradients)

    def broadcast_global_variables(root_rank):
        raise RuntimeError("hvd.broadcast_global_variables() is TensorFlow 1 graph mode; use "
                           "hvd.callbacks.BroadcastGlobalVariablesCallback or "
                           "hvd.broadcast_variables(model.variables, root_rank)")

    def allreduce(value, name=None, average=None, prescale_factor=1.0, postscale_factor=1.0,
                  op=None, compression=Compression.none, process_set=global_process_set):
        """A value (tensor, array or number) reduced over the ranks, as a NumPy value."""
        import tensorflow as tf
        out = _hvd.allreduce(tf.convert_to_tensor(value), name=name, average=average,
                             prescale_factor=prescale_factor, postscale_factor=postscale_factor,
                             op=op, compression=compression, process_set=process_set)
        return out.numpy() if hasattr(out, "numpy") else out

    def allgather(value, name=None, process_set=global_process_set):
        import tensorflow as tf
        out = _hvd.allgather(tf.convert_to_tensor(value), name=name, process_set=process_set)
        return out.numpy() if hasattr(out, "numpy") else out

    def broadcast(value, root_rank, name=None, process_set=global_process_set):
        import tensorflow as tf
        out = _hvd.broadcast(tf.convert_to_tensor(value), root_rank, name=name,
                             process_set=process_set)
        return out.numpy() if hasattr(out, "numpy") else out

    def reducescatter(value, name=None, op=Average, process_set=global_process_set):
        import tensorflow as tf
        out = _hvd.reducescatter(tf.convert_to_tensor(value), name=name, op=op,
                                 process_set=process_set)
        return out.numpy() if hasattr(out, "numpy") else out

    def load_model(filepath, custom_optimizers=None, custom_objects=None,
                   compression=Compression.none):
        """keras.models.load_model; the model's optimizer (and its restored state) made a
        DistributedOptimizer."""
        return _keras.load_model(keras, filepath, custom_optimizers, custom_objects,
                                 compression)

    ns.update(DistributedOptimizer=DistributedOptimizer,
              broadcast_global_variables=broadcast_global_variables, allreduce=allreduce,
              allgather=allgather, broadcast=broadcast, reducescatter=reducescatter,
              load_model=load_model)

    callbacks = types.ModuleType(module_name + ".callbacks",
                                 "Horovod's Keras callbacks (%s)" % keras.__name__)
    callbacks.__dict__.update(make_callbacks(keras))
    elastic = types.ModuleType(module_name + ".elastic",
                               "Horovod's Keras elastic state and callbacks (%s)" % keras.__name__)
    elastic.__dict__.update(make_elastic(keras))
    return ns, callbacks, elastic
