"""Run under korovodrun: VGG-16 (torchvision's layout, 138.4 M parameters, 528 MiB of float32
gradients) trains a few SGD steps with hvd.DistributedOptimizer and the default settings; the
replicas stay identical. Small images keep the convolutions cheap; the parameters, and so the
gradient burst every step, are the real model's. Prints the gradient size and a digest.

  vgg16_worker.py [STEPS]
"""
import sys

import torch
import torch.nn as nn

import horovod.torch as hvd

CFG = [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"]


def vgg16():
    layers, cin = [], 3
    for v in CFG:
        if v == "M":
            layers.append(nn.MaxPool2d(2, 2))
        else:
            layers += [nn.Conv2d(cin, v, 3, padding=1), nn.ReLU(inplace=True)]
            cin = v
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d((7, 7)), nn.Flatten(),
                         nn.Linear(512 * 7 * 7, 4096), nn.ReLU(True), nn.Dropout(),
                         nn.Linear(4096, 4096), nn.ReLU(True), nn.Dropout(),
                         nn.Linear(4096, 1000))


def main():
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    torch.manual_seed(1 + r)  # different initial weights on purpose: broadcast fixes them
    torch.set_num_threads(1)
    model = vgg16()
    grad_mib = sum(p.numel() for p in model.parameters()) * 4 / 2**20
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    gen = torch.Generator().manual_seed(7 + r)  # different data per rank
    for step in range(steps):
        x = torch.randn(2, 3, 32, 32, generator=gen)
        y = torch.randint(0, 1000, (2,), generator=gen)
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        if r == 0:
            print("step %d loss %.4f" % (step, loss.item()), flush=True)
    # Per-parameter sums and sums of squares in float64, without copying the model.
    digest = torch.stack([torch.stack([p.detach().sum(dtype=torch.float64),
                                       torch.linalg.vector_norm(p.detach(), dtype=torch.float64)])
                          for p in model.parameters()])
    gathered = hvd.allgather(digest.unsqueeze(0), name="vgg16.digest")
    for i in range(n):
        assert torch.equal(gathered[i], digest), "rank %d differs from rank %d" % (i, r)
    print("rank %d vgg16 trained: %.1f MiB of gradients per step, replicas identical" % (
        r, grad_mib), flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
