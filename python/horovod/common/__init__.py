"""`horovod.common` on korovod: only `horovod.common.exceptions` (Horovod scripts import its
exception types)."""
