"""korovod: Kubernetes-native Horovod. The trainer-side Python package.

`import korovod.torch as hvd` (or, unmodified, `import horovod.torch as hvd`) gives Horovod's
PyTorch API over the korovod sidecar; the trainer must be started by korovodrun (or the operator),
which sets KOROVOD_SOCKET.
"""
__version__ = "0.1.0"

# The compiled extension (korovod._client) lives in the build tree (<build>/python/korovod):
# let this package span every `korovod` directory on sys.path.
import pkgutil as _pkgutil

__path__ = _pkgutil.extend_path(__path__, __name__)
