"""Horovod's Keras elastic pieces for a given Keras module: KerasState and the callbacks that
keep it current (CommitStateCallback, UpdateBatchStateCallback, UpdateEpochStateCallback)."""
from korovod.tensorflow.elastic import TensorFlowKerasState, run  # noqa: F401


def make_elastic(keras):
    Callback = keras.callbacks.Callback

    class KerasState(TensorFlowKerasState):
        """The state of a Keras model and its optimizer, plus any keyword attribute."""

        def __init__(self, model, optimizer=None, **kwargs):
            super().__init__(model, optimizer=optimizer, **kwargs)

    class CommitStateCallback(Callback):
        """Commits the state every batches_per_commit batches (and at each epoch's end)."""

        def __init__(self, state, batches_per_commit=1):
            super().__init__()
            self.state = state
            self.batches_per_commit = batches_per_commit
            self.batches_remaining = batches_per_commit

        def on_batch_end(self, batch, logs=None):
            self.batches_remaining -= 1
            if self.batches_remaining == 0:
                self.state.commit()
                self.batches_remaining = self.batches_per_commit

    class UpdateBatchStateCallback(Callback):
        """Keeps state.batch at the last finished batch (0 at each epoch's start)."""

        def __init__(self, state):
            super().__init__()
            self.state = state

        def on_batch_end(self, batch, logs=None):
            self.state.batch = batch

        def on_epoch_end(self, epoch, logs=None):
            self.state.batch = 0

    class UpdateEpochStateCallback(Callback):
        """Keeps state.epoch at the epoch to run next."""

        def __init__(self, state):
            super().__init__()
            self.state = state

        def on_epoch_end(self, epoch, logs=None):
            self.state.epoch = epoch + 1

    return dict(KerasState=KerasState, CommitStateCallback=CommitStateCallback,
                UpdateBatchStateCallback=UpdateBatchStateCallback,
                UpdateEpochStateCallback=UpdateEpochStateCallback, run=run)
