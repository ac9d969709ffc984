"""horovod.tensorflow.util's helpers that Horovod's scripts and tests import."""
import functools

import tensorflow as tf


def _executing_eagerly():
    return tf.executing_eagerly()


def _make_subgraph(f):
    return tf.function(f)


def _cache(f):
    """Memoizes f by its (hashable) arguments."""
    cache = {}

    @functools.wraps(f)
    def wrapper(*args, **kwargs):
        key = (args, tuple(sorted(kwargs.items())))
        if key not in cache:
            cache[key] = f(*args, **kwargs)
        return cache[key]

    return wrapper
