"""Run under korovodrun (2 or more ranks): tensors in the arena reach the engine without a
trainer-side copy. Checks, by the client's copy counters (hvd._staged_bytes()):
  - allreduce of an ordinary tensor stages its bytes in and its result out (one copy each way);
  - arena_empty/arena_zeros_like tensors are reduced where they lie (nothing staged), in place
    and, for allreduce into an ordinary output, with only the copy out;
  - DistributedOptimizer keeps every gradient in the arena: after the first step (which moves the
    gradients there once) its steps stage nothing, with set_to_none zero_grad, with a gradient the
    user dropped, and with groups, which go through the client's grouped allreduce, one call per
    group and step;
and that every result equals the ordinary path's. Prints 'rank R zero copy OK' and the bytes
staged per step before and after the gradients moved into the arena."""
import torch

import horovod.torch as hvd
import korovod.torch
from korovod import session
from korovod.torch import mpi_ops

hvd.init()
r, n = hvd.rank(), hvd.size()


def staged():
    return korovod.torch._staged_bytes()


def delta(before):
    after = staged()
    return {k: after[k] - before[k] for k in after}


# ---- an ordinary tensor: one copy in, one out ----
t = torch.full((1000,), float(r + 1))
s0 = staged()
out = hvd.allreduce(t, op=hvd.Sum)
d = delta(s0)
assert d["staged_in_bytes"] == 4000 and d["staged_out_bytes"] == 4000, d
assert d["staged_tensors"] == 1 and d["arena_tensors"] == 0, d
assert torch.all(out == n * (n + 1) / 2), out
assert not hvd.is_arena_tensor(t)

# ---- arena tensors: no copy ----
a = hvd.arena_empty((10, 100), torch.float32)
assert hvd.is_arena_tensor(a) and a.shape == (10, 100) and a.is_contiguous()
a.fill_(float(r + 1))
s0 = staged()
hvd.allreduce_(a, op=hvd.Sum)
d = delta(s0)
assert d == {"staged_in_bytes": 0, "staged_out_bytes": 0, "staged_tensors": 0,
             "arena_tensors": 1}, d
assert torch.all(a == n * (n + 1) / 2), a
# Out of place into ordinary memory: the input is read where it lies, the result copied out.
a.fill_(float(r + 1))
s0 = staged()
out = hvd.allreduce(a, op=hvd.Sum)
d = delta(s0)
assert d["staged_in_bytes"] == 0 and d["staged_out_bytes"] == 4000, d
assert torch.all(out == n * (n + 1) / 2) and torch.all(a == r + 1), (out, a)
# Every dtype, broadcast and a grouped allreduce in the arena.
for dtype in (torch.float64, torch.int32, torch.int64, torch.float16, torch.uint8):
    z = hvd.arena_zeros_like(torch.empty(7, 3, dtype=dtype))
    assert hvd.is_arena_tensor(z) and z.dtype == dtype and torch.all(z == 0)
    z.fill_(r + 1)
    s0 = staged()
    hvd.allreduce_(z, op=hvd.Sum, name="zc.%s" % dtype)
    hvd.broadcast_(z, root_rank=n - 1, name="zcb.%s" % dtype)
    assert delta(s0)["staged_in_bytes"] == 0
    assert torch.all(z == n * (n + 1) // 2), (dtype, z)
g = [hvd.arena_empty((5,)).fill_(float(r + i)) for i in range(3)]
s0 = staged()
hvd.grouped_allreduce_(g, op=hvd.Sum)
d = delta(s0)
assert d["staged_in_bytes"] == 0 and d["arena_tensors"] == 3, d
for i, x in enumerate(g):
    assert torch.all(x == sum(q + i for q in range(n))), (i, x)
assert hvd.arena_empty((0, 4)).shape == (0, 4)
# A block goes back to the heap with its tensor: allocating far more than the heap holds in
# total, one tensor at a time, works.
for _ in range(64):
    big = hvd.arena_empty((4 << 20,))  # 16 MiB
    big[0] = 1
del big


# ---- DistributedOptimizer ----
class CountingClient:
    """The real client, with a count of the calls the optimizer's allreduces make."""

    def __init__(self, real):
        self._real = real
        self.calls = {"allreduce": 0, "grouped_allreduce": 0}
        self.group_sizes = []

    def allreduce(self, *args, **kwargs):
        self.calls["allreduce"] += 1
        return self._real.allreduce(*args, **kwargs)

    def grouped_allreduce(self, inputs, *args, **kwargs):
        self.calls["grouped_allreduce"] += 1
        self.group_sizes.append(len(inputs))
        return self._real.grouped_allreduce(inputs, *args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._real, name)


def train(client, tag, steps=4, groups=None, set_to_none=False, drop_grad_at=None, arena=True):
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    opt = hvd.DistributedOptimizer(opt, named_parameters=[
        (tag + k, v) for k, v in model.named_parameters()], groups=groups)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    per_step, calls = [], []
    for step in range(steps):
        torch.manual_seed(100 + step * n + r)
        x, y = torch.randn(32, 8), torch.randn(32, 4)
        if step == drop_grad_at:
            model[0].weight.grad = None  # as a user may: re-adopted by the next hook
        opt.zero_grad(set_to_none=set_to_none)
        s0, c0 = staged(), dict(client.calls)
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.synchronize()
        per_step.append(delta(s0))
        calls.append({k: v - c0[k] for k, v in client.calls.items()})
        # Each rank's own gradient again, allreduced the ordinary (staged) way: what step() must
        # apply.
        twin = [p.detach().clone().requires_grad_() for p in model.parameters()]
        out = torch.nn.functional.linear(torch.relu(torch.nn.functional.linear(
            x, twin[0], twin[1])), twin[2], twin[3])
        torch.nn.functional.mse_loss(out, y).backward()
        for p, mine in zip(model.parameters(), twin):
            assert not arena or hvd.is_arena_tensor(p.grad), (tag, step)
            want = hvd.allreduce(mine.grad, op=hvd.Average)
            assert torch.allclose(p.grad, want, atol=1e-6), (tag, step, p.grad, want)
        with opt.skip_synchronize():
            opt.step()
    total = sum(float(p.detach().double().sum()) for p in model.parameters())
    sums = hvd.allgather_object(total)
    assert all(s == sums[0] for s in sums), sums  # replicas identical
    return per_step, calls


GRAD_BYTES = 4 * (8 * 16 + 16 + 16 * 4 + 4)  # the model's four float32 gradients
real = session._client_obj
real_arena_copy = mpi_ops._arena_copy
for kwargs in (dict(arena=False), dict(), dict(set_to_none=True), dict(drop_grad_at=2),
               dict(groups=2), dict(groups=2, arena=False)):
    counting = session._client_obj = CountingClient(real)
    if not kwargs.get("arena", True):  # as before gradients moved into the arena: all staged
        mpi_ops._arena_copy = lambda *args, **kw: None
    try:
        per_step, calls = train(counting, "zc%s." % "_".join(sorted(kwargs)), **kwargs)
    finally:
        session._client_obj = real
        mpi_ops._arena_copy = real_arena_copy
    for d in per_step:
        if kwargs.get("arena", True):
            # The first hook moves each gradient into the arena (one copy, in Python, once);
            # from then on backward accumulates there and nothing is staged.
            assert d == {"staged_in_bytes": 0, "staged_out_bytes": 0, "staged_tensors": 0,
                         "arena_tensors": 4}, (kwargs, per_step)
        else:
            assert d == {"staged_in_bytes": GRAD_BYTES, "staged_out_bytes": GRAD_BYTES,
                         "staged_tensors": 4, "arena_tensors": 0}, (kwargs, per_step)
    for c in calls:
        # groups=2: two groups of two gradients, one grouped allreduce each; else one allreduce
        # per gradient.
        assert c == ({"allreduce": 0, "grouped_allreduce": 2} if "groups" in kwargs else
                     {"allreduce": 4, "grouped_allreduce": 0}), (kwargs, calls)
    if "groups" in kwargs:
        assert counting.group_sizes == [2, 2] * len(calls), counting.group_sizes
    if r == 0:
        print("%s: staged in/out bytes per step %s" % (
            kwargs or "defaults", [(d["staged_in_bytes"], d["staged_out_bytes"])
                                   for d in per_step]))

del counting, real  # the client goes with shutdown()

# Shutdown moves arena tensors into ordinary memory: they stay readable, and init works again.
keep = hvd.arena_empty((3,)).fill_(5.0)
hvd.shutdown()
assert not hvd.is_arena_tensor(keep) and torch.all(keep == 5.0), keep
hvd.init()
again = hvd.arena_empty((3,)).fill_(1.0)
hvd.allreduce_(again, op=hvd.Sum)
assert torch.all(again == n), again

print("rank %d zero copy OK" % r)
