"""PyTorch's FSDP2 tutorial program (`fully_shard`, a small transformer), any backend, torch >= 2.6:

    korovodrun -np 2 python3 fsdp2_tutorial.py                    # backend korovod
    python3 -m torch.distributed.run --nproc-per-node 2 fsdp2_tutorial.py
    python3 fsdp2_tutorial.py --reference INIT.pt                 # one process, no FSDP

Source: pytorch/tutorials, intermediate_source/FSDP_tutorial.rst ("Getting Started with Fully
Sharded Data Parallel (FSDP2)"), whose program is pytorch/examples distributed/FSDP2/train.py with
model.py (here fsdp2_model.py). Written here to the same structure: the Transformer built on the
meta device, `fully_shard` on every block and on the root, `to_empty` + `reset_parameters`, the
tutorial's `inspect_model` checks (every parameter a DTensor sharded on dim 0, float32), Adam
(lr 1e-2), `clip_grad_norm_(max_norm=1.0)`, 10 steps of `model(x).sum()` on random tokens, then
the full state dict gathered with DTensor's `full_tensor()` (the example's "dtensor_api" path).
What differs, and why:
  1. The backend is a variable (--backend or FSDP_BACKEND, default "korovod") where the example
     hard-codes "nccl"; CPU instead of CUDA (no device_id, `to_empty(device="cpu")`).
  2. Every submodule's `reset_parameters` runs (the example calls the root's only, which leaves the
     blocks' weights as `to_empty` left them: uninitialised memory).
  3. The tokens of step i come from seed 1000+i on every rank (the example draws them from the
     global generator after initialisation), so that one process can replay the run.
  4. No checkpoint files, mixed precision or explicit prefetching options (the example's flags).
  5. Output: rank 0 prints "step i loss L" (L = mean of the ranks' losses); --save-init FILE writes
     the full initial state dict (rank 0); --reference FILE trains an unsharded Transformer from
     that state in one process on the same tokens and prints the same lines, which FSDP2 must
     match: every rank has the same tokens, so the averaged gradient is one process's gradient.
"""
import argparse
import os

import torch
import torch.distributed as dist

from fsdp2_model import ModelArgs, Transformer

VOCAB, BATCH, SEQ = 1024, 32, 64


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", default=os.environ.get("FSDP_BACKEND", "korovod"))
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--save-init", default="")
    p.add_argument("--reference", default="", help="one process from this initial state")
    return p.parse_args()


def model_args():
    return ModelArgs(n_layers=10, n_heads=4, vocab_size=VOCAB, max_seq_len=SEQ, dropout_p=0)


def tokens(step):
    seeded = torch.Generator().manual_seed(1000 + step)
    return torch.randint(0, VOCAB, (BATCH, SEQ), generator=seeded)


def train(model, steps, report):
    optim = torch.optim.Adam(model.parameters(), lr=1e-2)
    for step in range(steps):
        loss = model(tokens(step)).sum()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
        optim.step()
        optim.zero_grad()
        report(step, loss.detach())


def inspect_model(model):
    from torch.distributed.fsdp import FSDPModule
    from torch.distributed.tensor import Shard
    assert isinstance(model, Transformer) and isinstance(model, FSDPModule)
    for param in model.parameters():
        assert param.placements == (Shard(0),), param.placements
        assert param.dtype == torch.float32


def full_state_dict(model):
    """The example's get_full_model_state_dict (dtensor_api): every rank gathers, rank 0 keeps."""
    state = {}
    for name, sharded in model.state_dict().items():
        full = sharded.full_tensor()
        if dist.get_rank() == 0:
            state[name] = full.cpu()
    return state


def run_fsdp(args):
    from torch.distributed.fsdp import fully_shard
    if "korovod" in args.backend:  # also "cpu:korovod,cuda:korovod"
        import korovod.torch.distributed  # noqa: F401 - registers the name "korovod"
    dist.init_process_group(backend=args.backend)
    torch.manual_seed(0)
    with torch.device("meta"):
        model = Transformer(model_args())
    for layer in model.layers:
        fully_shard(layer)
    fully_shard(model)
    model.to_empty(device="cpu")
    for module in model.modules():
        if hasattr(module, "reset_parameters"):
            module.reset_parameters()
    inspect_model(model)
    init = full_state_dict(model)
    if args.save_init and dist.get_rank() == 0:
        torch.save(init, args.save_init)
    dist.barrier()

    def report(step, loss):
        dist.all_reduce(loss)
        if dist.get_rank() == 0:
            print(f"step {step} loss {loss.item() / dist.get_world_size():.6f}", flush=True)

    train(model, args.steps, report)
    final = full_state_dict(model)
    if dist.get_rank() == 0:
        print(f"trained {sum(t.numel() for t in final.values())} parameters on "
              f"{dist.get_world_size()} ranks", flush=True)
    dist.destroy_process_group()


def run_reference(args):
    model = Transformer(model_args())
    model.load_state_dict(torch.load(args.reference))
    train(model, args.steps,
          lambda step, loss: print(f"step {step} loss {loss.item():.6f}", flush=True))


if __name__ == "__main__":
    a = parse_args()
    run_reference(a) if a.reference else run_fsdp(a)
