"""`horovod.common` on korovod: `horovod.common.exceptions` (Horovod scripts import its exception
types), `horovod.common.elastic` (State, ObjectState, run_fn) and
`horovod.common.util.gpu_available`."""
