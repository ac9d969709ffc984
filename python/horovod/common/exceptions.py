"""`horovod.common.exceptions` on korovod: the same classes korovod.torch raises."""
from korovod.exceptions import (HorovodInternalError, HorovodVersionMismatchError,  # noqa: F401
                                HostsUpdatedInterrupt, get_version_mismatch_message)
