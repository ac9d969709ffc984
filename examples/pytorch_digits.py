#!/usr/bin/python3
"""Data-parallel training of a small network on scikit-learn's bundled digits (8x8 images, 10
classes; no download) with korovod's Horovod API.

    korovodrun -np 4 /usr/bin/python3 examples/pytorch_digits.py

Each rank trains on its shard of the training set with batch size --batch-size (global batch =
size x batch size); the learning rate is scaled by the number of ranks; rank 0's initial
parameters and optimizer state are broadcast; gradients are averaged by DistributedOptimizer as
backward produces them; metrics are averaged over ranks; only rank 0 prints and writes the
checkpoint. With --ranks-emulated N a single process uses global batch N x batch size (the
reference the multi-rank run must match).
"""
import argparse
import json
import os
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

import korovod.torch as hvd


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=15)
    p.add_argument("--batch-size", type=int, default=32, help="per rank")
    p.add_argument("--lr", type=float, default=0.05, help="per rank; scaled by size")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--checkpoint", default="/tmp/korovod-digits.pt")
    p.add_argument("--ranks-emulated", type=int, default=0,
                   help="single process with global batch = N x batch size (reference run)")
    p.add_argument("--metrics-json", default="", help="rank 0 writes final metrics here")
    return p.parse_args()


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(64, 128)
        self.fc2 = nn.Linear(128, 64)
        self.fc3 = nn.Linear(64, 10)

    def forward(self, x):
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        return self.fc3(x)


def main():
    args = parse_args()
    single = args.ranks_emulated > 0
    if not single:
        hvd.init()
    rank, size = (0, 1) if single else (hvd.rank(), hvd.size())
    scale = args.ranks_emulated if single else size
    torch.manual_seed(args.seed + rank)
    torch.set_num_threads(1)

    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    y = digits.target.astype(np.int64)
    x_train, x_test, y_train, y_test = train_test_split(
        x, y, test_size=0.25, random_state=args.seed, stratify=y)
    # Shard the training set by rank (every rank sees a disjoint slice each epoch).
    x_train_t, y_train_t = torch.from_numpy(x_train), torch.from_numpy(y_train)
    x_test_t, y_test_t = torch.from_numpy(x_test), torch.from_numpy(y_test)

    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * scale, momentum=0.9)
    if not single:
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        hvd.broadcast_optimizer_state(optimizer, root_rank=0)
        optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())

    batch = args.batch_size * (scale if single else 1)
    n = len(x_train_t)
    for epoch in range(1, args.epochs + 1):
        model.train()
        g = torch.Generator().manual_seed(args.seed * 1000 + epoch)  # same permutation everywhere
        perm = torch.randperm(n, generator=g)
        shard = perm[rank::size] if not single else perm
        start = time.perf_counter()
        seen, loss_sum = 0, 0.0
        steps = len(shard) // batch
        for s in range(steps):
            idx = shard[s * batch:(s + 1) * batch]
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x_train_t[idx]), y_train_t[idx])
            loss.backward()
            optimizer.step()
            seen += len(idx)
            loss_sum += loss.item() * len(idx)
        elapsed = time.perf_counter() - start
        model.eval()
        with torch.no_grad():
            correct = (model(x_test_t).argmax(dim=1) == y_test_t).float().mean().item()
        train_loss = loss_sum / max(seen, 1)
        samples_per_s = seen / elapsed if elapsed > 0 else 0.0
        if not single:
            stats = hvd.allreduce(torch.tensor([train_loss, samples_per_s]), op=hvd.Average,
                                  name="epoch_metrics")
            train_loss, samples_per_s = stats[0].item(), stats[1].item() * size
        if rank == 0:
            print(f"epoch {epoch:3d}  loss {train_loss:.4f}  test accuracy {100 * correct:.2f}%  "
                  f"{samples_per_s:,.0f} samples/s", flush=True)
    if rank == 0:
        torch.save({"model": model.state_dict(), "epochs": args.epochs}, args.checkpoint)
        print(f"checkpoint written to {args.checkpoint} (rank 0 only)", flush=True)
        if args.metrics_json:
            with open(args.metrics_json, "w") as f:
                json.dump({"test_accuracy": correct, "train_loss": train_loss,
                           "size": size, "global_batch": batch * (1 if single else size)}, f)
    if not single:
        hvd.shutdown()


if __name__ == "__main__":
    main()
