"""Run under korovodrun: checks every collective on every rank; prints 'rank R OK'."""
import torch

import korovod.torch as hvd

hvd.init(process_sets="dynamic")  # add_process_set below needs dynamic process sets
r, n = hvd.rank(), hvd.size()
assert hvd.is_initialized()
assert 0 <= hvd.local_rank() < hvd.local_size() and 0 <= hvd.cross_rank() < hvd.cross_size()

x = torch.arange(6, dtype=torch.float32).reshape(2, 3) + r
s = sum(torch.arange(6, dtype=torch.float32).reshape(2, 3) + i for i in range(n))
assert torch.allclose(hvd.allreduce(x, op=hvd.Sum), s)
assert torch.allclose(hvd.allreduce(x), s / n)  # default: Average
assert torch.allclose(hvd.allreduce(x, average=True, name="avg"), s / n)
assert torch.equal(hvd.allreduce(x, op=hvd.Min), torch.arange(6.).reshape(2, 3))
assert torch.equal(hvd.allreduce(x, op=hvd.Max), torch.arange(6.).reshape(2, 3) + n - 1)
assert torch.allclose(hvd.allreduce(x, op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.5), s)
assert torch.allclose(hvd.allreduce(x.double(), op=hvd.Sum), s.double())
xi = torch.full((5,), r + 1, dtype=torch.int64)
assert torch.equal(hvd.allreduce(xi, op=hvd.Sum), torch.full((5,), n * (n + 1) // 2))
assert torch.equal(hvd.allreduce(torch.full((3,), 2.0), op=hvd.Product), torch.full((3,), 2.0 ** n))
# fp16 compression
out = hvd.allreduce(x, op=hvd.Sum, compression=hvd.Compression.fp16)
assert out.dtype == torch.float32 and torch.allclose(out, s)
# in place and async
y = x.clone()
hvd.allreduce_(y, op=hvd.Sum)
assert torch.allclose(y, s)
y = x.clone()
h = hvd.allreduce_async_(y, op=hvd.Sum, name="async_inplace")
h2 = hvd.allreduce_async(x, op=hvd.Sum, name="async")
out2 = hvd.synchronize(h2)
assert hvd.synchronize(h) is y and torch.allclose(y, s) and torch.allclose(out2, s)
h = hvd.allreduce_async(x, name="poll")
while not hvd.poll(h):
    pass
assert torch.allclose(hvd.synchronize(h), s / n)
# grouped
g = hvd.grouped_allreduce([x, x * 2, torch.ones(7)], op=hvd.Sum)
assert torch.allclose(g[0], s) and torch.allclose(g[1], 2 * s) and torch.allclose(g[2], torch.full((7,), float(n)))
# non-contiguous in place
nc = x.clone().t()
hvd.allreduce_(nc, op=hvd.Sum)
assert torch.allclose(nc, s.t())
# allgather (variable first dimension)
a = torch.full((r + 1, 2), float(r))
ga = hvd.allgather(a)
exp = torch.cat([torch.full((i + 1, 2), float(i)) for i in range(n)])
assert torch.equal(ga, exp), ga
# broadcast
b = torch.full((4,), float(r))
assert torch.equal(hvd.broadcast(b, root_rank=n - 1), torch.full((4,), float(n - 1)))
assert torch.equal(b, torch.full((4,), float(r)))
hvd.broadcast_(b, root_rank=0)
assert torch.equal(b, torch.zeros(4))
# alltoall: rank r sends (j+1) rows of value 100*r+j to rank j
splits = [j + 1 for j in range(n)]
t = torch.cat([torch.full((j + 1,), 100.0 * r + j) for j in range(n)])
recv, rsplits = hvd.alltoall(t, splits=splits)
assert rsplits.tolist() == [r + 1] * n, rsplits
assert torch.equal(recv, torch.cat([torch.full((r + 1,), 100.0 * i + r) for i in range(n)])), recv
even = torch.arange(n * 2, dtype=torch.float32) + 10 * r
recv = hvd.alltoall(even)
assert torch.equal(recv, torch.tensor([10.0 * i + 2 * r + k for i in range(n) for k in range(2)]))
# reducescatter
rs = hvd.reducescatter(torch.ones(n * 2, 3) * (r + 1), op=hvd.Sum)
assert rs.shape == (2, 3) and torch.allclose(rs, torch.full((2, 3), n * (n + 1) / 2)), rs
# objects
obj = hvd.broadcast_object({"rank": r, "v": [1, 2]} if r == 0 else None, root_rank=0)
assert obj == {"rank": 0, "v": [1, 2]}
assert hvd.allgather_object(("r", r)) == [("r", i) for i in range(n)]
# process sets: ops on a subset, then on everyone (auto-names stay in step)
members = [0, 1] if n > 2 else [1]  # not the world: that would be a duplicate
ps = hvd.add_process_set(members)
if r in members:
    assert torch.equal(hvd.allreduce(torch.full((2,), r + 1.0), op=hvd.Sum, process_set=ps),
                       torch.full((2,), float(sum(m + 1 for m in members))))
    assert ps.size() == len(members) and ps.rank() == members.index(r)
hvd.barrier()
assert torch.equal(hvd.allreduce(torch.ones(2), op=hvd.Sum), torch.full((2,), float(n)))
# timeline
import os, tempfile
tl = os.path.join(tempfile.gettempdir(), "korovod-pytest-tl-%d-%d.json" % (os.getpid(), r))
hvd.start_timeline(tl)
hvd.allreduce(torch.ones(3), name="timed")
hvd.stop_timeline()
assert os.path.getsize(tl) > 0
os.remove(tl)
assert hvd.join() in range(n)
hvd.barrier()
print("rank %d OK" % r, flush=True)
hvd.shutdown()
assert not hvd.is_initialized()
