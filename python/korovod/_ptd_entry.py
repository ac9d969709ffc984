"""Registers `korovod` as a torch.distributed backend name, for CPU and CUDA tensors, without
importing korovod's client or korovod.torch: `korovod.torch.distributed` calls register() on
import, and torch >= 2.5 calls autoload() (the `torch.backends` entry point in pyproject.toml)
while `import torch` itself runs. Nothing connects anywhere until a korovod group is made (the
creator imports the backend then)."""
BACKEND_NAME = "korovod"
_registered = False


def _creator(*args):
    from korovod.torch.distributed import creator
    return creator.create_extended(*args)


def register():
    """Registers the name once; a no-op when torch has no distributed support or the name is
    registered already."""
    global _registered
    import torch
    import torch.distributed as dist
    if _registered or not dist.is_available():
        return
    if BACKEND_NAME.upper() not in getattr(dist.Backend, "_plugins", {}):
        if int(torch.__version__.split(".")[0]) >= 2:
            dist.Backend.register_backend(BACKEND_NAME, _creator, extended_api=True,
                                          devices=["cpu", "cuda"])
        else:
            dist.Backend.register_backend(BACKEND_NAME, _creator, extended_api=True)
    _registered = True


def autoload():
    """The entry point: must never fail (torch would refuse to import)."""
    try:
        register()
    except Exception:  # noqa: BLE001 - a broken korovod must not break `import torch`
        pass
