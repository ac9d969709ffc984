"""Run under korovodrun: gradients flow through every collective with Horovod's backward rules;
prints 'rank R autograd OK'."""
import torch

import horovod.torch as hvd

hvd.init()
r, n = hvd.rank(), hvd.size()


def leaf(*shape, value=1.0, dtype=torch.float32):
    return torch.full(shape, float(value), dtype=dtype).requires_grad_()


# allreduce: the gradient is the allreduce of the output gradient, same op and scales.
for dtype in (torch.float32, torch.float64):
    x = leaf(3, 4, value=r, dtype=dtype)
    y = hvd.allreduce(x, op=hvd.Sum)
    assert y.grad_fn is not None
    y.backward(torch.ones_like(y))
    assert torch.equal(x.grad, torch.full((3, 4), float(n), dtype=dtype)), x.grad
x = leaf(5)
hvd.allreduce(x, op=hvd.Average).backward(torch.full((5,), 2.0))
assert torch.allclose(x.grad, torch.full((5,), 2.0)), x.grad
x = leaf(5)
hvd.allreduce(x, op=hvd.Sum, prescale_factor=2.0, postscale_factor=3.0).sum().backward()
assert torch.allclose(x.grad, torch.full((5,), 6.0 * n)), x.grad
# through fp16 compression too
x = leaf(4)
hvd.allreduce(x, op=hvd.Sum, compression=hvd.Compression.fp16).sum().backward()
assert x.grad.dtype == torch.float32 and torch.allclose(x.grad, torch.full((4,), float(n)))

# grouped_allreduce: each input's gradient is the allreduce of its output's gradient.
xs = [leaf(2, value=r), leaf(3, 2, value=r)]
outs = hvd.grouped_allreduce(xs, op=hvd.Sum)
assert all(o.grad_fn is not None for o in outs)
(outs[0].sum() + 2 * outs[1].sum()).backward()
assert torch.equal(xs[0].grad, torch.full((2,), float(n)))
assert torch.equal(xs[1].grad, torch.full((3, 2), 2.0 * n))

# allgather (first dimensions differ): this rank's slice of the averaged output gradient.
sizes = [k + 1 for k in range(n)]
x = leaf(sizes[r], 2, value=r)
g = hvd.allgather(x)
assert g.grad_fn is not None and g.shape == (sum(sizes), 2)
grad = torch.cat([torch.full((s, 2), float(k)) for k, s in enumerate(sizes)])
g.backward(grad)
assert torch.equal(x.grad, torch.full((sizes[r], 2), float(r))), x.grad

# grouped_allgather: the same per tensor.
xs = [leaf(sizes[r], value=r), leaf(1, 3, value=r)]
gs = hvd.grouped_allgather(xs)
assert all(t.grad_fn is not None for t in gs)
gs[0].backward(torch.cat([torch.full((s,), float(k)) for k, s in enumerate(sizes)]))
gs[1].backward(torch.arange(float(n)).repeat_interleave(3).reshape(n, 3))
assert torch.equal(xs[0].grad, torch.full((sizes[r],), float(r)))
assert torch.equal(xs[1].grad, torch.full((1, 3), float(r)))

# broadcast: the averaged output gradient on the root, zero elsewhere (root: a global rank).
root = n - 1
x = leaf(4, value=r)
b = hvd.broadcast(x, root_rank=root)
assert b.grad_fn is not None and torch.equal(b, torch.full((4,), float(root)))
b.backward(torch.full((4,), float(r + 1)))
expected = (n + 1) / 2 if r == root else 0.0
assert torch.allclose(x.grad, torch.full((4,), expected)), x.grad

# alltoall with splits: the gradient goes back along the received splits.
splits = torch.tensor([j + 1 for j in range(n)], dtype=torch.int32)
x = leaf(int(splits.sum()), 2, value=r)
out, received = hvd.alltoall(x, splits=splits)
assert out.grad_fn is not None and received.dtype == torch.int32
assert received.tolist() == [r + 1] * n
out.backward(torch.cat([torch.full((r + 1, 2), 10.0 * k) for k in range(n)]))
# rows this rank sent to rank j come back with rank j's gradient for them: 10 * r
assert torch.equal(x.grad, torch.full((int(splits.sum()), 2), 10.0 * r)), x.grad
# and without splits (equal parts): only the tensor comes back
x = leaf(2 * n, value=r)
out = hvd.alltoall(x)
out.sum().backward()
assert torch.equal(x.grad, torch.ones(2 * n))

# reducescatter: the allgather of the output gradient, times the set size for Sum.
x = leaf(2 * n, 3, value=r)
rs = hvd.reducescatter(x, op=hvd.Sum)
assert rs.grad_fn is not None and torch.equal(rs, torch.full((2, 3), n * (n - 1) / 2))
rs.backward(torch.ones(2, 3))
assert torch.equal(x.grad, torch.full((2 * n, 3), float(n))), x.grad
x = leaf(2 * n, value=r)
hvd.reducescatter(x, op=hvd.Average, prescale_factor=2.0).sum().backward()
assert torch.allclose(x.grad, torch.full((2 * n,), 2.0)), x.grad

# grouped_reducescatter: the same per tensor; each output's backward on its own works too.
xs = [leaf(2 * n, value=r), leaf(n, 2, value=1)]
rss = hvd.grouped_reducescatter(xs, op=hvd.Sum)
assert all(t.grad_fn is not None for t in rss)
assert torch.equal(rss[0], torch.full((2,), n * (n - 1) / 2))
assert torch.equal(rss[1], torch.full((1, 2), float(n)))
for t in rss:
    t.backward(torch.ones_like(t))
assert torch.equal(xs[0].grad, torch.full((2 * n,), float(n)))
assert torch.equal(xs[1].grad, torch.full((n, 2), float(n)))

hvd.barrier()
print("rank %d autograd OK" % r, flush=True)
