"""GPU tensors through the sidecar (run by test_korovod_torch.py::test_cuda_tensors on a GPU
host): every rank drives its own GPU, tensors stay in device memory (CUDA IPC to the sidecar,
NCCL there), and a few steps of training keep the replicas identical."""
import torch

import horovod.torch as hvd

hvd.init()
r, n = hvd.rank(), hvd.size()
torch.cuda.set_device(hvd.local_rank())
dev = torch.device("cuda", hvd.local_rank())
assert hvd.cuda_built() and hvd.nccl_built() > 0, (hvd.cuda_built(), hvd.nccl_built())

x = torch.full((1000,), float(r + 1), device=dev)
assert torch.equal(hvd.allreduce(x, op=hvd.Sum), torch.full_like(x, n * (n + 1) / 2))
hvd.allreduce_(x, op=hvd.Average)
assert torch.allclose(x, torch.full_like(x, (n + 1) / 2))
for dtype in (torch.float16, torch.bfloat16, torch.float64, torch.int32):
    t = torch.ones(333, device=dev, dtype=dtype) * (r + 1)
    out = hvd.allreduce(t, op=hvd.Sum, name="dtype.%s" % dtype)
    assert out.device == dev and torch.equal(out, torch.ones_like(t) * (n * (n + 1) // 2)), dtype
scaled = hvd.allreduce(torch.ones(64, device=dev), op=hvd.Sum, prescale_factor=0.5,
                       postscale_factor=4.0)
assert torch.allclose(scaled, torch.full((64,), 2.0 * n, device=dev))

# A burst of gradients (ResNet-50's count), fused in the sidecar's device buffer.
grads = [torch.full((17 + i,), float(r), device=dev) for i in range(161)]
outs = hvd.grouped_allreduce(grads, op=hvd.Sum)
assert all(torch.equal(o, torch.full_like(o, n * (n - 1) / 2)) for o in outs)
handles = [hvd.allreduce_async_(g, op=hvd.Average, name="burst.%d" % i)
           for i, g in enumerate(grads)]
for h in handles:
    hvd.synchronize(h)
assert torch.allclose(grads[160], torch.full_like(grads[160], (n - 1) / 2))

# A tensor larger than an expandable segment's 20 MiB pieces (PYTORCH_CUDA_ALLOC_CONF=
# expandable_segments:True): it spans several pieces, exported as file descriptors, mapped back to
# back by the sidecar; again with its pieces cached.
big = torch.full((12 << 20,), float(r), device=dev)  # 48 MiB
for _ in range(2):
    out = hvd.allreduce(big, op=hvd.Sum, name="big")
    assert torch.equal(out, torch.full_like(big, n * (n - 1) / 2))

w = torch.full((10, 10), float(r), device=dev)
hvd.broadcast_(w, root_rank=n - 1)
assert torch.equal(w, torch.full_like(w, float(n - 1)))
g = hvd.allgather(torch.full((r + 1, 3), float(r), device=dev))
assert g.device == dev and g.shape == (n * (n + 1) // 2, 3)
assert float(g[-1, 0]) == float(n - 1)
s = hvd.reducescatter(torch.ones(2 * n + 1, 4, device=dev), op=hvd.Sum)
assert s.device == dev and s.shape[0] == 2 + (1 if r == 0 else 0), s.shape
assert torch.equal(s, torch.full_like(s, float(n)))
a2a, received = hvd.alltoall(torch.full((n * (r + 1), 2), float(r), device=dev),
                             splits=torch.tensor([r + 1] * n, dtype=torch.int32))
assert a2a.device == dev and a2a.shape == (n * (n + 1) // 2, 2), a2a.shape
assert received.tolist() == [j + 1 for j in range(n)], received

model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4)).to(dev)
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                               named_parameters=model.named_parameters())
hvd.broadcast_optimizer_state(opt, root_rank=0)
torch.manual_seed(r)
for _ in range(5):
    opt.zero_grad()
    loss = model(torch.randn(16, 32, device=dev)).pow(2).mean()
    loss.backward()
    opt.step()
flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
gathered = hvd.allgather(flat.reshape(1, -1))
assert all(torch.equal(gathered[0], gathered[i]) for i in range(n)), "replicas diverged"
print("[%d] rank %d cuda ok" % (r, r), flush=True)
hvd.shutdown()
