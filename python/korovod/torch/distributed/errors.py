"""The errors the backend raises, as torch's types where this torch has them: a failed op is a
torch.distributed.DistBackendError, a wait past its deadline a DistError (its timeout subclass
where torch has one); torch 1.13 has neither, so RuntimeError. Every message names the rank, the
op, the group and the tensor."""
import torch.distributed as dist

BackendError = getattr(dist, "DistBackendError", RuntimeError)
TimeoutError_ = getattr(dist, "DistTimeoutError", None) or getattr(dist, "DistError", RuntimeError)


class OpDesc:
    """What an op is, for its error messages: this rank, the op, its group, its tensor."""
    __slots__ = ("rank", "op", "group", "tensor")

    def __init__(self, rank, op, group, tensor):
        self.rank, self.op, self.group, self.tensor = rank, op, group, tensor

    def __str__(self):
        return "korovod: rank %d: %s of %s in group %s" % (self.rank, self.op, self.tensor,
                                                           self.group)


def describe(name, tensor):
    """A tensor as error messages name it: the op's engine name, dtype and shape."""
    if tensor is None:
        return "'%s'" % name
    return "'%s' (%s%s)" % (name, str(tensor.dtype).replace("torch.", ""), list(tensor.shape))


def failed(desc, cause):
    return BackendError("%s failed: %s" % (desc, cause))


def timed_out(desc, seconds):
    return TimeoutError_("%s did not complete within %.1f s (the group's timeout, or the "
                         "timeout given to wait())" % (desc, seconds))


def unsupported(desc, why):
    return BackendError("%s is not supported: %s" % (desc, why))
