"""`horovod.common` on korovod: `horovod.common.exceptions` (Horovod scripts import its exception
types) and `horovod.common.util.gpu_available`."""
