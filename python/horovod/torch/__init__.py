"""`horovod.torch` on korovod: re-exports korovod.torch."""
from korovod.torch import *  # noqa: F401,F403
from korovod.torch import __all__  # noqa: F401
