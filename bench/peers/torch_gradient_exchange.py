#!/usr/bin/python3
"""torch.distributed (gloo) peer of korovod-gradbench: a training step's gradient exchange.

Run with Debian's /usr/bin/python3 (python3-torch 1.13), one process per rank, with RANK,
WORLD_SIZE and INIT_FILE set (korovod-gradbench --peers does this, as does the peers harness's
launch.py). The gradient shapes come from `korovod-gradbench --print-shapes MODEL > shapes.json`
(ResNet-50/101 parameters in backward order), so both sides exchange the same tensors.

    torch_gradient_exchange.py --shapes shapes.json [--modes per-tensor,bucketed]
        [--warmup 3] [--steps 10] [--compute-gap-us 0] [--bucket-mb 25] [--first-bucket-mb 1]

Per step, after dist.barrier() (untimed), for every gradient in backward order: sleep the compute
gap, then
  per-tensor: dist.all_reduce(grad, async_op=True)               (like korovod fusion off)
  bucketed:   copy the gradient into its bucket's flat buffer; when the bucket is complete,
              all_reduce the bucket asynchronously; after the last, wait and copy every bucket
              back into the gradients                              (DDP's reducer: fusion on)
then wait for every work. Buckets are assigned once like DDP's compute_bucket_assignment_by_size:
gradients in backward order, a bucket closes once it holds >= the cap (the first bucket's cap is
--first-bucket-mb, the others --bucket-mb), flat buffers allocated once.
comm time = step wall time - time slept; per step the max over ranks; row time_us = median over the
timed steps. Verification on the first and last step: rank r fills tensor t, element i with
(r+1) + ((i+t) % 8); the SUM must be N(N+1)/2 + N*((i+t) % 8) everywhere (as korovod checks).
Rank 0 prints one JSON row per mode (peers schema, korovod-gradbench's fields). Exit status 0 ok,
3 a verification failed.
"""
import argparse
import datetime
import json
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gradient_check  # noqa: E402  (bench/peers/gradient_check.py)


def step_stats(v):
    v = sorted(v)
    n = len(v)
    med = v[n // 2] if n % 2 else 0.5 * (v[n // 2 - 1] + v[n // 2])
    p90 = v[min(n - 1, math.ceil(0.9 * n) - 1)]
    return dict(median=med, min=v[0], mean=sum(v) / n, p90=p90)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", required=True, help="JSON from korovod-gradbench --print-shapes")
    ap.add_argument("--modes", default="per-tensor,bucketed")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--compute-gap-us", type=float, default=0.0)
    ap.add_argument("--bucket-mb", type=float, default=25.0)
    ap.add_argument("--first-bucket-mb", type=float, default=1.0)
    ap.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    a = ap.parse_args()
    modes = [m for m in a.modes.split(",") if m]
    for m in modes:
        if m not in ("per-tensor", "bucketed"):
            raise SystemExit("unknown mode %r (per-tensor, bucketed)" % m)
    if a.steps < 1 or a.warmup < 0:
        raise SystemExit("--steps must be >= 1 and --warmup >= 0")

    import torch
    import torch.distributed as dist

    torch.set_num_threads(a.threads)
    with open(a.shapes) as f:
        spec = json.load(f)
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group("gloo", init_method="file://" + os.environ["INIT_FILE"], rank=rank,
                            world_size=world, timeout=datetime.timedelta(seconds=300))

    names = [t["name"] for t in spec["tensors"]]
    grads = [torch.zeros(t["shape"], dtype=torch.float32) for t in spec["tensors"]]
    nbytes = sum(g.numel() * 4 for g in grads)
    gap = a.compute_gap_us * 1e-6
    perf = time.perf_counter

    def fill():
        gradient_check.fill(grads, rank)

    inject = "PEERBENCH_INJECT_FAULT" in os.environ  # checker self-test, as in the peers

    def check(phase, mode):
        return gradient_check.count_wrong(grads, names, world, rank, inject,
                                          "torch rank %d, %s, %s" % (rank, mode, phase))

    # DDP-style bucket assignment over the backward order, buffers allocated once.
    first_cap = int(a.first_bucket_mb * (1 << 20))
    cap = int(a.bucket_mb * (1 << 20))
    buckets, cur, cur_bytes = [], [], 0
    for t, g in enumerate(grads):
        cur.append(t)
        cur_bytes += g.numel() * 4
        if cur_bytes >= (first_cap if not buckets else cap):
            buckets.append(cur)
            cur, cur_bytes = [], 0
    if cur:
        buckets.append(cur)
    bucket_of = {}
    flats, offsets = [], []
    for b, members in enumerate(buckets):
        off, offs = 0, []
        for t in members:
            bucket_of[t] = b
            offs.append(off)
            off += grads[t].numel()
        flats.append(torch.zeros(off, dtype=torch.float32))
        offsets.append(offs)

    def step(mode):
        slept = 0.0
        works = []
        t0 = perf()
        if mode == "per-tensor":
            for g in grads:
                if gap > 0:
                    s = perf()
                    time.sleep(gap)
                    slept += perf() - s
                works.append(dist.all_reduce(g, async_op=True))
            for w in works:
                w.wait()
        else:
            filled = [0] * len(buckets)
            for t, g in enumerate(grads):
                if gap > 0:
                    s = perf()
                    time.sleep(gap)
                    slept += perf() - s
                b = bucket_of[t]
                k = filled[b]
                off = offsets[b][k]
                flats[b][off:off + g.numel()].copy_(g.view(-1))
                filled[b] = k + 1
                if filled[b] == len(buckets[b]):
                    works.append(dist.all_reduce(flats[b], async_op=True))
            for b, w in enumerate(works):
                w.wait()
                for k, t in enumerate(buckets[b]):
                    off = offsets[b][k]
                    g = grads[t]
                    g.view(-1).copy_(flats[b][off:off + g.numel()])
        t1 = perf()
        return t1 - t0 - slept, len(works)

    failures = 0
    total = a.warmup + a.steps
    for mode in modes:
        times, collectives, wrong = [], 0, 0
        for i in range(total):
            verify = i == 0 or i == total - 1
            if verify:
                fill()
            dist.barrier()
            comm, ncoll = step(mode)
            if verify:
                wrong += check("step %d" % i, mode)
            if i >= a.warmup:
                times.append(comm)
                collectives += ncoll
        t = torch.tensor(times + [1.0 if wrong else 0.0], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        vals = t.tolist()
        ok = vals[-1] == 0.0
        step_max = vals[:-1]
        if not ok:
            failures += 1
        if rank == 0:
            algo = mode if mode == "per-tensor" else "bucketed-%gMiB" % a.bucket_mb
            if a.compute_gap_us > 0:
                algo += "+gap%gus" % a.compute_gap_us
            row = dict(peer="torch-gloo", transport="tcp", ranks=world, bytes=nbytes)
            if not ok:
                row.update(algo=algo, op="gradient_exchange", model=spec["model"], mode=mode,
                           error="verification failed")
            else:
                st = step_stats(step_max)
                algbw = nbytes / st["median"] / 1e9
                row.update(
                    time_us=round(st["median"] * 1e6, 3), algbw_gbps=algbw,
                    busbw_gbps=algbw * 2 * (world - 1) / world,
                    time_us_min=round(st["min"] * 1e6, 3),
                    time_us_mean=round(st["mean"] * 1e6, 3),
                    time_us_p90=round(st["p90"] * 1e6, 3),
                    iters=a.steps, warmup=a.warmup, algo=algo, inplace=True,
                    op="gradient_exchange", dtype="float32", model=spec["model"], mode=mode,
                    tensors=len(grads), gap_us=a.compute_gap_us,
                    version="torch " + torch.__version__, verified=True,
                    extra=dict(step_comm_us=[round(x * 1e6, 1) for x in step_max],
                               collectives_per_step=collectives / a.steps))
                if mode == "bucketed":
                    row["extra"].update(buckets=len(buckets), bucket_mb=a.bucket_mb,
                                        first_bucket_mb=a.first_bucket_mb)
            print(json.dumps(row), flush=True)
    dist.destroy_process_group()
    return 3 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
