"""A sidecar for a trainer that torchrun started (no KOROVOD_SOCKET)."""


def start_sidecar(store, rank, size):
    raise RuntimeError("korovod: rank %d of %d: KOROVOD_SOCKET is unset: start the job with "
                       "korovodrun (or as a HorovodJob)" % (rank, size))


def stop_sidecar():
    pass
