"""Run under korovodrun: grouped allreduce through the sidecar (values, in place, async, poll) and
that the group reaches the engine as one group; prints 'rank R grouped OK'."""
import torch

import korovod.torch as hvd

hvd.init()
r, n = hvd.rank(), hvd.size()
tri = n * (n + 1) / 2

ts = [torch.full((k + 1, 3), float(r + 1 + k)) for k in range(6)]
outs = hvd.grouped_allreduce(ts, op=hvd.Sum, name="sum")
for k, o in enumerate(outs):
    assert torch.equal(o, torch.full((k + 1, 3), tri + n * k)), (k, o)
    assert torch.equal(ts[k], torch.full((k + 1, 3), float(r + 1 + k)))  # inputs untouched
avg = hvd.grouped_allreduce([torch.full((4,), float(r)), torch.full((2, 2), 1.0)], name="avg")
assert torch.allclose(avg[0], torch.full((4,), (n - 1) / 2)) and torch.allclose(avg[1], torch.ones(2, 2))
ints = hvd.grouped_allreduce([torch.full((3,), r, dtype=torch.int64)] * 2, op=hvd.Max, name="max")
assert all(torch.equal(i, torch.full((3,), n - 1)) for i in ints)
scaled = hvd.grouped_allreduce([torch.ones(5, dtype=torch.float64)], op=hvd.Sum,
                               prescale_factor=2.0, postscale_factor=0.25, name="scaled")
assert torch.allclose(scaled[0], torch.full((5,), 0.5 * n, dtype=torch.float64))

# In place, a non-contiguous member included.
a, b = torch.full((2, 3), float(r)), torch.full((3, 2), float(r)).t()
res = hvd.grouped_allreduce_([a, b], op=hvd.Sum, name="inplace")
assert res[0] is a and res[1] is b
assert torch.equal(a, torch.full((2, 3), tri - n)) and torch.equal(b, torch.full((2, 3), tri - n))

# Async: one handle for the group; poll is true only once every member completed.
h = hvd.grouped_allreduce_async([torch.full((1000,), 1.0), torch.full((7,), 2.0)], op=hvd.Sum,
                                name="async")
while not hvd.poll(h):
    pass
got = hvd.synchronize(h)
assert torch.equal(got[0], torch.full((1000,), float(n))) and torch.equal(got[1], torch.full((7,), 2.0 * n))

# The group is one group in the engine: a group on rank 0 against lone tensors of the same names
# elsewhere is a grouping mismatch, and every member fails.
x, y = torch.ones(4), torch.ones(5)
if r == 0:
    handles = [hvd.grouped_allreduce_async([x, y], op=hvd.Sum, name="mixed")]
else:
    handles = [hvd.allreduce_async(x, op=hvd.Sum, name="mixed.0"),
               hvd.allreduce_async(y, op=hvd.Sum, name="mixed.1")]
for hd in handles:
    try:
        hvd.synchronize(hd)
        raise AssertionError("a grouping mismatch went through")
    except RuntimeError as e:
        assert "group" in str(e), str(e)

# And the sidecar keeps serving.
after = hvd.grouped_allreduce([torch.ones(3)] * 3, op=hvd.Sum, name="after")
assert all(torch.equal(t, torch.full((3,), float(n))) for t in after)
print("rank %d grouped OK" % r)
