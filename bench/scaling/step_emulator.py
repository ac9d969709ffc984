#!/usr/bin/env python3
"""One rank of an emulated data-parallel training step (bench/scaling/README.md).

The compute is a sleep (the ranks share two cores), the gradient exchange is real: the gradients
have the shapes of the model (`korovod-gradbench --print-shapes MODEL`, backward order) and go
through the engine under test as they become ready during the backward pass, as Horovod's
DistributedOptimizer hooks (or DDP's reducer) submit them.

    step_emulator.py --api horovod --shapes s.json --compute-ms 9750 [--fwd-frac 0.333]
                     [--warmup 2] [--steps 5] [--grad-memory auto|plain]
    step_emulator.py --api ddp --shapes s.json --compute-ms 9750 --ddp-buckets on|off
                     (RANK, WORLD_SIZE, DDP_INIT=tcp://host:port, GLOO_SOCKET_IFNAME)

--api horovod uses only the Horovod API (`import horovod.torch as hvd`): it runs unchanged on
korovod (its shim) and on Horovod itself; which one is decided by the interpreter and PYTHONPATH.

One step: t0; sleep until t0 + forward time; then for each gradient in backward order sleep until
its layer's backward share has elapsed and submit it (hvd.allreduce_async_, op Sum, or DDP's
bucket all_reduce); then synchronize every handle; step time = wall time from t0. The backward
time is split over the tensors in proportion to an estimate of each layer's backward FLOPs (weight
elements x the output resolution of its ResNet stage). Deadlines are absolute, so time spent
submitting does not add to the compute time unless a submission overruns its layer's share.

The first and the last step are verified (every rank fills rank+1; the SUM must be N(N+1)/2 in
every element), outside the timed region. Rank 0 prints one JSON line: per-step times (max over
ranks), median, and the engine it ran on.
"""
import argparse
import json
import math
import os
import sys
import time

# Output resolution (H = W) of each torchvision ResNet stage for a 224x224 input.
_STAGE_RES = {"conv1": 112, "bn1": 112, "layer1": 56, "layer2": 28, "layer3": 14, "layer4": 7,
              "fc": 1}


def layer_cost(name, numel):
    """Rough backward FLOPs of the layer that owns this parameter (relative units)."""
    parts = name.split(".")
    stage = parts[0]
    res = _STAGE_RES.get(stage, 7)
    # ResNet v1.5: a stage's first conv1 (1x1) still runs at the previous stage's resolution.
    if stage.startswith("layer") and stage != "layer1" and len(parts) > 2 and parts[1] == "0" \
            and parts[2] in ("conv1", "bn1"):
        res *= 2
    is_norm = any(p.startswith("bn") for p in parts) or (len(parts) > 3 and parts[2] == "downsample"
                                                          and parts[3] == "1")
    if is_norm:
        return numel * res * res * 4.0  # elementwise over the activation (numel = channels)
    return numel * res * res * 2.0      # weight gradient + input gradient (MACs)


def sleep_until(t):
    while True:
        d = t - time.perf_counter()
        if d <= 0:
            return
        time.sleep(d)


def median(v):
    v = sorted(v)
    n = len(v)
    return v[n // 2] if n % 2 else 0.5 * (v[n // 2 - 1] + v[n // 2])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--api", choices=("horovod", "ddp"), required=True)
    ap.add_argument("--shapes", required=True)
    ap.add_argument("--compute-ms", type=float, required=True,
                    help="forward+backward compute time of one step, already dilated")
    ap.add_argument("--fwd-frac", type=float, default=1.0 / 3.0,
                    help="share of the compute time spent in forward (backward ~ 2x forward)")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--grad-memory", choices=("auto", "plain"), default="auto",
                    help="auto: gradients where the engine's DistributedOptimizer keeps them "
                         "(korovod: hvd.arena_zeros_like; Horovod has no such call)")
    ap.add_argument("--ddp-buckets", choices=("on", "off"), default="on")
    ap.add_argument("--bucket-mb", type=float, default=25.0, help="DDP bucket_cap_mb")
    ap.add_argument("--first-bucket-mb", type=float, default=1.0,
                    help="DDP's first bucket cap (torch.distributed._DEFAULT_FIRST_BUCKET_BYTES)")
    ap.add_argument("--no-verify", action="store_true")
    a = ap.parse_args()
    if a.steps < 1 or a.warmup < 0:
        raise SystemExit("--steps must be >= 1, --warmup >= 0")

    import torch
    torch.set_num_threads(1)
    with open(a.shapes) as f:
        spec = json.load(f)
    tensors = spec["tensors"]
    numels = [math.prod(t["shape"]) for t in tensors]
    costs = [layer_cost(t["name"], n) for t, n in zip(tensors, numels)]
    total_cost = sum(costs)
    compute = a.compute_ms / 1e3
    fwd = compute * a.fwd_frac
    bwd = compute - fwd
    cum, acc = [], 0.0
    for c in costs:
        acc += c
        cum.append(bwd * acc / total_cost)

    perf = time.perf_counter
    if a.api == "horovod":
        import horovod.torch as hvd
        hvd.init()
        rank, world = hvd.rank(), hvd.size()
        engine_file = getattr(hvd, "__file__", "?")
        in_arena = a.grad_memory == "auto" and hasattr(hvd, "arena_zeros_like")
        grads = []
        for t in tensors:
            z = torch.zeros(t["shape"], dtype=torch.float32)
            grads.append(hvd.arena_zeros_like(z) if in_arena else z)

        def submit_all(step_t0):
            handles = []
            tb = step_t0 + fwd
            for i, g in enumerate(grads):
                sleep_until(tb + cum[i])
                handles.append(hvd.allreduce_async_(g, name="grad.%d" % i, op=hvd.Sum))
            for h in handles:
                hvd.synchronize(h)
            return len(handles)

        def gather_max(times):
            t = hvd.allgather(torch.tensor([times], dtype=torch.float64), name="step_times")
            return t.max(dim=0).values.tolist()

        def align():
            hvd.allreduce(torch.zeros(1), name="align", op=hvd.Sum)

        import horovod
        version = "horovod API " + getattr(horovod, "__version__", "?")
        if "korovod" in engine_file or hasattr(hvd, "arena_empty"):
            import korovod
            version = "korovod " + getattr(korovod, "__version__", "?")
    else:
        import datetime
        import torch.distributed as dist
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        dist.init_process_group("gloo", init_method=os.environ["DDP_INIT"], rank=rank,
                                world_size=world, timeout=datetime.timedelta(seconds=600))
        engine_file = dist.__file__
        in_arena = False
        grads = [torch.zeros(t["shape"], dtype=torch.float32) for t in tensors]
        # DDP's compute_bucket_assignment_by_size over the backward order: a bucket closes once it
        # holds >= its cap (the first bucket's cap is first_bucket_mb); flat buffers made once.
        if a.ddp_buckets == "on":
            first_cap, cap = int(a.first_bucket_mb * (1 << 20)), int(a.bucket_mb * (1 << 20))
            buckets, cur, cur_bytes = [], [], 0
            for i, n in enumerate(numels):
                cur.append(i)
                cur_bytes += n * 4
                if cur_bytes >= (first_cap if not buckets else cap):
                    buckets.append(cur)
                    cur, cur_bytes = [], 0
            if cur:
                buckets.append(cur)
        else:
            buckets = [[i] for i in range(len(grads))]
        bucket_of, offsets, flats = {}, [], []
        for b, members in enumerate(buckets):
            off, offs = 0, []
            for i in members:
                bucket_of[i] = b
                offs.append(off)
                off += numels[i]
            offsets.append(offs)
            flats.append(torch.zeros(off, dtype=torch.float32) if len(members) > 1 else None)

        def submit_all(step_t0):
            works = []
            filled = [0] * len(buckets)
            tb = step_t0 + fwd
            for i, g in enumerate(grads):
                sleep_until(tb + cum[i])
                b = bucket_of[i]
                if flats[b] is None:
                    works.append((b, dist.all_reduce(g, async_op=True)))
                    continue
                k = filled[b]
                flats[b][offsets[b][k]:offsets[b][k] + numels[i]].copy_(g.view(-1))
                filled[b] = k + 1
                if filled[b] == len(buckets[b]):
                    works.append((b, dist.all_reduce(flats[b], async_op=True)))
            for b, w in works:
                w.wait()
                if flats[b] is not None:
                    for k, i in enumerate(buckets[b]):
                        grads[i].view(-1).copy_(flats[b][offsets[b][k]:offsets[b][k] + numels[i]])
            return len(works)

        def gather_max(times):
            t = torch.tensor(times, dtype=torch.float64)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            return t.tolist()

        def align():
            dist.barrier()

        version = "torch " + torch.__version__

    def fill():
        for g in grads:
            g.fill_(float(rank + 1))

    def check():
        want = float(world * (world + 1) // 2)
        bad = 0
        for t, g in zip(tensors, grads):
            if not bool(torch.all(g == want)):
                bad += 1
                if bad <= 3:
                    print("[rank %d] VERIFY FAILED: %s holds %g.. expected %g" %
                          (rank, t["name"], float(g.view(-1)[0]), want), file=sys.stderr)
        return bad

    total = a.warmup + a.steps
    times, wrong, collectives = [], 0, 0
    align()
    for s in range(total):
        verify = not a.no_verify and (s == 0 or s == total - 1)
        if verify:
            fill()
        t0 = perf()
        n = submit_all(t0)
        t1 = perf()
        if verify:
            wrong += check()
        if s >= a.warmup:
            times.append(t1 - t0)
            collectives += n
        print("[rank %d] step %d %.1f ms%s" % (rank, s, (t1 - t0) * 1e3,
                                               " (warm-up)" if s < a.warmup else ""),
              file=sys.stderr, flush=True)
    vals = gather_max(times + [float(wrong)])
    step_max, wrong_any = vals[:-1], vals[-1]
    if rank == 0:
        nbytes = sum(numels) * 4
        med = median(step_max)
        row = dict(ranks=world, bytes=nbytes, time_us=round(med * 1e6, 1),
                   step_ms=round(med * 1e3, 2), step_ms_all=[round(x * 1e3, 2) for x in step_max],
                   step_ms_min=round(min(step_max) * 1e3, 2),
                   compute_ms=a.compute_ms, fwd_frac=a.fwd_frac, iters=a.steps,
                   warmup=a.warmup, tensors=len(tensors), model=spec["model"],
                   grad_memory="arena" if in_arena else "plain", version=version,
                   engine_module=engine_file,
                   collectives_per_step=collectives / a.steps,
                   verified=not a.no_verify and wrong_any == 0)
        if wrong_any:
            row["error"] = "verification failed"
        print("RESULT " + json.dumps(row), flush=True)
    if a.api == "horovod":
        hvd.shutdown()
    else:
        dist.destroy_process_group()
    return 3 if wrong_any else 0


if __name__ == "__main__":
    sys.exit(main())
