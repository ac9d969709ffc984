"""Horovod's exception types (horovod.common.exceptions), raised where Horovod raises them."""


class HorovodInternalError(RuntimeError):
    """A collective failed (in the engine, the sidecar, or at submission). Horovod's elastic mode
    treats it as recoverable."""


class HostsUpdatedInterrupt(RuntimeError):
    """The job's membership changed (Horovod elastic): raised by State.check_host_updates() (so by
    commit()) on every rank at once. skip_sync: hosts were only removed, so the survivors keep
    their committed state and resume without a sync."""

    def __init__(self, skip_sync):
        super().__init__()
        self.skip_sync = skip_sync


def get_version_mismatch_message(name, version, installed_version):
    return (f"Framework {name} installed with version {installed_version} but found version "
            f"{version}.\n This can result in unexpected behavior including runtime errors.\n"
            f" Reinstall Horovod using `pip install --no-cache-dir` to build with the new version.")


class HorovodVersionMismatchError(ImportError):
    """The runtime version of a framework differs from the one Horovod was built against."""

    def __init__(self, name, version, installed_version):
        super().__init__(get_version_mismatch_message(name, version, installed_version))
        self.name = name
        self.version = version
        self.installed_version = installed_version
