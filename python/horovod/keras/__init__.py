"""`horovod.keras` on korovod: Horovod's Keras API for the keras package (Keras 3; with
TF_USE_LEGACY_KERAS=1, tf_keras as tf.keras sees it)."""
import os as _os
import sys as _sys

if _os.environ.get("TF_USE_LEGACY_KERAS", "").strip().lower() in ("1", "true", "yes"):
    import tf_keras as _keras_module
else:
    import keras as _keras_module

from korovod._keras.api import build as _build  # noqa: E402

_ns, callbacks, elastic = _build(_keras_module, __name__)
globals().update(_ns)
_sys.modules[__name__ + ".callbacks"] = callbacks
_sys.modules[__name__ + ".elastic"] = elastic
del _ns

__all__ = [n for n in dir() if not n.startswith("_")]
