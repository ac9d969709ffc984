"""CUDA tensors of the backend's ops, by the path korovod.torch's ops take (cuda_ipc): the sidecar
gets the IPC handles of the tensors' allocations and an interprocess event recorded on the
caller's current stream, so the collective starts after the tensor's producer without a CPU
wait, and runs (NCCL) on the trainer's memory. Each function returns the submit() of one op; the
op's tensors and events stay referenced by its Work until it completes. A sidecar without a GPU
backend cannot take them: the op is refused naming the backend it has."""
from korovod.torch import cuda_ipc
from korovod.torch.mpi_ops import _device_ref, _one_device


def _ready(coll, kind, tensors):
    if coll.client.device_backend != "nccl":
        raise RuntimeError("%s of CUDA tensors: this rank's sidecar has no GPU backend (it runs "
                           "'%s'); start it where it sees the GPU with NCCL" %
                           (kind, coll.client.device_backend or "cpu"))
    return _one_device("%s" % kind, tensors)


def _event(tensor, keep):
    ev = cuda_ipc.ready_event(tensor)
    keep.append(ev)
    return ev.ipc_handle()


def allreduce(coll, buf, dt, op, pre, name):
    keep = []

    def submit(keep=keep):
        uuid = _ready(coll, "allreduce", [buf])
        ref = _device_ref(buf, keep)
        return coll.client.device_allreduce(uuid, ref, ref, dt, list(buf.shape),
                                            _event(buf, keep), name, op, pre, 1.0, coll.psid)
    return submit


def broadcast(coll, buf, dt, root, name):
    keep = []

    def submit(keep=keep):
        uuid = _ready(coll, "broadcast", [buf])
        return coll.client.device_broadcast(uuid, _device_ref(buf, keep), dt, list(buf.shape),
                                            root, _event(buf, keep), name, coll.psid)
    return submit


def allgather(coll, src, out, dt, name):
    keep = []

    def submit(keep=keep):
        uuid = _ready(coll, "allgather", [src, out])
        return coll.client.device_allgather(
            uuid, _device_ref(src, keep), _device_ref(out, keep), out.numel() * out.element_size(),
            dt, [1] + list(src.shape), _event(src, keep), name, coll.psid)
    return submit


def reducescatter(coll, src, out, dt, op, pre, name):
    keep = []

    def submit(keep=keep):
        uuid = _ready(coll, "reduce_scatter", [src, out])
        return coll.client.device_reducescatter(
            uuid, _device_ref(src, keep), _device_ref(out, keep), out.numel() * out.element_size(),
            dt, list(src.shape), _event(src, keep), name, op, pre, 1.0, coll.psid)
    return submit


def alltoall(coll, src, out, dt, splits, name):
    keep = []

    def submit(keep=keep):
        uuid = _ready(coll, "all_to_all", [src, out])
        return coll.client.device_alltoall(
            uuid, _device_ref(src, keep), _device_ref(out, keep), out.numel() * out.element_size(),
            dt, list(src.shape), list(splits), _event(src, keep), name, coll.psid)
    return submit
