"""Horovod's elastic API for TensorFlow (horovod.tensorflow.elastic, `hvd.elastic`) on korovod:
run, TensorFlowState (variables), TensorFlowKerasState (a Keras model and its optimizer),
ObjectState. As in korovod.torch.elastic, a reset re-initializes korovod, which makes this rank's
sidecar join the job's next membership epoch."""
import functools

import tensorflow as tf

from korovod import session
from korovod.elastic import ObjectState, State, run_fn  # noqa: F401
from korovod.exceptions import HorovodInternalError
from korovod.tensorflow import functions, mpi_ops


def _bcast_object(obj):
    return functions.broadcast_object(obj, 0, name="elastic.state")


def _rank():
    return mpi_ops.rank()


def _membership():
    return session._membership()


def run(func):
    """Decorator for the elastic training function func(state, ...), as horovod.torch's: a
    failed collective (TensorFlow's UnknownError from a korovod op: a worker died) restores the
    last commit, a membership change keeps it; korovod is re-initialized, the state synced from
    rank 0, and func runs again."""

    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        try:
            return func(state, *args, **kwargs)
        except tf.errors.UnknownError as e:
            if "korovod" in (e.message or ""):
                raise HorovodInternalError(e.message) from e
            raise

    return run_fn(wrapper, _reset)


def _reset():
    mpi_ops.shutdown()
    mpi_ops.init()


def _values(variables):
    return [v.numpy() for v in variables]


class TensorFlowState(ObjectState):
    """State of a list of tf.Variables (saved as host copies, restored by assignment, synced by
    broadcast from rank 0) plus any keyword argument as an ObjectState attribute."""

    def __init__(self, variables=None, session=None, **kwargs):
        self.variables = list(variables or [])
        self._saved_values = _values(self.variables)
        super().__init__(bcast_object=_bcast_object, get_rank=_rank,
                         get_membership=_membership, **kwargs)

    def save(self):
        self._saved_values = _values(self.variables)
        super().save()

    def restore(self):
        for v, value in zip(self.variables, self._saved_values):
            v.assign(value)
        super().restore()

    def sync(self):
        if self.variables:
            functions.broadcast_variables(self.variables, root_rank=0)
        self._saved_values = _values(self.variables)  # restore() goes back to the synced values
        super().sync()


class TensorFlowKerasState(ObjectState):
    """State of a Keras model and its optimizer (weights and the optimizer's variables) plus any
    keyword argument as an ObjectState attribute."""

    def __init__(self, model, optimizer=None, backend=None, **kwargs):
        self.model = model
        self.optimizer = optimizer if optimizer is not None else getattr(model, "optimizer", None)
        self._saved_model = model.get_weights()
        self._saved_optimizer = self._optimizer_values()
        super().__init__(bcast_object=_bcast_object, get_rank=_rank,
                         get_membership=_membership, **kwargs)

    def _optimizer_variables(self):
        if self.optimizer is None:
            return []
        v = self.optimizer.variables
        return list(v() if callable(v) else v)

    def _optimizer_values(self):
        return _values(self._optimizer_variables())

    def save(self):
        self._saved_model = self.model.get_weights()
        self._saved_optimizer = self._optimizer_values()
        super().save()

    def restore(self):
        self.model.set_weights(self._saved_model)
        for v, value in zip(self._optimizer_variables(), self._saved_optimizer):
            v.assign(value)
        super().restore()

    def sync(self):
        functions.broadcast_variables(list(self.model.variables) + self._optimizer_variables(),
                                      root_rank=0)
        self._saved_model = self.model.get_weights()  # restore() goes back to the synced values
        self._saved_optimizer = self._optimizer_values()
        super().sync()


__all__ = ["ObjectState", "State", "TensorFlowKerasState", "TensorFlowState", "run"]
