"""Horovod's Keras API on korovod (argv[1]: the module, horovod.tensorflow.keras or
horovod.keras; TF_USE_LEGACY_KERAS picks Keras 3 or tf_keras): DistributedOptimizer keeps the
replicas identical, the learning-rate callbacks set Horovod's rates, MetricAverageCallback averages
the logs, BestModelCheckpoint keeps the best model, load_model gives back a distributed optimizer
with its state, the elastic KerasState restores and syncs. Prints "[r] rank r keras OK"."""
import importlib
import os
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

module = sys.argv[1]
hvd = importlib.import_module(module)
if module == "horovod.tensorflow.keras":
    keras = tf.keras
else:
    keras = importlib.import_module(
        "tf_keras" if os.environ.get("TF_USE_LEGACY_KERAS") == "1" else "keras")
keras3 = not keras.__name__.startswith("tf_keras")
hvd.init()
r, n = hvd.rank(), hvd.size()


def model_fn(seed):
    keras.utils.set_random_seed(seed)
    return keras.Sequential([keras.Input(shape=(4,)), keras.layers.Dense(8, activation="relu"),
                             keras.layers.Dense(1)])


def weights_digest(model):
    return [float(np.sum(w)) for w in model.get_weights()]


rng = np.random.RandomState(r)  # every rank its own data
x = rng.rand(32, 4).astype(np.float32)
y = rng.rand(32, 1).astype(np.float32)

# ---- replicas stay identical (different initial weights: the broadcast callback aligns them) ----
model = model_fn(seed=100 + r)
opt = hvd.DistributedOptimizer(keras.optimizers.SGD(learning_rate=0.05, momentum=0.9))
model.compile(loss="mse", optimizer=opt)
lr_seen = []


class RecordLR(keras.callbacks.Callback):
    def on_batch_begin(self, batch, logs=None):
        lr = self.model.optimizer.learning_rate
        lr_seen.append(float(lr.numpy() if hasattr(lr, "numpy") else lr))


logs_seen = []


class RecordLogs(keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        logs_seen.append(dict(logs))


warmup = hvd.callbacks.LearningRateWarmupCallback(initial_lr=0.05, warmup_epochs=2,
                                                  steps_per_epoch=4)
hist = model.fit(x, y, batch_size=8, epochs=3, shuffle=False, verbose=0,
                 callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0),
                            hvd.callbacks.MetricAverageCallback(), warmup, RecordLR(),
                            RecordLogs()])
digests = hvd.allgather_object(weights_digest(model))
assert all(np.allclose(d, digests[0]) for d in digests), digests
# Warmup: 1/size at the first batch, then linearly to the full rate at warmup_epochs.
assert abs(lr_seen[0] - 0.05 / n) < 1e-7, lr_seen
want = [0.05 / n * ((e + b / 4.0) * (n - 1) / 2 + 1) for e in range(2) for b in range(4)]
assert np.allclose(lr_seen[:8], want, rtol=1e-5), (lr_seen[:8], want)
# After warmup_epochs the rate stays where the last warmup batch set it (Horovod's behaviour: its
# examples follow with a LearningRateScheduleCallback from warmup_epochs on).
assert np.allclose(lr_seen[8:], want[-1]), lr_seen
# MetricAverageCallback: every rank's epoch logs are the average.
losses = hvd.allgather_object([l["loss"] for l in logs_seen])
assert all(np.allclose(ls, losses[0]) for ls in losses), losses

# ---- LearningRateScheduleCallback: a multiplier per epoch, staircase ----
model2 = model_fn(seed=7)
model2.compile(loss="mse", optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.1)))
lr_seen.clear()
sched = hvd.callbacks.LearningRateScheduleCallback(initial_lr=0.1, multiplier=lambda e: 0.5 ** e,
                                                   start_epoch=1, end_epoch=3)
model2.fit(x, y, batch_size=16, epochs=4, shuffle=False, verbose=0,
           callbacks=[sched, RecordLR()])
assert np.allclose(lr_seen, [0.1, 0.1, 0.05, 0.05, 0.025, 0.025, 0.025, 0.025]), lr_seen

# ---- BestModelCheckpoint on rank 0, load_model ----
tmp = tempfile.mkdtemp(prefix="korovod-keras-")
path = os.path.join(tmp, "best.keras" if keras3 else "best.h5")
cbs = [hvd.callbacks.BestModelCheckpoint(monitor="loss", filepath=path)] if r == 0 else []
model.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0, callbacks=cbs)
path = hvd.broadcast_object(path if r == 0 and os.path.exists(path) else None, root_rank=0)
assert path is not None, "BestModelCheckpoint wrote nothing"
hvd.barrier()
loaded = hvd.load_model(path)
assert getattr(loaded.optimizer, "_korovod_allreduce", None) is not None, type(loaded.optimizer)
loaded.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0)
digests = hvd.allgather_object(weights_digest(loaded))
assert all(np.allclose(d, digests[0]) for d in digests), digests

# ---- backward_passes_per_step (Keras 3: the optimizer's gradient accumulation) ----
if keras3:
    m3 = model_fn(seed=3)
    m3.compile(loss="mse", optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.01),
                                                              backward_passes_per_step=2))
    before = weights_digest(m3)
    m3.fit(x[:8], y[:8], batch_size=8, epochs=1, verbose=0)  # one pass: no update yet
    assert np.allclose(weights_digest(m3), before)
    m3.fit(x[:8], y[:8], batch_size=8, epochs=1, verbose=0)  # the second pass applies
    assert not np.allclose(weights_digest(m3), before)
    digests = hvd.allgather_object(weights_digest(m3))
    assert all(np.allclose(d, digests[0]) for d in digests), digests
    # The gradients cross the ranks on update steps only: 4 passes, 2 reductions. Each applies
    # the sum of its 2 passes' gradients averaged over the ranks (Horovod's rule), as one SGD
    # step of lr on the sum of both batches' gradients on one process would.
    m4 = model_fn(seed=4)
    opt4 = hvd.DistributedOptimizer(keras.optimizers.SGD(0.01), backward_passes_per_step=2)
    reductions = []
    reduce4 = opt4._korovod_allreduce
    opt4._korovod_allreduce = lambda g, v: (reductions.append(len(g)), reduce4(g, v))[1]
    m4.compile(loss="mse", optimizer=opt4, run_eagerly=True)
    w0 = [w.copy() for w in m4.get_weights()]
    m4.fit(x[:16], y[:16], batch_size=8, epochs=1, shuffle=False, verbose=0)
    assert len(reductions) == 1, reductions
    m4.fit(x[:16], y[:16], batch_size=8, epochs=1, shuffle=False, verbose=0)
    assert len(reductions) == 2, reductions
    # One update of the summed gradients: the reference on every rank's batches in one process.
    ref = model_fn(seed=4)
    ref.set_weights(w0)
    xs = np.concatenate(hvd.allgather_object(x[:16]))
    ys = np.concatenate(hvd.allgather_object(y[:16]))
    with tf.GradientTape() as tape:
        # Each rank's 2 batches of 8: the mean loss per batch, summed over the 2, averaged over
        # the ranks.
        per_rank = tf.reshape(tf.reduce_mean(tf.reshape(
            tf.square(ref(xs) - ys), [n, 2, 8, -1]), axis=[2, 3]), [n, 2])
        loss = tf.reduce_mean(tf.reduce_sum(per_rank, axis=1))
    grads = tape.gradient(loss, ref.trainable_variables)
    once = [w - 0.01 * g.numpy() for w, g in zip(w0, grads)]
    m5 = model_fn(seed=4)
    opt5 = hvd.DistributedOptimizer(keras.optimizers.SGD(0.01), backward_passes_per_step=2)
    m5.compile(loss="mse", optimizer=opt5)
    m5.set_weights(w0)
    m5.fit(x[:16], y[:16], batch_size=8, epochs=1, shuffle=False, verbose=0)  # graph mode
    assert all(np.allclose(a, b, atol=1e-5) for a, b in zip(m5.get_weights(), once)), \
        [np.abs(a - b).max() for a, b in zip(m5.get_weights(), once)]

# ---- the elastic KerasState: restore the commit, sync from rank 0 ----
state = hvd.elastic.KerasState(model, batch=0, epoch=0)
committed = model.get_weights()
state.commit()
model.set_weights([w + 1.0 for w in committed])
state.epoch = 5
state.restore()
assert all(np.allclose(a, b) for a, b in zip(model.get_weights(), committed))
assert state.epoch == 0
model.set_weights([w + r for w in committed])
state.sync()
digests = hvd.allgather_object(weights_digest(model))
assert all(np.allclose(d, digests[0]) for d in digests), digests
synced = model.get_weights()
model.set_weights([w + 5.0 for w in synced])
state.restore()  # back to the synced weights, not this rank's own from before
assert all(np.allclose(a, b) for a, b in zip(model.get_weights(), synced))

# ---- SyncBatchNormalization (horovod.tensorflow's, a tf.keras layer): the statistics of the
# global batch, as one BatchNormalization over every rank's rows ----
if module == "horovod.tensorflow.keras":
    import horovod.tensorflow as hvd_tf
    xs = tf.constant(np.stack([np.arange(8, dtype=np.float32).reshape(4, 2) * (q + 1)
                               for q in range(n)]))
    bn = keras.layers.BatchNormalization(axis=-1)
    ref = bn(tf.reshape(xs, [-1, 2]), training=True).numpy().reshape(n, 4, 2)
    sbn = hvd_tf.SyncBatchNormalization(axis=-1)
    assert np.allclose(sbn(xs[r], training=True).numpy(), ref[r], atol=1e-4)
    assert np.allclose(sbn.moving_mean.numpy(), bn.moving_mean.numpy(), atol=1e-5)
    assert np.allclose(sbn.moving_variance.numpy(), bn.moving_variance.numpy(), atol=1e-4)

# ---- bad input ----
try:
    hvd.DistributedOptimizer(opt)
    raise AssertionError("a distributed optimizer was wrapped twice")
except ValueError:
    pass
print("rank %d keras OK" % r, flush=True)
