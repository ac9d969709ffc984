"""One rank slowed on purpose, to be named as the straggler (tests/python/test_korovod_torch.py).

    korovodrun -np 3 python3 straggler_worker.py --slow-rank 2 --mode input|compute|none

Per step every rank submits 8 gradients with allreduce_async_ and synchronizes. The slow rank
sleeps 40 ms before its first gradient (--mode input: a slow data loader) or 8 ms before each
gradient after the first (--mode compute: a slow backward pass, 56 ms a step; none of it before
the step's first op, so that a loaded machine's scheduling delays at the start of a step cannot
outweigh it); with --mode none nobody is slowed.
"""
import argparse
import time

import torch
import horovod.torch as hvd


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--slow-rank", type=int, default=2)
    ap.add_argument("--mode", choices=["input", "compute", "none"], default="input")
    ap.add_argument("--steps", type=int, default=30)
    args = ap.parse_args()
    hvd.init()
    slow = args.mode != "none" and hvd.rank() == args.slow_rank
    grads = [torch.full((256,), float(hvd.rank() + 1)) for _ in range(8)]
    for _ in range(args.steps):
        if slow and args.mode == "input":
            time.sleep(0.040)
        handles = []
        for k, g in enumerate(grads):
            if slow and args.mode == "compute" and k > 0:
                time.sleep(0.008)
            g.fill_(float(hvd.rank() + 1))
            handles.append(hvd.allreduce_async_(g, op=hvd.Sum, name="grad.%d" % k))
        for h in handles:
            hvd.synchronize(h)
        expected = hvd.size() * (hvd.size() + 1) / 2
        assert all(float(g[0]) == expected for g in grads), [float(g[0]) for g in grads]
        time.sleep(0.010)  # the next step's forward pass, the same on every rank
    print("rank %d straggler worker done" % hvd.rank(), flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
