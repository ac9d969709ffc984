"""Horovod's horovod.tensorflow.keras on korovod, for tf.keras: Keras 3 in current TensorFlow, or
tf_keras (Keras 2) with TF_USE_LEGACY_KERAS=1."""
import sys as _sys

import tensorflow as _tf

from korovod._keras.api import build as _build

_ns, callbacks, elastic = _build(_tf.keras, __name__)
globals().update(_ns)
_sys.modules[__name__ + ".callbacks"] = callbacks
_sys.modules[__name__ + ".elastic"] = elastic
del _ns

__all__ = [n for n in dir() if not n.startswith("_")]
