"""`korovod` as a torch.distributed backend: `dist.init_process_group("korovod")` (or
"cpu:korovod,cuda:korovod") in a trainer started by korovodrun, a HorovodJob or torchrun. Importing
this package registers the name; where torch autoloads the `torch.backends` entry points
(torch >= 2.5) the installed korovod registers it without an import."""
from korovod._ptd_entry import BACKEND_NAME, register

register()

__all__ = ["BACKEND_NAME", "register"]
