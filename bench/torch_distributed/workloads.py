"""One rank of the torch.distributed benchmarks (bench/torch_distributed/compare.py runs them):

    workloads.py ddp  --backend korovod|gloo   DDP step time, ResNet-18 on CPU (resnet18.py)
    workloads.py hvd                           the same model and loop through Horovod's API on
                                               korovod: hvd.DistributedOptimizer (korovodrun only)
    workloads.py fsdp --backend korovod|gloo   FSDP2 (fully_shard) step time, a small transformer
    workloads.py ops  --backend korovod|gloo   all_gather_into_tensor / reduce_scatter_tensor busbw

Rank and world come from the launcher's torchrun variables (korovodrun exports them, torchrun sets
them). Rank 0 prints one JSON row per measurement in the peers' schema (../shared/bench/peers):
step benches: `bytes` = gradient bytes per step, `time_us` = median over the timed steps of the
step time of the slowest rank; ops: the peers' protocol (verify, estimate, warm-up, barrier-aligned
timed ops max-reduced over ranks, median, verify again), `bytes` = the full tensor (N shards),
busbw = algbw (N-1)/N as nccl-tests counts these two collectives. A result that fails its check
(ranks' parameters differ, a collective's output is wrong) is a row with "error", never a number.
"""
import argparse
import json
import math
import os
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "examples",
                                "torch_distributed"))


def parse_size(s):
    mul = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(s[-1:].upper(), 1)
    return int(float(s[:-1] if mul > 1 else s) * mul)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("bench", choices=("ddp", "hvd", "fsdp", "ops"))
    p.add_argument("--backend", default="korovod")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--batch", type=int, default=8, help="ddp/hvd images per rank")
    p.add_argument("--image", type=int, default=32, help="ddp/hvd image side")
    p.add_argument("--sizes", default="4M,64M", help="ops: full tensor sizes")
    p.add_argument("--ops", default="all_gather_into_tensor,reduce_scatter_tensor")
    p.add_argument("--target-time", type=float, default=0.7, help="ops: seconds per size")
    return p.parse_args()


def stats(v):
    v = sorted(v)
    n = len(v)
    med = v[n // 2] if n % 2 else 0.5 * (v[n // 2 - 1] + v[n // 2])
    return dict(median=med, min=v[0], mean=sum(v) / n, p90=v[min(n - 1, math.ceil(0.9 * n) - 1)])


def emit(row):
    print(json.dumps(row), flush=True)


class TorchComm:
    """torch.distributed, initialised from the launcher's environment."""

    def __init__(self, backend):
        import torch.distributed as dist
        if backend == "korovod":
            import korovod.torch.distributed  # noqa: F401 - registers the name
        dist.init_process_group(backend)
        self.dist, self.rank, self.size = dist, dist.get_rank(), dist.get_world_size()

    def max(self, values):
        t = torch.tensor(values, dtype=torch.float64)
        self.dist.all_reduce(t, op=self.dist.ReduceOp.MAX)
        return t.tolist()

    def gather(self, t):
        out = [torch.empty_like(t) for _ in range(self.size)]
        self.dist.all_gather(out, t)
        return out

    def barrier(self):
        self.dist.barrier()

    def close(self):
        self.dist.destroy_process_group()


class HvdComm:
    """Horovod's API on korovod (korovod.torch)."""

    def __init__(self):
        import korovod.torch as hvd
        hvd.init()
        self.hvd, self.rank, self.size = hvd, hvd.rank(), hvd.size()

    def max(self, values):
        return self.hvd.allreduce(torch.tensor(values, dtype=torch.float64), op=self.hvd.Max,
                                  name="bench.max").tolist()

    def gather(self, t):
        return list(self.hvd.allgather(t.unsqueeze(0), name="bench.gather").unbind(0))

    def barrier(self):
        self.hvd.barrier()

    def close(self):
        self.hvd.shutdown()


def checksum(params):
    flat = torch.cat([p.detach().reshape(-1) for p in params]).double()
    return torch.stack([flat.sum(), (flat * flat).sum()])


def timed_steps(comm, step, warmup, steps):
    """Per-step seconds, each the slowest rank's, after `warmup` untimed steps."""
    for _ in range(warmup):
        step()
    comm.barrier()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    return comm.max(times)


def ranks_agree(comm, model):
    """Every rank's parameters bitwise equal to rank 0's (a gathered checksum)."""
    every = comm.gather(checksum(model.parameters()))
    return all(torch.equal(c, every[0]) for c in every)


def step_row(comm, bench, model, times, failure, extra):
    grads = [p for p in model.parameters() if p.requires_grad]
    nbytes = sum(p.numel() * p.element_size() for p in grads)
    row = dict(bench=bench, ranks=comm.size, bytes=nbytes,
               torch=torch.__version__.split("+")[0], params=sum(p.numel() for p in grads),
               tensors=len(grads), steps=len(times), **extra)
    if failure:
        row["error"] = failure
        return row
    st = stats(times)
    row.update(time_us=round(st["median"] * 1e6, 1), time_us_min=round(st["min"] * 1e6, 1),
               time_us_mean=round(st["mean"] * 1e6, 1), time_us_p90=round(st["p90"] * 1e6, 1),
               verified=True)
    return row


def resnet_step(model, opt, rank, a):
    g = torch.Generator().manual_seed(100 + rank)
    x = torch.randn(a.batch, 3, a.image, a.image, generator=g)
    y = torch.randint(0, 1000, (a.batch,), generator=g)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step():
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()
    return step


def bench_ddp(a):
    from resnet18 import ResNet18
    from torch.nn.parallel import DistributedDataParallel as DDP
    comm = TorchComm(a.backend)
    torch.manual_seed(0)
    model = DDP(ResNet18())
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    times = timed_steps(comm, resnet_step(model, opt, comm.rank, a), a.warmup, a.steps)
    failure = "" if ranks_agree(comm, model) else "ranks' parameters differ after the steps"
    row = step_row(comm, "ddp_step", model, times, failure,
                   dict(peer=peer(a.backend), transport=transport(a.backend), model="resnet18",
                        batch=a.batch, image=a.image))
    comm.close()
    return comm.rank, [row]


def bench_hvd(a):
    from resnet18 import ResNet18
    comm = HvdComm()
    hvd = comm.hvd
    torch.manual_seed(0)
    model = ResNet18()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    times = timed_steps(comm, resnet_step(model, opt, comm.rank, a), a.warmup, a.steps)
    failure = "" if ranks_agree(comm, model) else "ranks' parameters differ after the steps"
    row = step_row(comm, "ddp_step", model, times, failure,
                   dict(peer="korovod-hvd", transport="shm", model="resnet18", batch=a.batch,
                        image=a.image))
    comm.close()
    return comm.rank, [row]


def bench_fsdp(a):
    from fsdp2_model import ModelArgs, Transformer
    from torch.distributed.fsdp import fully_shard
    comm = TorchComm(a.backend)
    torch.manual_seed(0)
    args = ModelArgs(n_layers=4, n_heads=4, dim=256, vocab_size=4096, max_seq_len=64,
                     dropout_p=0)
    model = Transformer(args)
    for layer in model.layers:
        fully_shard(layer)
    fully_shard(model)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    tokens = torch.randint(0, args.vocab_size, (4, args.max_seq_len),
                           generator=torch.Generator().manual_seed(100 + comm.rank))

    def step():
        opt.zero_grad()
        model(tokens).sum().backward()
        opt.step()
    times = timed_steps(comm, step, a.warmup, a.steps)
    # Sharded parameters agree by construction; what can go wrong is a wrong gather or reduction
    # turning them into garbage: every gathered parameter must be finite.
    finite = all(bool(torch.isfinite(p.full_tensor()).all()) for p in model.parameters())
    row = step_row(comm, "fsdp2_step", model, times,
                   "" if finite else "a parameter is not finite after the steps",
                   dict(peer=peer(a.backend), transport=transport(a.backend),
                        model="transformer-4x256", batch=4, seq=args.max_seq_len))
    comm.close()
    return comm.rank, [row]


def peer(backend):
    return "korovod" if backend == "korovod" else "torch-" + backend


def transport(backend):
    return "shm" if backend == "korovod" else "tcp"


def main():
    a = parse_args()
    if a.bench == "ops":
        from ops import bench_ops
        comm = TorchComm(a.backend)
        rank, rows = comm.rank, bench_ops(comm, a, peer(a.backend), transport(a.backend))
        comm.close()
    else:
        rank, rows = {"ddp": bench_ddp, "hvd": bench_hvd, "fsdp": bench_fsdp}[a.bench](a)
    if rank == 0:
        for row in rows:
            emit(row)
    return 3 if any("error" in r for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
