"""A gradient burst the way DistributedOptimizer submits one: every parameter's allreduce_async of a
real model's shapes, then synchronize, checking every element of every result.

  burst_worker.py MODEL THREADS [expect-too-big]
MODEL: resnet50 (161 tensors, 97.5 MiB), vgg16 (32 tensors, 528 MiB) or big1 (one 256 MiB
tensor). THREADS > 1 submits from that many Python threads; they take tensors from one counter
under a lock, so every rank submits in the same order however its threads interleave.
"""
import sys
import threading

import torch

import horovod.torch as hvd


def resnet50_shapes():
    """torchvision's resnet50 parameters, in named_parameters() order."""
    shapes = [(64, 3, 7, 7), (64,), (64,)]
    inplanes = 64
    for planes, blocks in ((64, 3), (128, 4), (256, 6), (512, 3)):
        for b in range(blocks):
            shapes += [(planes, inplanes, 1, 1), (planes,), (planes,),
                       (planes, planes, 3, 3), (planes,), (planes,),
                       (planes * 4, planes, 1, 1), (planes * 4,), (planes * 4,)]
            if b == 0:
                shapes += [(planes * 4, inplanes, 1, 1), (planes * 4,), (planes * 4,)]
            inplanes = planes * 4
    shapes += [(1000, 2048), (1000,)]
    return shapes


def vgg16_shapes():
    shapes, cin = [], 3
    for cout in (64, 64, 128, 128, 256, 256, 256, 512, 512, 512, 512, 512, 512):
        shapes += [(cout, cin, 3, 3), (cout,)]
        cin = cout
    shapes += [(4096, 512 * 7 * 7), (4096,), (4096, 4096), (4096,), (1000, 4096), (1000,)]
    return shapes


MODELS = {"resnet50": resnet50_shapes, "vgg16": vgg16_shapes,
          "big1": lambda: [(64 << 20,)]}


def main():
    model, threads = sys.argv[1], int(sys.argv[2])
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    shapes = MODELS[model]()
    numel = sum(torch.Size(s).numel() for s in shapes)
    # Small integers: sums are exact in float32. Tensor i on rank r holds r + 1 + i % 7.
    grads = [torch.full(s, float(rank + 1 + i % 7)) for i, s in enumerate(shapes)]
    handles = [None] * len(grads)
    lock = threading.Lock()
    counter = [0]
    errors = []

    def submit():
        try:
            while True:
                with lock:
                    i = counter[0]
                    if i == len(grads):
                        return
                    counter[0] += 1
                    handles[i] = hvd.allreduce_async(grads[i], name="burst.%d" % i, op=hvd.Sum)
        except Exception as e:  # reported below, the test fails on it
            errors.append(e)

    if len(sys.argv) > 3 and sys.argv[3] == "expect-too-big":
        # A tensor larger than the whole heap is refused at once, naming it; the trainer and its
        # sidecar carry on.
        try:
            hvd.allreduce(grads[0], name="too.big")
            raise SystemExit("rank %d: a tensor larger than the heap was accepted" % rank)
        except (ValueError, RuntimeError) as e:  # Horovod's type for a refused argument
            print("rank %d refused %s: %s" % (rank, type(e).__name__, e), flush=True)
        small = hvd.allreduce(torch.ones(3), name="after.refusal", op=hvd.Sum)
        assert small.tolist() == [float(size)] * 3, small
        print("rank %d still works" % rank, flush=True)
        hvd.shutdown()
        return
    workers = [threading.Thread(target=submit) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    if errors:
        raise errors[0]
    base = size * (size + 1) // 2
    for i, h in enumerate(handles):
        out = hvd.synchronize(h)
        want = float(base + size * (i % 7))
        if out.shape != grads[i].shape or not bool((out == want).all()):
            raise SystemExit("rank %d: tensor %d (shape %s) wrong: expected all %s, got %s" % (
                rank, i, tuple(shapes[i]), want, out.flatten()[:4].tolist()))
    print("rank %d burst %s OK: %d tensors, %.1f MiB" % (
        rank, model, len(shapes), numel * 4 / 2**20), flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
