#!/usr/bin/python3
"""Per-step synchronize() wait of examples/pytorch_digits.py's training step, Horovod API only.

    korovodrun -np 1 /usr/bin/python3 bench/python/sync_wait.py [--steps 300] [--warmup 30]
    horovodrun --gloo -np 1 python bench/python/sync_wait.py        (Horovod itself)

The model, data and optimizer are the example's (its Net, digits, SGD with momentum, batch 32 per
rank, DistributedOptimizer over named parameters: 6 gradients per step). Per step the time spent in
optimizer.synchronize() is recorded, i.e. how long the step waits for its gradients after
backward; rank 0 prints one JSON row (peers schema fields plus median/min/mean/p90 of that wait,
max over ranks per step).
"""
import argparse
import importlib.util
import json
import math
import os
import sys
import time
import types

import numpy as np
import torch
import torch.nn.functional as F
import horovod.torch as hvd

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(HERE, "..", "..", "examples", "pytorch_digits.py")


def load_example():
    # The example imports korovod.torch; under Horovod itself that name is Horovod's module.
    try:
        import korovod.torch  # noqa: F401
    except ImportError:
        shim = types.ModuleType("korovod")
        shim.torch = hvd
        sys.modules["korovod"], sys.modules["korovod.torch"] = shim, hvd
    spec = importlib.util.spec_from_file_location("pytorch_digits", EXAMPLE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--batch-size", type=int, default=32)
    args = ap.parse_args()
    hvd.init()
    torch.manual_seed(42 + hvd.rank())
    torch.set_num_threads(1)
    from sklearn.datasets import load_digits
    digits = load_digits()
    x = torch.from_numpy((digits.data / 16.0).astype(np.float32))
    y = torch.from_numpy(digits.target.astype(np.int64))
    model = load_example().Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.05 * hvd.size(), momentum=0.9)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    waits = []
    n = len(x)
    for s in range(args.warmup + args.steps):
        lo = (s * args.batch_size) % (n - args.batch_size)
        opt.zero_grad()
        loss = F.cross_entropy(model(x[lo:lo + args.batch_size]), y[lo:lo + args.batch_size])
        loss.backward()
        t0 = time.perf_counter()
        opt.synchronize()
        t1 = time.perf_counter()
        with opt.skip_synchronize():
            opt.step()
        if s >= args.warmup:
            waits.append(t1 - t0)
    per_step = hvd.allreduce(torch.tensor(waits, dtype=torch.float64), op=hvd.Max,
                             name="sync_wait.max").tolist()
    engine = "korovod" if "korovod" in (hvd.__file__ or "") or hasattr(hvd, "arena_empty") \
        else "horovod"
    if hvd.rank() == 0:
        v = sorted(per_step)
        k = len(v)
        med = v[k // 2] if k % 2 else 0.5 * (v[k // 2 - 1] + v[k // 2])
        print(json.dumps({
            "peer": engine, "transport": "sidecar" if engine == "korovod" else "gloo",
            "op": "digits_synchronize_wait", "ranks": hvd.size(), "steps": k,
            "gradients": len(list(model.parameters())),
            "time_us": round(med * 1e6, 2), "min_us": round(v[0] * 1e6, 2),
            "mean_us": round(sum(v) / k * 1e6, 2),
            "p90_us": round(v[min(k - 1, math.ceil(0.9 * k) - 1)] * 1e6, 2),
            "date": time.strftime("%Y-%m-%d"),
        }), flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
