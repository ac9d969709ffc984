"""Allreduce of a list of gradients, as DistributedGradientTape and the Keras
DistributedOptimizer do it: dense gradients reduced by the engine (one op each, or grouped), sparse
ones (tf.IndexedSlices) gathered unless sparse_as_dense, compression, gradient_predivide_factor,
process sets. Run eagerly it is traced into one tf.function per gradient signature, so every
gradient's op is in flight at once and Tensor Fusion sees the whole burst."""
import tensorflow as tf

from korovod.tensorflow import mpi_ops
from korovod.tensorflow.compression import Compression
from korovod.tensorflow.mpi_ops import Adasum, Average, Sum, global_process_set


def allreduce(tensor, average=None, device_dense="", device_sparse="",
              compression=Compression.none, op=None, prescale_factor=1.0, postscale_factor=1.0,
              name=None, process_set=global_process_set, ignore_name_scope=False):
    """Horovod's hvd.allreduce: a tf.Tensor (or tf.Variable) reduced by `op` (default Average),
    or a tf.IndexedSlices gathered (values and indices; averaged for Average)."""
    op = mpi_ops.handle_average_backwards_compatibility(op, average)
    if isinstance(tensor, tf.IndexedSlices):
        if op == Adasum:
            raise NotImplementedError("The Adasum reduction does not currently support sparse "
                                      "tensors. As a workaround please pass sparse_as_dense=True "
                                      "to DistributedOptimizer")
        if op not in (Sum, Average):
            raise NotImplementedError("korovod: a sparse (IndexedSlices) allreduce takes op=Sum "
                                      "or op=Average")
        if prescale_factor != 1.0 or postscale_factor != 1.0:
            raise NotImplementedError("Pre/postscaling is not supported with tf.IndexedSlices")
        with tf.device(device_sparse):
            values = mpi_ops.allgather(tensor.values, name=None if name is None else name + ".v",
                                       process_set=process_set,
                                       ignore_name_scope=ignore_name_scope)
            indices = mpi_ops.allgather(tensor.indices,
                                        name=None if name is None else name + ".i",
                                        process_set=process_set,
                                        ignore_name_scope=ignore_name_scope)
            if op == Average:
                values = values / tf.cast(mpi_ops._set_size(process_set), values.dtype)
        return tf.IndexedSlices(values, indices, dense_shape=tensor.dense_shape)
    with tf.device(device_dense):
        compressed, ctx = compression.compress(tf.convert_to_tensor(tensor))
        reduced = mpi_ops._allreduce(compressed, name=name, op=op,
                                     prescale_factor=prescale_factor,
                                     postscale_factor=postscale_factor,
                                     ignore_name_scope=ignore_name_scope, process_set=process_set)
        return compression.decompress(reduced, ctx)


def grouped_allreduce(tensors, average=None, device_dense="", device_sparse="",
                      compression=Compression.none, op=None, prescale_factor=1.0,
                      postscale_factor=1.0, process_set=global_process_set,
                      ignore_name_scope=False, name=None):
    """Horovod's hvd.grouped_allreduce: dense tensors negotiated and fused as one group per
    dtype; tf.IndexedSlices among them are gathered."""
    op = mpi_ops.handle_average_backwards_compatibility(op, average)
    tensors = list(tensors)
    out = [None] * len(tensors)
    dense, ctxs = [], []
    for i, t in enumerate(tensors):
        if isinstance(t, tf.IndexedSlices):
            out[i] = allreduce(t, device_sparse=device_sparse, op=op,
                               prescale_factor=prescale_factor,
                               postscale_factor=postscale_factor, process_set=process_set,
                               ignore_name_scope=ignore_name_scope)
        else:
            c, ctx = compression.compress(tf.convert_to_tensor(t))
            dense.append((i, c))
            ctxs.append(ctx)
    if dense:
        with tf.device(device_dense):
            reduced = mpi_ops._grouped_allreduce(
                [c for _, c in dense], name=name, op=op, prescale_factor=prescale_factor,
                postscale_factor=postscale_factor, ignore_name_scope=ignore_name_scope,
                process_set=process_set)
        for (i, _), r, ctx in zip(dense, reduced, ctxs):
            out[i] = compression.decompress(r, ctx)
    return out


def _scaling(op, gradient_predivide_factor, process_set):
    """(engine op, prescale, postscale): Horovod's predivide splits an average into a division by
    the factor before the sum and by size/factor after it."""
    if op == Average and gradient_predivide_factor != 1.0:
        n = mpi_ops._set_size(process_set)
        return Sum, 1.0 / gradient_predivide_factor, gradient_predivide_factor / n
    return op, 1.0, 1.0


def make_allreduce_grads_fn(name, device_dense, device_sparse, compression, sparse_as_dense, op,
                            gradient_predivide_factor=1.0, groups=None,
                            process_set=global_process_set):
    """grads (a list, None entries kept) -> reduced grads. groups: None (each gradient its own
    op), an int (that many groups) or lists of variables (matched by `vars` at call time)."""
    if op == Adasum and gradient_predivide_factor != 1.0:
        raise ValueError("gradient_predivide_factor not supported with op == Adasum")
    engine_op, prescale, postscale = _scaling(op, gradient_predivide_factor, process_set)

    def reduce(grads, variables=None):
        with tf.name_scope(name + "_Allreduce"):
            if sparse_as_dense:
                grads = [tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g
                         for g in grads]
            present = [i for i, g in enumerate(grads) if g is not None]
            out = list(grads)
            if groups is None:
                for i in present:
                    if isinstance(grads[i], tf.IndexedSlices):  # gathered: no scaling to split
                        out[i] = allreduce(grads[i], device_sparse=device_sparse, op=op,
                                           process_set=process_set)
                        continue
                    out[i] = allreduce(grads[i], device_dense=device_dense,
                                       device_sparse=device_sparse, compression=compression,
                                       op=engine_op, prescale_factor=prescale,
                                       postscale_factor=postscale, process_set=process_set)
                return out
            for i in present:
                if isinstance(grads[i], tf.IndexedSlices):  # gathered, outside the groups
                    out[i] = allreduce(grads[i], device_sparse=device_sparse, op=op,
                                       process_set=process_set)
            dense = [i for i in present if not isinstance(grads[i], tf.IndexedSlices)]
            for members in _group_indices(groups, dense, variables):
                reduced = grouped_allreduce([grads[i] for i in members],
                                            device_dense=device_dense,
                                            device_sparse=device_sparse,
                                            compression=compression, op=engine_op,
                                            prescale_factor=prescale, postscale_factor=postscale,
                                            process_set=process_set)
                for i, r in zip(members, reduced):
                    out[i] = r
            return out

    traced = {}

    def allreduce_grads(grads, variables=None):
        grads = list(grads)
        if not tf.executing_eagerly():
            return reduce(grads, variables)
        # One graph for the whole burst (traced once per signature of the gradients present).
        present = [i for i, g in enumerate(grads) if g is not None]
        key = tuple(present)
        fn = traced.get(key)
        if fn is None:
            @tf.function(autograph=False)
            def fn(gs):
                full = [None] * len(grads)
                for i, g in zip(present, gs):
                    full[i] = g
                reduced = reduce(full, variables)
                return [reduced[i] for i in present]
            traced[key] = fn
        reduced = fn([grads[i] for i in present])
        out = list(grads)
        for i, r in zip(present, reduced):
            out[i] = r
        return out

    return allreduce_grads


def _group_indices(groups, present, variables):
    if isinstance(groups, int):
        if groups <= 0:
            return [present] if present else []
        n = min(groups, len(present)) or 1
        size, extra = divmod(len(present), n)
        out, start = [], 0
        for g in range(n):
            end = start + size + (1 if g < extra else 0)
            if end > start:
                out.append(present[start:end])
            start = end
        return out
    # Lists of variables: each list one group, the gradients of other variables one each.
    if variables is None:
        raise ValueError("groups of variables need the variables the gradients are for")
    pos = {id(v): i for i, v in enumerate(variables)}
    seen, out = set(), []
    for group in groups:
        members = [pos[id(v)] for v in group if id(v) in pos and pos[id(v)] in present]
        if members:
            out.append(sorted(members))
            seen.update(members)
    out += [[i] for i in present if i not in seen]
    return out
