"""Horovod's Keras callbacks for a given Keras module (Keras 3 or tf_keras):
BroadcastGlobalVariablesCallback, MetricAverageCallback, LearningRateScheduleCallback,
LearningRateWarmupCallback, BestModelCheckpoint."""
import numpy as np
import tensorflow as tf

from korovod.tensorflow import functions, mpi_ops
from korovod.tensorflow.mpi_ops import Average, global_process_set


def _optimizer_variables(optimizer):
    if optimizer is None:
        return []
    v = optimizer.variables
    return list(v() if callable(v) else v)


def _get_lr(optimizer):
    lr = optimizer.learning_rate
    return float(lr.numpy() if hasattr(lr, "numpy") else lr)


def _set_attr_value(optimizer, attr, value):
    current = getattr(optimizer, attr)
    if hasattr(current, "assign"):
        current.assign(value)
    else:
        setattr(optimizer, attr, value)


def make_callbacks(keras):
    Callback = keras.callbacks.Callback

    class BroadcastGlobalVariablesCallback(Callback):
        """Broadcasts the model's and the optimizer's variables from root_rank after the first
        batch (when the optimizer's variables exist), so every rank trains the same model."""

        def __init__(self, root_rank, device="", local_variables=None,
                     process_set=global_process_set):
            super().__init__()
            self.root_rank = root_rank
            self.device = device
            self.local_variables = {id(v) for v in (local_variables or [])}
            self.process_set = process_set
            self.broadcast_done = False

        def _broadcast(self):
            variables = [v for v in list(self.model.variables) +
                         _optimizer_variables(getattr(self.model, "optimizer", None))
                         if id(v) not in self.local_variables]
            with tf.device(self.device):
                functions.broadcast_variables(variables, root_rank=self.root_rank,
                                              process_set=self.process_set)

        def on_batch_end(self, batch, logs=None):
            if self.broadcast_done:
                return
            self._broadcast()
            self.broadcast_done = True

    class MetricAverageCallback(Callback):
        """Averages the epoch's metrics (logs) over the ranks at each epoch's end, so that every
        rank (and rank 0's printout) sees the job's figures, not its own shard's."""

        def __init__(self, device="", process_set=global_process_set):
            super().__init__()
            self.device = device
            self.process_set = process_set

        def on_epoch_end(self, epoch, logs=None):
            if not logs:
                return
            names = sorted(k for k, v in logs.items() if np.ndim(v) == 0)
            if not names:
                return
            values = tf.constant([float(logs[k]) for k in names], dtype=tf.float64)
            with tf.device(self.device):
                avg = mpi_ops._allreduce(values, name="korovod.metrics.%d" % epoch, op=Average,
                                         process_set=self.process_set).numpy()
            for k, v in zip(names, avg):
                logs[k] = float(v)

    class LearningRateScheduleCallback(Callback):
        """Sets the learning rate to initial_lr * multiplier (a number, or a function of the
        epoch) for epochs [start_epoch, end_epoch); per batch with a fractional epoch unless
        staircase. momentum_correction scales the momentum by new/old lr for the batch where the
        rate changes (Goyal et al.)."""

        def __init__(self, initial_lr, multiplier, start_epoch=0, end_epoch=None,
                     staircase=True, momentum_correction=True, steps_per_epoch=None):
            super().__init__()
            self.initial_lr = initial_lr
            self.start_epoch = start_epoch
            self.end_epoch = end_epoch
            self.staircase = staircase
            self.momentum_correction = momentum_correction
            self.steps_per_epoch = steps_per_epoch
            self.current_epoch = None
            self.restore_momentum = None
            if not callable(multiplier):
                self.staircase = True
                self.multiplier = lambda epoch: multiplier
            else:
                self.multiplier = multiplier
            if self.initial_lr is None:
                raise ValueError("initial_lr is required")

        def _autodetect_steps_per_epoch(self):
            steps = (self.params or {}).get("steps")
            if steps:
                return steps
            raise ValueError("Could not autodetect the number of steps per epoch. Please "
                             "specify the steps_per_epoch parameter to the %s() or upgrade to "
                             "the latest version of Keras." % self.__class__.__name__)

        def _adjust_learning_rate(self, epoch):
            optimizer = self.model.optimizer
            old_lr = _get_lr(optimizer)
            new_lr = self.initial_lr * self.multiplier(epoch)
            _set_attr_value(optimizer, "learning_rate", new_lr)
            if (self.momentum_correction and hasattr(optimizer, "momentum") and old_lr > 0 and
                    new_lr != old_lr):
                m = optimizer.momentum
                self.restore_momentum = float(m.numpy() if hasattr(m, "numpy") else m)
                _set_attr_value(optimizer, "momentum", self.restore_momentum * new_lr / old_lr)

        def _restore_momentum_if_needed(self):
            if self.restore_momentum is not None:
                _set_attr_value(self.model.optimizer, "momentum", self.restore_momentum)
                self.restore_momentum = None

        def on_train_begin(self, logs=None):
            if self.initial_lr is None:
                self.initial_lr = _get_lr(self.model.optimizer)
            if not self.staircase and not self.steps_per_epoch:
                self.steps_per_epoch = self._autodetect_steps_per_epoch()

        def on_epoch_begin(self, epoch, logs=None):
            self.current_epoch = epoch

        def on_batch_begin(self, batch, logs=None):
            if (self.current_epoch < self.start_epoch or
                    (self.end_epoch is not None and self.current_epoch >= self.end_epoch)):
                return  # outside the schedule's epochs
            if self.staircase and batch == 0:
                self._adjust_learning_rate(self.current_epoch)
            elif not self.staircase:
                epoch = self.current_epoch + float(batch) / self.steps_per_epoch
                self._adjust_learning_rate(epoch)

        def on_batch_end(self, batch, logs=None):
            self._restore_momentum_if_needed()

        def on_epoch_end(self, epoch, logs=None):
            if logs is not None:
                logs["lr"] = _get_lr(self.model.optimizer)

    class LearningRateWarmupCallback(LearningRateScheduleCallback):
        """Goyal et al.'s gradual warmup: from initial_lr / size to initial_lr over
        warmup_epochs, per batch."""

        def __init__(self, initial_lr, warmup_epochs=5, momentum_correction=True,
                     steps_per_epoch=None, verbose=0):
            def multiplier(epoch):
                # From 1/size at epoch 0 to 1 at warmup_epochs.
                n = mpi_ops.size()
                return 1.0 / n * (epoch * (n - 1) / warmup_epochs + 1)

            super().__init__(initial_lr, multiplier, start_epoch=0, end_epoch=warmup_epochs,
                             staircase=False, momentum_correction=momentum_correction,
                             steps_per_epoch=steps_per_epoch)
            self.verbose = verbose

        def on_epoch_end(self, epoch, logs=None):
            super().on_epoch_end(epoch, logs)
            if epoch == self.end_epoch - 1 and self.verbose > 0:
                print("\nEpoch %d: finished gradual learning rate warmup to %g." %
                      (epoch + 1, _get_lr(self.model.optimizer)))

    class BestModelCheckpoint(keras.callbacks.ModelCheckpoint):
        """ModelCheckpoint that keeps only the best model (save_best_only) by `monitor`."""

        def __init__(self, monitor="val_loss", verbose=0, mode="auto", save_freq="epoch",
                     filepath=None):
            if filepath is None:
                raise ValueError("BestModelCheckpoint needs filepath= (where the best model "
                                 "goes, e.g. 'best.keras')")
            super().__init__(filepath=filepath, monitor=monitor, verbose=verbose,
                             save_best_only=True, save_weights_only=False, mode=mode,
                             save_freq=save_freq)

    return dict(BroadcastGlobalVariablesCallback=BroadcastGlobalVariablesCallback,
                MetricAverageCallback=MetricAverageCallback,
                LearningRateScheduleCallback=LearningRateScheduleCallback,
                LearningRateWarmupCallback=LearningRateWarmupCallback,
                BestModelCheckpoint=BestModelCheckpoint)
