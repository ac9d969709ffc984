#!/usr/bin/python3
"""Horovod's elastic PyTorch synthetic benchmark on korovod: the synthetic benchmark as an elastic
job (hvd.elastic.run, hvd.elastic.TorchState), which carries on when workers come and go.

    korovodrun --min-np 2 --max-np 4 --host-discovery-script ./discover_hosts.sh \\
        /usr/bin/python3 examples/pytorch_synthetic_benchmark_elastic.py

Same flags, state and output as Horovod's examples/elastic/pytorch/
pytorch_synthetic_benchmark_elastic.py, except that the model comes from
pytorch_synthetic_benchmark.py beside it (`resnet20` or `mlp`, 32x32 inputs: torchvision is not a
dependency). Only the Horovod API is used, so `import horovod.torch as hvd` runs it unchanged.
"""
import argparse
import os
import sys
import timeit

import numpy as np
import torch
import torch.nn.functional as F
import torch.optim as optim

import horovod.torch as hvd

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pytorch_synthetic_benchmark import Mlp, ResNet20  # noqa: E402

parser = argparse.ArgumentParser(description="PyTorch Synthetic Benchmark (elastic)",
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
parser.add_argument("--fp16-allreduce", action="store_true", default=False,
                    help="use fp16 compression during allreduce")
parser.add_argument("--model", type=str, default="resnet20", choices=["resnet20", "mlp"],
                    help="model to benchmark")
parser.add_argument("--batch-size", type=int, default=32, help="input batch size")
parser.add_argument("--num-warmup-batches", type=int, default=5,
                    help="number of warm-up batches that don't count towards benchmark")
parser.add_argument("--num-batches-per-iter", type=int, default=5,
                    help="number of batches per benchmark iteration")
parser.add_argument("--num-iters", type=int, default=10, help="number of benchmark iterations")
parser.add_argument("--num-batches-per-commit", type=int, default=1,
                    help="number of batches per commit of the elastic state object")
parser.add_argument("--num-threads", type=int, default=1, help="torch intra-op threads per rank")
args = parser.parse_args()

hvd.init()
torch.set_num_threads(args.num_threads)
model = ResNet20() if args.model == "resnet20" else Mlp()


def lr_scaler():
    return hvd.size()


lr = 0.01
optimizer = optim.SGD(model.parameters(), lr=lr * lr_scaler())
compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none
optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                     compression=compression, op=hvd.Average)

data = torch.randn(args.batch_size, 3, 32, 32)
target = torch.LongTensor(args.batch_size).random_() % 10


def benchmark_step(state):
    optimizer.zero_grad()
    output = model(data)
    loss = F.cross_entropy(output, target)
    loss.backward()
    optimizer.step()
    state.batch += 1
    if state.batch == args.num_batches_per_commit:
        state.batch = 0
        state.commit()


def log(s, nl=True):
    if hvd.rank() != 0:
        return
    print(s, end="\n" if nl else "", flush=True)


log("Model: %s" % args.model)
log("Batch size: %d" % args.batch_size)
log("Number of CPUs: %d" % hvd.size())


@hvd.elastic.run
def run_benchmark(state):
    if not state.warm:
        log("Running warmup...")
        timeit.timeit(lambda: benchmark_step(state), number=args.num_warmup_batches)
        state.warm = True
        state.commit()
    if state.iter == 0:
        log("Running benchmark...")
    for x in range(state.iter, args.num_iters):
        time = timeit.timeit(lambda: benchmark_step(state), number=args.num_batches_per_iter)
        img_sec = args.batch_size * args.num_batches_per_iter / time
        log("Iter #%d: %.1f img/sec per CPU (%d CPUs)" % (x, img_sec, hvd.size()))
        state.img_secs.append(img_sec)
        state.iter = x + 1
        state.commit()


def on_state_reset():
    # The learning rate follows the world size.
    for param_group in optimizer.param_groups:
        param_group["lr"] = lr * lr_scaler()


state = hvd.elastic.TorchState(model, optimizer, img_secs=[], iter=0, batch=0, warm=False)
state.register_reset_callbacks([on_state_reset])
run_benchmark(state)

img_sec_mean = np.mean(state.img_secs)
img_sec_conf = 1.96 * np.std(state.img_secs)
log("Img/sec per CPU: %.1f +-%.1f" % (img_sec_mean, img_sec_conf))
log("Total img/sec on %d CPU(s): %.1f +-%.1f" %
    (hvd.size(), hvd.size() * img_sec_mean, hvd.size() * img_sec_conf))
