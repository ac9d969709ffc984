"""Run under korovodrun (2 or more ranks): Horovod 0.28's horovod.torch API surface and error
behaviour; prints 'rank R api OK'."""
import inspect

import torch

import horovod.torch as hvd
from horovod.common.exceptions import HorovodInternalError

# Every public name of Horovod 0.28.1's horovod/torch/__init__.py but `elastic`.
HOROVOD_NAMES = """
Compression allgather_object broadcast_object broadcast_optimizer_state broadcast_parameters
allreduce allreduce_async allreduce_ allreduce_async_ grouped_allreduce grouped_allreduce_async
grouped_allreduce_ grouped_allreduce_async_ sparse_allreduce_async allgather allgather_async
grouped_allgather grouped_allgather_async broadcast broadcast_async broadcast_ broadcast_async_
alltoall alltoall_async reducescatter reducescatter_async grouped_reducescatter
grouped_reducescatter_async join barrier poll synchronize init shutdown is_initialized
start_timeline stop_timeline size local_size cross_size rank local_rank cross_rank
mpi_threads_supported mpi_enabled mpi_built gloo_enabled gloo_built nccl_built ddl_built
ccl_built cuda_built rocm_built ProcessSet global_process_set add_process_set remove_process_set
Average Sum Adasum Min Max Product HorovodInternalError DistributedOptimizer SyncBatchNorm
""".split()
missing = [n for n in HOROVOD_NAMES if not hasattr(hvd, n)]
assert not missing, missing
assert hvd.HorovodInternalError is HorovodInternalError
# Horovod's submodules by their Horovod names, with its autograd functions.
from horovod.torch.mpi_ops import (HorovodAllgather, HorovodAllreduce, HorovodAlltoall,  # noqa
                                   HorovodBroadcast, HorovodGroupedAllgather,
                                   HorovodGroupedAllreduce, HorovodGroupedReducescatter,
                                   HorovodReducescatter)
from horovod.torch.compression import Compression  # noqa
from horovod.torch.sync_batch_norm import SyncBatchNorm  # noqa
import horovod.torch.mpi_ops  # noqa
assert horovod.torch.mpi_ops.HorovodInternalError is HorovodInternalError
assert issubclass(HorovodInternalError, RuntimeError)
assert list(inspect.signature(hvd.sparse_allreduce_async).parameters) == [
    "tensor", "name", "op", "process_set"]
assert list(inspect.signature(hvd.grouped_reducescatter).parameters) == [
    "tensors", "name", "compression", "op", "process_set", "prescale_factor", "postscale_factor"]
ops = [hvd.Average, hvd.Sum, hvd.Adasum, hvd.Min, hvd.Max, hvd.Product]
assert hvd.Adasum is not None and len(set(ops)) == len(ops), ops

evens, odds = hvd.ProcessSet([0]), hvd.ProcessSet([1])  # at 3+ ranks rank 2.. are in neither
hvd.init(process_sets=[evens, odds])
r, n = hvd.rank(), hvd.size()
assert n >= 2

# Adasum: allreduce combines the ranks' tensors by Horovod's rule, the same on every rank.
def adasum_reference(rows):
    rows = [x.double() for x in rows]
    step = 1
    while step < len(rows):
        for i in range(0, len(rows) - step, 2 * step):
            a, b = rows[i], rows[i + step]
            dot = torch.dot(a, b)
            rows[i] = (1 - dot / (2 * torch.dot(a, a))) * a + (1 - dot / (2 * torch.dot(b, b))) * b
        step *= 2
    return rows[0]


def adasum_input(rank):
    return torch.arange(1, 7, dtype=torch.float64) * (rank + 1) + torch.tensor(
        [rank % 2, 0, 1, 0, rank, 2], dtype=torch.float64)


got = hvd.allreduce(adasum_input(r).reshape(2, 3), op=hvd.Adasum, name="adasum.t")
want = adasum_reference([adasum_input(i) for i in range(n)]).reshape(2, 3)
assert torch.allclose(got, want, rtol=1e-12), (got, want)
# Identical gradients come back unchanged (Adasum averages parallel vectors); orthogonal add.
same = hvd.allreduce(torch.ones(4), op=hvd.Adasum, name="adasum.same")
assert torch.allclose(same, torch.ones(4)), same
if n == 2:
    ortho = hvd.allreduce(torch.eye(2)[r], op=hvd.Adasum, name="adasum.ortho")
    assert torch.allclose(ortho, torch.ones(2)), ortho
g = torch.ones(3, dtype=torch.float32, requires_grad=True)
hvd.allreduce(g * (r + 1), op=hvd.Adasum, name="adasum.grad").sum().backward()
assert g.grad is not None
try:
    hvd.allreduce(torch.ones(2, dtype=torch.int32), op=hvd.Adasum)
    raise AssertionError("integer Adasum went through")
except ValueError as e:
    assert "floating-point" in str(e), e
# GPU support is what the sidecar has, said truthfully: NCCL's version and CUDA with its NCCL
# backend, 0 and False without (a CPU-only machine's sidecar has none).
assert hvd.cuda_built() == (hvd.nccl_built() > 0), (hvd.cuda_built(), hvd.nccl_built())
if not torch.cuda.is_available():
    assert hvd.nccl_built() == 0 and hvd.cuda_built() is False, hvd.nccl_built()
from horovod.common.util import gpu_available  # noqa: E402 - Horovod's own tests ask it
assert gpu_available("torch") == (torch.cuda.is_available() and hvd.cuda_built())
assert gpu_available("tensorflow") is False
# What is not built says so.
for call in (lambda: hvd.reducescatter(torch.ones(2 * n), op=hvd.Adasum),
             lambda: hvd.grouped_allreduce([torch.ones(2)], op=hvd.Adasum),
             lambda: hvd.DistributedOptimizer(torch.optim.SGD([torch.ones(1, requires_grad=True)],
                                                              lr=1), op=hvd.Adasum)):
    try:
        call()
        raise AssertionError("Adasum went through")
    except NotImplementedError as e:
        assert "Adasum" in str(e), e

# op and average together is Horovod's ValueError.
try:
    hvd.allreduce(torch.ones(1), average=True, op=hvd.Sum)
    raise AssertionError("op and average together went through")
except ValueError:
    pass

# A failed collective (shapes differ across ranks) raises HorovodInternalError.
try:
    hvd.allreduce(torch.ones(3 + r), name="shape_mismatch")
    raise AssertionError("mismatched allreduce went through")
except HorovodInternalError:
    pass

# Names of unfinished ops are unique: a second op under the name raises ValueError at
# submission; the name is free again once the op is synchronized (or has completed).
for kind, start in [
        ("allreduce", lambda nm: hvd.allreduce_async(torch.ones(3), name=nm)),
        ("allgather", lambda nm: hvd.allgather_async(torch.ones(3), name=nm)),
        ("broadcast", lambda nm: hvd.broadcast_async(torch.ones(3), 0, name=nm)),
        ("alltoall", lambda nm: hvd.alltoall_async(torch.ones(n), name=nm)),
        ("reducescatter", lambda nm: hvd.reducescatter_async(torch.ones(n), name=nm))]:
    name = "dup." + kind
    if r == 0:
        h = start(name)  # cannot complete before rank 1 submits it after the barrier
        try:
            start(name)
            raise AssertionError("duplicate %s name went through" % kind)
        except ValueError as e:
            assert name in str(e), e
    hvd.barrier()
    if r != 0:
        h = start(name)
    hvd.synchronize(h)
    hvd.synchronize(start(name))  # free again
hvd.barrier()
h = hvd.allreduce_async(torch.ones(2), name="completed")
while not hvd.poll(h):
    pass
hvd.synchronize(hvd.allreduce_async(torch.ones(2), name="completed"))  # completed: name free
assert hvd.synchronize(h) is not None
assert hvd.synchronize(h) is None  # Horovod: a cleared handle gives None

# alltoall arguments are checked as Horovod does: ValueError before anything is sent.
for bad in (lambda: hvd.alltoall(torch.ones(n + 1)),  # not divisible, no splits
            lambda: hvd.alltoall(torch.ones(n - 1), torch.ones(n, dtype=torch.int32)),  # sum > dim0
            lambda: hvd.alltoall(torch.ones(n), torch.ones(n, dtype=torch.float32)),  # not int32
            lambda: hvd.alltoall(torch.ones(n), torch.ones(n + 1, dtype=torch.int32))):  # count
    try:
        bad()
        raise AssertionError("bad alltoall went through")
    except ValueError:
        pass
# Rows past the splits' sum stay behind, as in Horovod.
out, rsplits = hvd.alltoall(torch.arange(n + 2, dtype=torch.float32) + 100 * r,
                            torch.ones(n, dtype=torch.int32))
assert torch.equal(out, torch.tensor([100.0 * k + r for k in range(n)])), out
assert rsplits.tolist() == [1] * n
# alltoall_async's result is (tensor, received splits) with or without splits.
out, rsplits = hvd.synchronize(hvd.alltoall_async(torch.full((n,), float(r))))
assert torch.equal(out, torch.arange(float(n))) and rsplits.tolist() == [1] * n

# Scalar reducescatter: ValueError.
try:
    hvd.reducescatter(torch.tensor(1.0))
    raise AssertionError("scalar reducescatter went through")
except ValueError:
    pass

# grouped_allgather_async / grouped_reducescatter(_async): one handle, a list of results.
h = hvd.grouped_allgather_async([torch.full((r + 1,), float(r)), torch.ones(1, 2)])
ga, gb = hvd.synchronize(h)
assert torch.equal(ga, torch.cat([torch.full((k + 1,), float(k)) for k in range(n)]))
assert torch.equal(gb, torch.ones(n, 2))
h = hvd.grouped_reducescatter_async([torch.ones(2 * n), torch.full((n, 3), 2.0)], op=hvd.Sum)
ra, rb = hvd.synchronize(h)
assert torch.equal(ra, torch.full((2,), float(n))) and torch.equal(rb, torch.full((1, 3), 2.0 * n))
ra, rb = hvd.grouped_reducescatter([torch.ones(2 * n), torch.full((n, 3), 2.0)])  # Average
assert torch.equal(ra, torch.ones(2)) and torch.equal(rb, torch.full((1, 3), 2.0))

# Grouped allreduce with tensors of different dtypes.
fa, ia = hvd.grouped_allreduce([torch.ones(2), torch.ones(3, dtype=torch.int64)], op=hvd.Sum)
assert torch.equal(fa, torch.full((2,), float(n))) and torch.equal(ia, torch.full((3,), n))

# sparse_allreduce_async: allgather of indices and values; handle() and synchronize() give the
# sparse result, equal to the dense allreduce.
dense = torch.zeros(6, 3)
dense[r % 6] = r + 1.0
dense[5] = 1.0
sp = dense.to_sparse()
expected = hvd.allreduce(dense, op=hvd.Average)
h = hvd.sparse_allreduce_async(sp, name="sparse.avg", op=hvd.Average)
got = h()
assert got.is_sparse and torch.allclose(got.to_dense(), expected), got
h = hvd.sparse_allreduce_async(sp, "sparse.sum", hvd.Sum)
got = hvd.synchronize(h)
assert torch.allclose(got.to_dense(), expected * n)

# join returns the rank that joined last.
last = hvd.join()
assert 0 <= last < n, last
assert hvd.broadcast_object(last, 0) == last

# Process sets: root_rank is a global rank (broadcast, broadcast_object, broadcast_parameters,
# broadcast_optimizer_state), as in Horovod.
if r in (0, 1):
    mine = evens if r == 0 else odds
    assert torch.equal(hvd.broadcast(torch.full((2,), float(r)), r, process_set=mine),
                       torch.full((2,), float(r)))
    assert hvd.broadcast_object({"from": r}, root_rank=r, process_set=mine) == {"from": r}
    model = torch.nn.Linear(2, 1)
    hvd.broadcast_parameters(model.state_dict(), root_rank=r, process_set=mine)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.5)
    hvd.broadcast_optimizer_state(opt, root_rank=r, process_set=mine)
    try:
        hvd.broadcast(torch.ones(1), 1 - r, process_set=mine)
        raise AssertionError("a root outside the set went through")
    except ValueError:
        pass

# FP8 (torch >= 2.1; none on 1.13): allgather, broadcast and alltoall move the bytes and return
# the tensor's dtype; a reduction is refused naming the dtype and the tensor. Built from bytes and
# compared as bytes: exact in every one-byte format (e8m0 has no zero, float4 no casts).
from korovod.torch.dtypes import BYTE_DTYPES  # noqa: E402


def fp8(d, rank):
    return (torch.arange(6, dtype=torch.uint8) + 16 * rank).view(d).reshape(3, 2)


for d in sorted(BYTE_DTYPES, key=str):
    g = hvd.allgather(fp8(d, r), name="fp8.allgather.%s" % d)
    assert g.dtype == d and g.shape == (3 * n, 2), (d, g.shape)
    assert torch.equal(g.view(torch.uint8), torch.cat([fp8(d, i).view(torch.uint8)
                                                       for i in range(n)])), d
    got = hvd.broadcast(fp8(d, r), root_rank=n - 1, name="fp8.broadcast.%s" % d)
    assert got.dtype == d and torch.equal(got.view(torch.uint8), fp8(d, n - 1).view(torch.uint8))
    sent = (torch.arange(n, dtype=torch.uint8) + 16 * r).view(d)  # row j goes to rank j
    recv, rsplits = hvd.alltoall(sent, torch.ones(n, dtype=torch.int32),
                                 name="fp8.alltoall.%s" % d)
    assert recv.dtype == d and rsplits.tolist() == [1] * n
    assert recv.view(torch.uint8).tolist() == [16 * i + r for i in range(n)], (d, recv)
    for what, reduce_ in (("allreduce", lambda t: hvd.allreduce(t, name="fp8.sum", op=hvd.Sum)),
                          ("grouped allreduce", lambda t: hvd.grouped_allreduce(
                              [t], name="fp8.group", op=hvd.Sum)),
                          ("reducescatter", lambda t: hvd.reducescatter(t, name="fp8.rs"))):
        try:
            reduce_(fp8(d, r))
            raise AssertionError("%s of %s went through" % (what, d))
        except ValueError as e:
            assert str(d) in str(e) and what in str(e) and "fp8." in str(e), e
print("rank %d torch %s moved FP8 as bytes: %s" % (
    r, torch.__version__, ", ".join(sorted(str(d).replace("torch.", "") for d in BYTE_DTYPES))),
    flush=True)

hvd.barrier()
print("rank %d api OK" % r, flush=True)
