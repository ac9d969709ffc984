#!/usr/bin/python3
"""Horovod's PyTorch synthetic benchmark on korovod: images/s of a data-parallel training step on
random data, sized for CPUs.

    korovodrun -np 4 /usr/bin/python3 examples/pytorch_synthetic_benchmark.py

Same flags and output as Horovod's examples/pytorch/pytorch_synthetic_benchmark.py, except that
the model is defined here (torchvision is not a dependency): `resnet20` (the CIFAR ResNet of He et
al., 0.27 M parameters, 32x32 inputs) or `mlp`. The script only uses the Horovod API, so
`import horovod.torch as hvd` runs it unchanged.
"""
import argparse
import timeit

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim

import korovod.torch as hvd


def parse_args():
    p = argparse.ArgumentParser(description="PyTorch Synthetic Benchmark",
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--fp16-allreduce", action="store_true", default=False,
                   help="use fp16 compression during allreduce")
    p.add_argument("--model", type=str, default="resnet20", choices=["resnet20", "mlp"],
                   help="model to benchmark")
    p.add_argument("--batch-size", type=int, default=32, help="input batch size per rank")
    p.add_argument("--num-warmup-batches", type=int, default=5,
                   help="number of warm-up batches that don't count towards benchmark")
    p.add_argument("--num-batches-per-iter", type=int, default=5,
                   help="number of batches per benchmark iteration")
    p.add_argument("--num-iters", type=int, default=5, help="number of benchmark iterations")
    p.add_argument("--num-threads", type=int, default=1, help="torch intra-op threads per rank")
    p.add_argument("--batches-per-allreduce", type=int, default=1,
                   help="local gradient accumulation steps per allreduce")
    return p.parse_args()


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                          nn.BatchNorm2d(cout))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class ResNet20(nn.Module):
    """He et al. 2016, section 4.2: 3 stages of 3 basic blocks, 16/32/64 channels."""

    def __init__(self, num_classes=10):
        super().__init__()
        self.conv = nn.Conv2d(3, 16, 3, 1, 1, bias=False)
        self.bn = nn.BatchNorm2d(16)
        layers, cin = [], 16
        for cout, stride in ((16, 1), (32, 2), (64, 2)):
            for i in range(3):
                layers.append(BasicBlock(cin, cout, stride if i == 0 else 1))
                cin = cout
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(64, num_classes)

    def forward(self, x):
        x = self.layers(F.relu(self.bn(self.conv(x))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class Mlp(nn.Module):
    def __init__(self, num_classes=10):
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, 512), nn.ReLU(),
                                 nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, num_classes))

    def forward(self, x):
        return self.net(x)


def main():
    args = parse_args()
    hvd.init()
    torch.set_num_threads(args.num_threads)
    torch.manual_seed(1234 + hvd.rank())

    model = ResNet20() if args.model == "resnet20" else Mlp()
    # By default, Adasum doesn't need scaling up learning rate.
    lr_scaler = hvd.size()
    optimizer = optim.SGD(model.parameters(), lr=0.01 * lr_scaler)
    compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                         compression=compression,
                                         backward_passes_per_step=args.batches_per_allreduce)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)

    data = torch.randn(args.batch_size, 3, 32, 32)
    target = torch.LongTensor(args.batch_size).random_() % 10

    def benchmark_step():
        optimizer.zero_grad()
        for _ in range(args.batches_per_allreduce):
            output = model(data)
            loss = F.cross_entropy(output, target)
            loss.backward()
        optimizer.step()

    def log(s, nl=True):
        if hvd.rank() != 0:
            return
        print(s, end="\n" if nl else "", flush=True)

    params = sum(p.numel() for p in model.parameters())
    log("Model: %s (%d parameters in %d tensors)" % (args.model, params,
                                                       len(list(model.parameters()))))
    log("Batch size: %d" % args.batch_size)
    log("Number of ranks: %d" % hvd.size())

    log("Running warmup...")
    timeit.timeit(benchmark_step, number=args.num_warmup_batches)

    log("Running benchmark...")
    img_secs = []
    for x in range(args.num_iters):
        t = timeit.timeit(benchmark_step, number=args.num_batches_per_iter)
        img_sec = args.batch_size * args.batches_per_allreduce * args.num_batches_per_iter / t
        log("Iter #%d: %.1f img/sec per rank" % (x, img_sec))
        img_secs.append(img_sec)

    # Results
    img_sec_mean = np.mean(img_secs)
    img_sec_conf = 1.96 * np.std(img_secs)
    log("Img/sec per rank: %.1f +-%.1f" % (img_sec_mean, img_sec_conf))
    log("Total img/sec on %d rank(s): %.1f +-%.1f" %
        (hvd.size(), hvd.size() * img_sec_mean, hvd.size() * img_sec_conf))
    hvd.shutdown()


if __name__ == "__main__":
    main()
