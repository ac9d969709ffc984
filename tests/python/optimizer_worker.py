"""Run under korovodrun: DistributedOptimizer keeps the replicas identical; prints a digest."""
import sys

import torch
import torch.nn as nn

import korovod.torch as hvd

hvd.init()
r, n = hvd.rank(), hvd.size()
passes = int(sys.argv[1]) if len(sys.argv) > 1 else 1
compression = hvd.Compression.fp16 if len(sys.argv) > 2 and sys.argv[2] == "fp16" else hvd.Compression.none
torch.manual_seed(1234 + r)  # different initial weights on purpose
model = nn.Sequential(nn.Linear(10, 16), nn.ReLU(), nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05 * n, momentum=0.9)
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
hvd.broadcast_optimizer_state(opt, root_rank=0)
# Wrapped under no_grad(), as a model's set-up code may do: the hooks still reach every gradient.
with torch.no_grad():
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters(),
                                   backward_passes_per_step=passes, compression=compression)
print("rank %d torch %s gradient hooks: %s" % (r, torch.__version__, opt.hook_kind), flush=True)
gen = torch.Generator().manual_seed(99 + r)  # different data per rank
for step in range(10):
    opt.zero_grad()
    for _ in range(passes):
        xb = torch.randn(8, 10, generator=gen)
        loss = ((model(xb) - xb.sum(1, keepdim=True)) ** 2).mean()
        loss.backward()
    opt.step()
flat = torch.cat([p.detach().flatten() for p in model.parameters()])
gathered = hvd.allgather(flat.unsqueeze(0))
for i in range(n):
    assert torch.equal(gathered[i], flat), "rank %d differs from rank %d" % (i, r)
print("rank %d params identical sum=%.6f" % (r, flat.double().sum().item()), flush=True)
