"""broadcast_parameters, broadcast_optimizer_state, broadcast_object, allgather_object."""
import io
import pickle

import torch

try:  # Horovod pickles with cloudpickle (lambdas, local classes); plain pickle otherwise
    import cloudpickle as _pickler
except ImportError:  # pragma: no cover
    _pickler = pickle

from korovod.torch import mpi_ops


def broadcast_parameters(params, root_rank, process_set=mpi_ops.global_process_set):
    """Broadcasts a model's state_dict() or named_parameters() from root_rank (a global rank),
    in place."""
    if isinstance(params, dict):
        params = sorted(params.items())
    elif isinstance(params, list):
        params = [p if isinstance(p, tuple) else (None, p) for p in params]
    else:
        params = list(params)
        if params and not isinstance(params[0], tuple):
            params = [(None, p) for p in params]
    handles = []
    for i, (name, p) in enumerate(params):
        if p is None or not torch.is_tensor(p):
            continue
        t = p.data if isinstance(p, torch.nn.Parameter) else p
        handles.append(mpi_ops.broadcast_async_(t, root_rank, name="bcast.param.%s" % (
            name if name is not None else i), process_set=process_set))
    for h in handles:
        mpi_ops.synchronize(h)


def broadcast_optimizer_state(optimizer, root_rank, model=None,
                              process_set=mpi_ops.global_process_set):
    """Makes every rank's optimizer state (hyperparameters and per-parameter state) root_rank's
    (a global rank). Every torch.optim optimizer but LBFGS, as in Horovod (which refuses it).

    As in Horovod, a rank whose state is empty first fills it by a step on zero gradients (every
    parameter that requires grad gets a zero .grad; sparse ones for SparseAdam, and for SGD on the
    sparse embeddings of `model`), then takes root's state."""
    if isinstance(optimizer, torch.optim.LBFGS):
        raise ValueError("cannot broadcast torch.optim.LBFGS state")
    if len(optimizer.state_dict()["state"]) == 0:
        _fill_state(optimizer, model)
    state = broadcast_object(optimizer.state_dict(), root_rank, name="bcast.optimizer_state",
                             process_set=process_set)
    if mpi_ops.rank() != root_rank:
        optimizer.load_state_dict(state)


def _fill_state(optimizer, model):
    sparse_params = set()
    if model is not None:
        for m in model.modules():
            if isinstance(m, torch.nn.Embedding) and m.sparse:
                sparse_params.update(id(p) for p in m.parameters())
    for group in optimizer.param_groups:
        for p in group["params"]:
            if p.requires_grad:
                p.grad = p.data.new(p.size()).zero_()
                if isinstance(optimizer, torch.optim.SparseAdam) or (
                        isinstance(optimizer, torch.optim.SGD) and id(p) in sparse_params):
                    p.grad = p.grad.to_sparse()
    if type(optimizer).__module__ == "korovod.torch.optimizer":
        # A DistributedOptimizer: step without allreducing the zero gradients.
        super(optimizer.__class__, optimizer).step()
    else:
        optimizer.step()


def _to_bytes(obj):
    b = io.BytesIO()
    _pickler.dump(obj, b, protocol=pickle.HIGHEST_PROTOCOL)
    return torch.frombuffer(bytearray(b.getvalue()), dtype=torch.uint8)


def _from_bytes(t):
    return pickle.loads(t.numpy().tobytes())


def broadcast_object(obj, root_rank=0, name=None, process_set=mpi_ops.global_process_set):
    """Pickles obj on root_rank (a global rank) and returns it, unpickled, on every rank of
    process_set."""
    name = name or "broadcast_object"  # the same on every rank (obj may differ off root)
    if mpi_ops.rank() == root_rank:
        data = _to_bytes(obj)
        sz = torch.tensor([data.numel()], dtype=torch.int64)
    else:
        data = None
        sz = torch.zeros(1, dtype=torch.int64)
    mpi_ops.broadcast_(sz, root_rank, name=name + ".sz", process_set=process_set)
    if data is None:
        data = torch.zeros(int(sz.item()), dtype=torch.uint8)
    mpi_ops.broadcast_(data, root_rank, name=name + ".t", process_set=process_set)
    return obj if mpi_ops.rank() == root_rank else _from_bytes(data)


def allgather_object(obj, name=None, process_set=mpi_ops.global_process_set):
    """Returns the list of every rank's obj, in rank order."""
    name = name or "allgather_object"
    data = _to_bytes(obj)
    sizes = mpi_ops.allgather(torch.tensor([data.numel()], dtype=torch.int64),
                              name=name + ".sz", process_set=process_set)
    gathered = mpi_ops.allgather(data, name=name + ".t", process_set=process_set)
    out, off = [], 0
    for s in sizes.tolist():
        out.append(_from_bytes(gathered[off:off + s]))
        off += s
    return out
