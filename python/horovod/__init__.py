"""Horovod compatibility shim: `import horovod.torch as hvd` runs on korovod."""
__version__ = "0.28.1+korovod"
