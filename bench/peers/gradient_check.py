"""The gradient fill and check shared by the torch peer (torch_gradient_exchange.py) and the
Horovod comparison (bench/horovod/hvd_ops.py), as korovod-gradbench checks: rank r fills tensor t,
element i with (r+1) + ((i+t) % 8); the SUM over N ranks must be N(N+1)/2 + N*((i+t) % 8)."""
import sys

import torch


def pattern(t, n):
    return ((torch.arange(n, dtype=torch.int64) + t) % 8).to(torch.float32)


def fill(grads, rank):
    for t, g in enumerate(grads):
        g.view(-1).copy_(pattern(t, g.numel()) + float(rank + 1))


def count_wrong(grads, names, world, rank, inject, label):
    """Wrong elements after a SUM over `world` ranks; the first few go to stderr under `label`.
    With `inject` (PEERBENCH_INJECT_FAULT, the checker's self-test) rank 0 corrupts one first."""
    if inject and rank == 0:
        grads[-1].view(-1)[0] += 1.0
    bad, report = 0, []
    base = float(world * (world + 1) // 2)
    for t, g in enumerate(grads):
        want = pattern(t, g.numel()) * world + base
        wrong = (g.view(-1) != want).nonzero().view(-1)
        if wrong.numel():
            bad += wrong.numel()
            i = int(wrong[0])
            if len(report) < 5:
                report.append("%s[%d] = %g, expected %g" %
                              (names[t], i, float(g.view(-1)[i]), float(want[i])))
    if bad:
        print("[%s] VERIFY FAILED: %d wrong elements: %s" % (label, bad, "; ".join(report)),
              file=sys.stderr)
    return bad
