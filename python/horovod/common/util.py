"""`horovod.common.util` on korovod: what Horovod's scripts and tests ask of it about GPUs."""


def gpu_available(ext_base_name, verbose=False):
    """Whether `ext_base_name` ("torch", ...) can run collectives on GPU tensors here: the
    framework sees a GPU and, once korovod is initialized, this rank's sidecar runs them on NCCL
    (before init: the sidecar chooses NCCL wherever it sees a GPU)."""
    if ext_base_name not in ("torch", "horovod.torch"):
        if verbose:
            print("korovod: %s has no GPU path (torch has)" % ext_base_name)
        return False
    try:
        import torch
    except ImportError:
        return False
    if not torch.cuda.is_available():
        if verbose:
            print("korovod: torch sees no CUDA device")
        return False
    from korovod.torch import mpi_ops
    if mpi_ops.is_initialized():
        return mpi_ops.cuda_built()
    return True
