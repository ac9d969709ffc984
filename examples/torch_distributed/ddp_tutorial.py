"""PyTorch's "Getting Started with Distributed Data Parallel" tutorial, its torchrun program
(`elastic_ddp.py`: ToyModel, `init_process_group` from the environment, DDP, SGD, MSELoss), on any
backend. Run it as the tutorial runs it, or under korovodrun:

    korovodrun -np 2 python3 ddp_tutorial.py                      # backend korovod
    python3 -m torch.distributed.run --nproc-per-node 2 ddp_tutorial.py
    DDP_BACKEND=gloo torchrun --nproc-per-node 2 ddp_tutorial.py  # the tutorial's own backend

Source: pytorch/tutorials, intermediate_source/ddp_tutorial.rst, section "Initialize DDP with
torch.distributed.run/torchrun". Written here to the same structure; what differs, and why:
  1. The backend is a variable (DDP_BACKEND or --backend, default "korovod") where the tutorial
     hard-codes "nccl"; `import korovod.torch.distributed` registers the name (for any backend string naming korovod) when korovod is not
     pip-installed (an installed korovod registers it through torch's backend entry point).
  2. CPU: no `.to(device_id)` / `device_ids` (the tutorial needs a GPU per rank).
  3. --steps steps (default 20) on data drawn once from a fixed seed, where the tutorial takes one
     step on fresh random data, so that the loss can be seen to decrease; every rank draws its own
     shard (seed + rank), as a data loader with a DistributedSampler would give it.
  4. Output: rank 0 prints the global mean loss per step; at the end every rank checks that all
     ranks hold the same parameters (an all_gather of a checksum) and prints "ranks agree";
     --save-params FILE writes rank 0's parameters (torch.save) to compare backends.
"""
import argparse
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.optim as optim
from torch.nn.parallel import DistributedDataParallel as DDP


class ToyModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.net1 = nn.Linear(10, 10)
        self.relu = nn.ReLU()
        self.net2 = nn.Linear(10, 5)

    def forward(self, x):
        return self.net2(self.relu(self.net1(x)))


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", default=os.environ.get("DDP_BACKEND", "korovod"))
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--save-params", default="")
    return p.parse_args()


def ranks_agree(model):
    """True when every rank's parameters are bitwise equal to rank 0's: the sum and the sum of
    squares of all parameters, gathered from every rank."""
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).double()
    mine = torch.stack([flat.sum(), (flat * flat).sum()])
    every = [torch.zeros_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(every, mine)
    return all(torch.equal(e, every[0]) for e in every)


def demo_basic(args):
    if "korovod" in args.backend:  # also "cpu:korovod,cuda:korovod"
        import korovod.torch.distributed  # noqa: F401 - registers the name "korovod"
    dist.init_process_group(args.backend)
    rank = dist.get_rank()
    print(f"Start running basic DDP example on rank {rank}.", flush=True)

    torch.manual_seed(0)  # the same initial model everywhere; DDP broadcasts rank 0's anyway
    model = ToyModel()
    ddp_model = DDP(model)

    loss_fn = nn.MSELoss()
    optimizer = optim.SGD(ddp_model.parameters(), lr=0.001)

    data = torch.Generator().manual_seed(1000 + rank)
    inputs = torch.randn(20, 10, generator=data)
    labels = torch.randn(20, 5, generator=data)
    for step in range(args.steps):
        optimizer.zero_grad()
        loss = loss_fn(ddp_model(inputs), labels)
        loss.backward()
        optimizer.step()
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        if rank == 0:
            print(f"step {step} loss {mean.item() / dist.get_world_size():.6f}", flush=True)

    agree = ranks_agree(model)
    print(f"rank {rank}: ranks agree {agree}", flush=True)
    if args.save_params and rank == 0:
        torch.save({k: v.detach().clone() for k, v in model.state_dict().items()},
                   args.save_params)
    dist.destroy_process_group()
    if not agree:
        raise SystemExit(f"rank {rank}: parameters differ between ranks")


if __name__ == "__main__":
    demo_basic(parse_args())
