"""horovod.tensorflow's collectives on every rank, eagerly and inside tf.function, against the
values NumPy computes from every rank's inputs; gradients through the ops; Horovod's error types
for bad input. Prints "[r] rank r tf collectives OK" when every check passed."""
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ["HOROVOD_DYNAMIC_PROCESS_SETS"] = "1"

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import horovod.tensorflow as hvd  # noqa: E402

# One inter-op thread: a kernel that blocked its thread until the op completed would deadlock the
# graph below, whose ops complete only once every rank has submitted all of them.
tf.config.threading.set_inter_op_parallelism_threads(1)

hvd.init()
r, n = hvd.rank(), hvd.size()
DTYPES = [tf.uint8, tf.int8, tf.int16, tf.uint16, tf.int32, tf.int64, tf.float16, tf.bfloat16,
          tf.float32, tf.float64]


def value(rank, shape, dtype):
    base = np.arange(int(np.prod(shape)), dtype=np.float64).reshape(shape) % 7 + rank
    return tf.cast(tf.constant(base), dtype)


def check(got, want, what, tol=0):
    got = np.asarray(got.numpy() if hasattr(got, "numpy") else got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape, (what, got.shape, want.shape)
    assert np.allclose(got, want, atol=tol, rtol=tol), (what, got, want)


def every(shape, dtype):
    return [value(q, shape, dtype).numpy().astype(np.float64) for q in range(n)]


# ---- allreduce: every dtype, eager and in a graph ----
graph_sum = tf.function(lambda t: hvd.allreduce(t, op=hvd.Sum), reduce_retracing=True)
for dtype in DTYPES:
    x = value(r, [3, 4], dtype)
    want = sum(every([3, 4], dtype))
    tol = 0.1 if dtype in (tf.float16, tf.bfloat16) else 0
    check(hvd.allreduce(x, op=hvd.Sum), want, "eager sum %s" % dtype.name, tol)
    check(graph_sum(x), want, "graph sum %s" % dtype.name, tol)
    check(hvd.allreduce(x, op=hvd.Max), np.max(every([3, 4], dtype), axis=0), "max")
    check(hvd.allreduce(x, op=hvd.Min), np.min(every([3, 4], dtype), axis=0), "min")
x = value(r, [5], tf.float32)
check(hvd.allreduce(x), sum(every([5], tf.float32)) / n, "average (default)")
check(hvd.allreduce(x, op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.5),
      sum(every([5], tf.float32)), "scaled")
check(hvd.allreduce(tf.constant([r % 2 == 0, False]), op=hvd.Sum), [True, False], "bool or")
check(hvd.allreduce(x, compression=hvd.Compression.fp16), sum(every([5], tf.float32)) / n,
      "fp16 compression", 0.05)
check(hvd.allreduce(tf.Variable(x), op=hvd.Sum), sum(every([5], tf.float32)), "variable")

# IndexedSlices: gathered, averaged.
sl = tf.IndexedSlices(tf.constant([[float(r), 1.0]]), tf.constant([r]), tf.constant([n, 2]))
red = hvd.allreduce(sl)
assert isinstance(red, tf.IndexedSlices), type(red)
check(tf.convert_to_tensor(red), [[q / n, 1.0 / n] for q in range(n)], "indexed slices", 1e-6)

# grouped: mixed dtypes, one group per dtype.
g = hvd.grouped_allreduce([value(r, [2], tf.float32), value(r, [3], tf.int32),
                           value(r, [4], tf.float32)], op=hvd.Sum)
for got, shape, dt in zip(g, ([2], [3], [4]), (tf.float32, tf.int32, tf.float32)):
    check(got, sum(every(shape, dt)), "grouped %s" % dt.name)


# ---- ops in one graph need no thread each (one inter-op thread above) ----
# Rank 0 submits "a" at once and "b" only after a slow input; on the other ranks "a" waits for
# the result of "b". A kernel that held the graph's only thread until its op completed would hold
# it in "a" on rank 0, which completes only after "b", which rank 0 could then never submit.
def slow(t):
    return tf.py_function(lambda v: (time.sleep(0.3), v)[1], [t], t.dtype)


@tf.function
def crossed(a_in, b_in):
    if r == 0:
        a = hvd.allreduce(a_in, op=hvd.Sum, name="crossed.a")
        b = hvd.allreduce(slow(b_in), op=hvd.Sum, name="crossed.b")
    else:
        b = hvd.allreduce(b_in, op=hvd.Sum, name="crossed.b")
        a = hvd.allreduce(a_in + 0.0 * tf.reduce_sum(b), op=hvd.Sum, name="crossed.a")
    return a, b


a_got, b_got = crossed(value(r, [8], tf.float32), value(r, [9], tf.float32))
check(a_got, sum(every([8], tf.float32)), "crossed a")
check(b_got, sum(every([9], tf.float32)), "crossed b")


# 32 ops of one graph, all in flight together.
@tf.function
def many(ts):
    return [hvd.allreduce(t, op=hvd.Sum) for t in ts]


ts = [value(r, [64 + i], tf.float32) for i in range(32)]
for i, got in enumerate(many(ts)):
    check(got, sum(every([64 + i], tf.float32)), "many.%d" % i)

# ---- allgather, broadcast, alltoall, reducescatter ----
rows = r + 1
ag = hvd.allgather(tf.fill([rows, 3], float(r)))
check(ag, np.concatenate([np.full([q + 1, 3], float(q)) for q in range(n)]), "allgather uneven")
check(tf.function(lambda t: hvd.allgather(t))(tf.fill([rows, 3], float(r))),
      np.concatenate([np.full([q + 1, 3], float(q)) for q in range(n)]), "graph allgather")
for root in range(n):
    check(hvd.broadcast(value(r, [2, 2], tf.int64), root), value(root, [2, 2], tf.int64).numpy(),
          "broadcast from %d" % root)
splits = [q + 1 for q in range(n)]
send = tf.concat([tf.fill([s, 2], float(r * 10 + q)) for q, s in enumerate(splits)], 0)
out, recv = hvd.alltoall(send, splits=splits)
check(recv, [r + 1] * n, "alltoall received splits")
check(out, np.concatenate([np.full([r + 1, 2], float(q * 10 + r)) for q in range(n)]),
      "alltoall")
even = hvd.alltoall(tf.fill([n, 2], float(r)))  # no splits: the output alone, as Horovod
check(even, [[float(q)] * 2 for q in range(n)], "alltoall even")
rs = hvd.reducescatter(value(r, [2 * n, 3], tf.float32), op=hvd.Sum)
check(rs, sum(every([2 * n, 3], tf.float32))[2 * r:2 * r + 2], "reducescatter")
hvd.barrier()

# ---- objects, variables ----
assert hvd.broadcast_object({"from": r, "list": [r] * 3}, root_rank=n - 1) == \
    {"from": n - 1, "list": [n - 1] * 3}
assert hvd.allgather_object(("rank", r)) == [("rank", q) for q in range(n)]
vs = [tf.Variable(value(r, [3], tf.float32)), tf.Variable(value(r, [2, 2], tf.float64))]
hvd.broadcast_variables(vs, root_rank=0)
check(vs[0], value(0, [3], tf.float32).numpy(), "broadcast_variables")
check(vs[1], value(0, [2, 2], tf.float64).numpy(), "broadcast_variables")

# ---- process sets ----
evens = hvd.add_process_set([q for q in range(n) if q % 2 == 0])
want = sum(v for q, v in enumerate(every([2], tf.float32)) if q % 2 == 0)
if evens.included():
    check(hvd.allreduce(value(r, [2], tf.float32), op=hvd.Sum, process_set=evens), want, "evens")
    check(tf.function(lambda t: hvd.allreduce(t, op=hvd.Sum, process_set=evens))(
        value(r, [2], tf.float32)), want, "evens in a graph")
    check(hvd.broadcast(value(r, [2], tf.float32), 0, process_set=evens),
          value(0, [2], tf.float32).numpy(), "evens broadcast")
else:
    try:
        hvd.allreduce(value(r, [2], tf.float32), process_set=evens)
        raise AssertionError("a rank outside the set was accepted")
    except ValueError:
        pass
hvd.remove_process_set(evens)

# ---- gradients through the ops ----
w = tf.Variable(value(r, [4], tf.float32))
with tf.GradientTape() as tape:
    y = hvd.allreduce(w * w, op=hvd.Sum)
    loss = tf.reduce_sum(y)
check(tape.gradient(loss, w), 2 * w.numpy() * n, "allreduce grad")
with tf.GradientTape() as tape:
    tape.watch(x)
    loss = tf.reduce_sum(hvd.allgather(x) * 2.0)
check(tape.gradient(loss, x), np.full([5], 2.0), "allgather grad")
with tf.GradientTape() as tape:
    tape.watch(x)
    loss = tf.reduce_sum(hvd.broadcast(x, 0))
check(tape.gradient(loss, x), np.full([5], 1.0 if r == 0 else 0.0), "broadcast grad")

# DistributedGradientTape, eager and in tf.function: the mean of every rank's gradient.
wt = tf.Variable([1.0, 2.0, 3.0])


def local_grad(q):
    return 2 * np.array([1.0, 2.0, 3.0]) * (q + 1)


for mode in ("eager", "graph"):
    def step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(wt * wt) * float(r + 1)
        return hvd.DistributedGradientTape(tape).gradient(loss, [wt])[0]
    got = step() if mode == "eager" else tf.function(step)()
    check(got, np.mean([local_grad(q) for q in range(n)], axis=0), "tape %s" % mode, 1e-6)
with tf.GradientTape() as tape:
    loss = tf.reduce_sum(wt * wt) * float(r + 1)
got = hvd.DistributedGradientTape(tape, op=hvd.Sum, num_groups=1).gradient(loss, [wt])[0]
check(got, np.sum([local_grad(q) for q in range(n)], axis=0), "tape sum grouped", 1e-6)
with tf.GradientTape() as tape:
    loss = tf.reduce_sum(wt * wt) * float(r + 1)
got = hvd.DistributedGradientTape(tape, gradient_predivide_factor=2.0).gradient(loss, [wt])[0]
check(got, np.mean([local_grad(q) for q in range(n)], axis=0), "tape predivide", 1e-6)

# Local sources and PartialDistributedGradientTape: those gradients stay this rank's (/ size).
wl = tf.Variable([1.0, 2.0])
with tf.GradientTape() as tape:
    loss = (tf.reduce_sum(wt * wt) + tf.reduce_sum(wl * wl)) * float(r + 1)
dt = hvd.DistributedGradientTape(tape)
dt.register_local_source(wl)
local, shared = dt.get_local_and_global_gradients(loss, [wt, wl])
check(local[0][1], 2 * np.array([1.0, 2.0]) * (r + 1) / n, "local source", 1e-6)
check(shared[0][1], np.mean([local_grad(q) for q in range(n)], axis=0), "global source", 1e-6)
layer = tf.keras.layers.Dense(1, kernel_initializer="ones", bias_initializer="zeros")
with tf.GradientTape() as tape:
    loss = tf.reduce_sum(layer(tf.fill([1, 2], float(r + 1)))) + tf.reduce_sum(wt) * float(r)
grads = hvd.PartialDistributedGradientTape(tape, local_layers=[layer]).gradient(
    loss, [wt] + layer.trainable_weights)
check(grads[0], [np.mean(range(n))] * 3, "partial: shared", 1e-6)
check(grads[1], [[(r + 1.0) / n]] * 2, "partial: local kernel", 1e-6)

# Sparse gradients (an embedding lookup's IndexedSlices): gathered and averaged, or dense.
emb = tf.Variable(tf.ones([n + 1, 2]))
want = np.array([[(q + 1.0) / n] * 2 for q in range(n)] + [[0.0, 0.0]])
for sparse_as_dense in (False, True):
    for predivide in (1.0, 2.0):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.gather(emb, [r])) * float(r + 1)
        g = hvd.DistributedGradientTape(tape, sparse_as_dense=sparse_as_dense,
                                        gradient_predivide_factor=predivide).gradient(loss, [emb])[0]
        assert isinstance(g, tf.IndexedSlices) != sparse_as_dense, type(g)
        check(tf.convert_to_tensor(g), want, "sparse grads %s" % sparse_as_dense, 1e-6)
try:
    hvd.allreduce(sl, prescale_factor=0.5)
    raise AssertionError("a scaled IndexedSlices allreduce was accepted")
except NotImplementedError:
    pass

# hvd.DistributedOptimizer of a Keras optimizer: apply_gradients applies the average.
kv = tf.Variable([0.0, 0.0])
kopt = hvd.DistributedOptimizer(tf.keras.optimizers.SGD(1.0))
kopt.apply_gradients([(tf.constant([float(r), 1.0]), kv)])
check(kv, [-(n - 1) / 2.0, -1.0], "DistributedOptimizer(keras)", 1e-6)

# ---- bad input: Horovod's error types, and the ranks go on ----
try:
    hvd.allreduce(tf.ones([r + 1]), name="mismatched.shape")
    raise AssertionError("mismatched shapes were accepted")
except tf.errors.FailedPreconditionError as e:
    assert "mismatched" in e.message and "mismatched.shape" in e.message, e.message
try:
    hvd.allreduce(tf.ones([2], dtype=tf.float32 if r == 0 else tf.int32), name="mismatched.dtype")
    raise AssertionError("mismatched dtypes were accepted")
except tf.errors.FailedPreconditionError as e:
    assert "dtype" in e.message, e.message
try:
    hvd.allreduce(tf.constant(["a", "b"]))
    raise AssertionError("a string tensor was accepted")
except (TypeError, tf.errors.InvalidArgumentError, tf.errors.NotFoundError):
    pass
try:
    hvd.allreduce(x, op=12345)
    raise AssertionError("an unknown op was accepted")
except ValueError:
    pass
check(hvd.allreduce(x, op=hvd.Sum), sum(every([5], tf.float32)), "after errors")
assert int(hvd.size_op()) == n and int(hvd.rank_op()) == r
assert hvd.join() in range(n)

# The GPU kernels are in the library wherever it is built (this tensorflow-cpu has no GPU to place
# them on): each tensor op has a GPU kernel beside its CPU one, alltoall's splits in host memory.
from tensorflow.python.framework import kernels  # noqa: E402
from korovod.tensorflow import mpi_ops  # noqa: E402

assert mpi_ops._GPU_KERNELS
for op in ("KorovodAllreduce", "KorovodGroupedAllreduce", "KorovodAllgather", "KorovodBroadcast",
           "KorovodAlltoall", "KorovodReducescatter", "KorovodJoin", "KorovodRank", "KorovodSize"):
    devices = sorted(k.device_type for k in kernels.get_registered_kernels_for_op(op).kernel)
    assert devices == ["CPU", "GPU"], (op, devices)
alltoall_gpu = [k for k in kernels.get_registered_kernels_for_op("KorovodAlltoall").kernel
                if k.device_type == "GPU"][0]
assert sorted(alltoall_gpu.host_memory_arg) == ["received_splits", "splits"], alltoall_gpu
# A sidecar without NCCL (here: none) takes no device tensors: hvd.cuda_built() says GPU tensors
# would be copied. With no GPU in this process the ops need no CPU scope (none is entered per op);
# they run on the CPU.
assert not hvd.cuda_built() and hvd.nccl_built() == 0
assert not mpi_ops._ops_on_cpu
assert "CPU" in hvd.allreduce(tf.ones([2])).device

hvd.shutdown()
try:
    hvd.allreduce(x)
    raise AssertionError("an op after shutdown was accepted")
except ValueError as e:
    assert "not been initialized" in str(e), e
try:  # the kernel itself, past the Python checks
    hvd.mpi_ops.MPI_LIB.korovod_allreduce(x, reduce_op=0, prescale_factor=1.0,
                                          postscale_factor=1.0)
    raise AssertionError("a kernel ran after shutdown")
except tf.errors.FailedPreconditionError as e:
    assert "not been initialized" in e.message, e.message
print("rank %d tf collectives OK" % r, flush=True)
