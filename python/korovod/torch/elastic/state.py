"""TorchState (horovod.torch.elastic.TorchState): models, optimizers, LR schedulers and
ElasticSamplers kept by their state_dict; any other keyword is a plain object (ObjectState)."""
import copy

import torch

from korovod.elastic import ObjectState
from korovod.torch import functions, mpi_ops
from korovod.torch.elastic.sampler import ElasticSampler


# Looked up at each call (not bound at import) so that a test can replace the collectives.
def _bcast_object(obj):
    return functions.broadcast_object(obj, 0, name="elastic.state")


def _rank():
    return mpi_ops.rank()


class TorchState(ObjectState):
    """The state of a PyTorch training process, restored on failure and synced to newcomers.

    model, optimizer and every keyword argument become attributes of the same name. Those with a
    handler (torch.nn.Module, torch.optim.Optimizer, an LR scheduler, ElasticSampler) are saved
    by a deep copy of their state_dict and loaded back in place, so the objects the training loop
    holds stay the ones in use; the rest behave as in ObjectState. Assigning a new object to a
    handled attribute (state.model = other) adopts and saves it.
    """

    def __init__(self, model=None, optimizer=None, **kwargs):
        kwargs.update(model=model, optimizer=optimizer)
        self._handlers, kwargs = _get_handlers(kwargs)
        for name, handler in self._handlers.items():
            setattr(self, name, handler.value)
        super().__init__(bcast_object=_bcast_object, get_rank=_rank, **kwargs)

    def save(self):
        for handler in self._handlers.values():
            handler.save()
        super().save()

    def restore(self):
        for handler in self._handlers.values():
            handler.restore()
        super().restore()

    def sync(self):
        for handler in self._handlers.values():
            handler.sync()
        super().sync()

    def reset(self):
        for handler in self._handlers.values():
            handler.reset()
        super().reset()

    def __setattr__(self, name, value):
        handlers = self.__dict__.get("_handlers")
        if handlers is not None and name in handlers and hasattr(self, name):
            handlers[name].set_value(value)
        super().__setattr__(name, value)


class StateHandler:
    """Saves, restores and syncs one object of a TorchState."""

    def __init__(self, value):
        self.value = value

    def save(self):
        raise NotImplementedError()

    def restore(self):
        raise NotImplementedError()

    def sync(self):
        raise NotImplementedError()

    def reset(self):
        """After a reset, before any sync (none follows when hosts were only removed)."""

    def set_value(self, value):
        self.value = value
        self.save()


class _StateDictHandler(StateHandler):
    """An object with state_dict()/load_state_dict(): the snapshot is a deep copy of the
    state_dict (tensors included, so later in-place updates leave it alone)."""

    def __init__(self, value):
        super().__init__(value)
        self._saved = copy.deepcopy(value.state_dict())

    def save(self):
        self._saved = copy.deepcopy(self.value.state_dict())

    def restore(self):
        self.value.load_state_dict(self._saved)

    def sync(self):
        self.value.load_state_dict(functions.broadcast_object(
            self.value.state_dict(), 0, name="elastic.%s" % type(self).__name__))


class ModelStateHandler(_StateDictHandler):
    def sync(self):
        # In place, tensor by tensor: no pickling of the weights.
        functions.broadcast_parameters(self.value.state_dict(), root_rank=0)


class OptimizerStateHandler(_StateDictHandler):
    def sync(self):
        functions.broadcast_optimizer_state(self.value, root_rank=0)


class LRSchedulerStateHandler(_StateDictHandler):
    """Not in Horovod 0.28 (added after it): without it a scheduler would be deep-copied as a
    plain object, away from the optimizer it steers."""


class SamplerStateHandler(_StateDictHandler):
    def reset(self):
        # Re-partition across the new ranks: processed_num is the same on every rank, so this
        # agrees everywhere even when no sync follows (hosts only removed).
        self.value.reset()


# torch >= 2.0's schedulers derive from LRScheduler (StepLR no longer from _LRScheduler, which
# 2.x keeps only as a deprecated subclass of it); 1.13 has _LRScheduler alone, and its
# ReduceLROnPlateau derives from neither.
_LR_SCHEDULERS = (getattr(torch.optim.lr_scheduler, "LRScheduler",
                          torch.optim.lr_scheduler._LRScheduler),
                  torch.optim.lr_scheduler.ReduceLROnPlateau)

_handler_registry = [
    (torch.nn.Module, ModelStateHandler),
    (torch.optim.Optimizer, OptimizerStateHandler),
    (_LR_SCHEDULERS, LRSchedulerStateHandler),
    (ElasticSampler, SamplerStateHandler),
]


def get_handler_registry():
    """The (type, handler class) pairs TorchState tries in order."""
    return _handler_registry


def set_handler_registry(registry):
    global _handler_registry
    _handler_registry = registry


def _get_handler(value):
    for handler_type, handler_cls in _handler_registry:
        if isinstance(value, handler_type):
            return handler_cls(value)
    return None


def _get_handlers(kwargs):
    handlers, rest = {}, {}
    for name, value in kwargs.items():
        handler = _get_handler(value)
        if handler is not None:
            handlers[name] = handler
        else:
            rest[name] = value
    return handlers, rest
