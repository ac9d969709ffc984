#!/usr/bin/python3
"""torch.distributed peer of examples/pytorch_synthetic_benchmark.py: the same models, batch and
timing loop, with gradients averaged by DistributedDataParallel over gloo (25 MiB buckets, two
communication threads) instead of korovod. Started by bench/training_compare.py, one process per
rank, with RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT set.

    torch_synthetic_benchmark.py [--model resnet20|mlp] [--batch-size 32] [--num-iters 5] ...

Rank 0 prints the same lines as the korovod example ("Img/sec per rank: M +-C",
"Total img/sec on N rank(s): T +-C").
"""
import importlib.util
import os
import timeit

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
import torch.optim as optim
from torch.nn.parallel import DistributedDataParallel

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(HERE, "..", "..", "examples", "pytorch_synthetic_benchmark.py")


def load_example():
    # The models and flags come from the korovod example itself, so both sides train the same net.
    spec = importlib.util.spec_from_file_location("synthetic_example", EXAMPLE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main():
    ex = load_example()
    args = ex.parse_args()
    dist.init_process_group("gloo")
    rank, size = dist.get_rank(), dist.get_world_size()
    torch.set_num_threads(args.num_threads)
    torch.manual_seed(1234 + rank)
    model = ex.ResNet20() if args.model == "resnet20" else ex.Mlp()
    model = DistributedDataParallel(model)  # broadcasts rank 0's parameters
    optimizer = optim.SGD(model.parameters(), lr=0.01 * size)
    if args.fp16_allreduce:
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
        model.register_comm_hook(None, default_hooks.fp16_compress_hook)
    data = torch.randn(args.batch_size, 3, 32, 32)
    target = torch.LongTensor(args.batch_size).random_() % 10

    def benchmark_step():
        optimizer.zero_grad()
        for i in range(args.batches_per_allreduce):
            if i + 1 < args.batches_per_allreduce:
                with model.no_sync():
                    F.cross_entropy(model(data), target).backward()
            else:
                F.cross_entropy(model(data), target).backward()
        optimizer.step()

    def log(s):
        if rank == 0:
            print(s, flush=True)

    log("Model: %s; batch size %d; %d ranks (torch.distributed gloo DDP)" %
        (args.model, args.batch_size, size))
    timeit.timeit(benchmark_step, number=args.num_warmup_batches)
    img_secs = []
    for x in range(args.num_iters):
        t = timeit.timeit(benchmark_step, number=args.num_batches_per_iter)
        img_sec = args.batch_size * args.batches_per_allreduce * args.num_batches_per_iter / t
        log("Iter #%d: %.1f img/sec per rank" % (x, img_sec))
        img_secs.append(img_sec)
    mean, conf = np.mean(img_secs), 1.96 * np.std(img_secs)
    log("Img/sec per rank: %.1f +-%.1f" % (mean, conf))
    log("Total img/sec on %d rank(s): %.1f +-%.1f" % (size, size * mean, size * conf))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
