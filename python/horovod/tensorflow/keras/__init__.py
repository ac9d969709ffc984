"""`horovod.tensorflow.keras` on korovod: re-exports korovod.tensorflow.keras (tf.keras)."""
import sys as _sys

from korovod.tensorflow import keras as _k
from korovod.tensorflow.keras import *  # noqa: F401,F403
from korovod.tensorflow.keras import __all__, callbacks, elastic  # noqa: F401

_sys.modules[__name__ + ".callbacks"] = callbacks
_sys.modules[__name__ + ".elastic"] = elastic
del _k
