#!/usr/bin/python3
"""Allreduce micro-benchmark written against Horovod's API only, run unchanged by Horovod's
horovodrun (real Horovod 0.28.1, Gloo) and by korovodrun (korovod's `horovod` shim).

    horovodrun --gloo -np 2 -H localhost:2 python hvd_ops.py [flags]
    korovodrun -np 2 /usr/bin/python3 hvd_ops.py [flags]

Which engine answered `import horovod.torch` is read from the imported package (korovod's shim
imports korovod.torch); see --expect-engine.

--bench allreduce (default): per message size, float32, op=hvd.Sum through `hvd.allreduce` (the
out-of-place call a script writes), the protocol of /work/shared/bench/peers/README.md:
verify (rank r fills r+1, every element must be N(N+1)/2, verdict MAX-reduced), estimate
(3 barrier-aligned ops), warm-up clamp(0.2*T/t_it, 1, 1000), timed iters = clamp(T/t_it, 5, 200000)
of `hvd.barrier(); t0; hvd.allreduce(); t1`, per-iteration times MAX-reduced elementwise over
ranks (`hvd.allreduce(..., op=hvd.Max)`), median/min/mean/p90; loop: back-to-back ops between
two barriers (time_us_loop); verify again. One JSON row per size on rank 0's stdout.

--bench burst: a training step's gradient exchange without the model: the gradients of
--shapes (JSON of `korovod-gradbench --print-shapes resnet50`: 161 tensors, backward order),
each step `hvd.barrier()` (untimed), then every gradient through `hvd.allreduce_async_(g,
name="allreduce."+param, op=hvd.Sum)` in backward order and `hvd.synchronize` on every handle.
Step time MAX-reduced over ranks, median over --steps timed steps after --warmup-steps.
Verified on the first and last step: rank r fills tensor t, element i with (r+1) + ((i+t) % 8),
the sum must be N(N+1)/2 + N*((i+t) % 8). Other steps refill with r+1 (untimed).

Exit status: 0 ok, 3 a verification failed, 2 usage / wrong engine.
"""
import argparse
import json
import math
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "peers"))
import gradient_check  # noqa: E402  (bench/peers/gradient_check.py)


def parse_size(s):
    s = s.strip()
    suf = s.lstrip("0123456789.")
    num = s[: len(s) - len(suf)]
    mul = 1
    if suf:
        c = suf[0].upper()
        if c not in "KMGB":
            raise SystemExit("bad size %r" % s)
        mul = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "B": 1}[c]
    return int(float(num) * mul)


def timing_fields(st, nbytes, world):
    """The peers' schema fields of one row from stats() of per-op seconds."""
    algbw = nbytes / st["median"] / 1e9
    return dict(time_us=round(st["median"] * 1e6, 3), algbw_gbps=algbw,
                busbw_gbps=algbw * 2 * (world - 1) / world,
                time_us_min=round(st["min"] * 1e6, 3), time_us_mean=round(st["mean"] * 1e6, 3),
                time_us_p90=round(st["p90"] * 1e6, 3))


def stats(v):
    v = sorted(v)
    n = len(v)
    med = v[n // 2] if n % 2 else 0.5 * (v[n // 2 - 1] + v[n // 2])
    p90 = v[min(n - 1, math.ceil(0.9 * n) - 1)]
    return dict(median=med, min=v[0], mean=sum(v) / n, p90=p90, max=v[-1])


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bench", choices=["allreduce", "burst"], default="allreduce")
    ap.add_argument("--sizes", default="4,4K,1M,16M,64M", help="allreduce: bytes per rank")
    ap.add_argument("--target-time", type=float, default=0.7, help="allreduce: seconds per size")
    ap.add_argument("--min-iters", type=int, default=5)
    ap.add_argument("--max-iters", type=int, default=200000)
    ap.add_argument("--no-loop", action="store_true", help="allreduce: skip time_us_loop")
    ap.add_argument("--shapes", default="", help="burst: korovod-gradbench --print-shapes JSON")
    ap.add_argument("--warmup-steps", type=int, default=3, help="burst: untimed steps")
    ap.add_argument("--steps", type=int, default=10, help="burst: timed steps")
    ap.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    ap.add_argument("--expect-engine", choices=["korovod", "horovod"], default=None,
                    help="exit 2 if `import horovod.torch` resolved to the other engine")
    a = ap.parse_args()
    if a.bench == "burst" and not a.shapes:
        ap.error("--bench burst needs --shapes")
    if a.steps < 1 or a.warmup_steps < 0:
        ap.error("--steps must be >= 1 and --warmup-steps >= 0")
    return a


def detect_engine():
    """(peer, transport, version) of whatever `import horovod.torch` gave us."""
    import horovod
    if "korovod.torch" in sys.modules:
        import korovod
        # korovodrun: one sidecar per rank hosts the engine; trainer <-> sidecar through the
        # shared-memory arena, sidecar <-> sidecar over shm on one host (tcp across hosts).
        return "korovod", "sidecar", "korovod %s (shim horovod %s)" % (
            korovod.__version__, horovod.__version__)
    return "horovod", "gloo", "horovod %s" % horovod.__version__


def main():
    a = parse_args()
    import torch
    import horovod.torch as hvd

    peer, transport, version = detect_engine()
    if a.expect_engine and a.expect_engine != peer:
        print("hvd_ops.py: expected engine %s but `import horovod.torch` is %s (%s)" %
              (a.expect_engine, peer, hvd.__file__), file=sys.stderr)
        return 2
    torch.set_num_threads(a.threads)
    hvd.init()
    rank, world = hvd.rank(), hvd.size()
    perf = time.perf_counter
    inject = "PEERBENCH_INJECT_FAULT" in os.environ  # checker self-test, as in the peers

    def max_over_ranks(values, name):
        t = torch.tensor(values, dtype=torch.float64)
        return hvd.allreduce(t, op=hvd.Max, name=name).tolist()

    def emit(row):
        if rank == 0:
            base = dict(peer=peer, transport=transport, ranks=world)
            base.update(row)
            base.setdefault("version", version)
            base["torch"] = torch.__version__
            print(json.dumps(base), flush=True)

    failures = 0
    if a.bench == "allreduce":
        sizes = [parse_size(x) for x in a.sizes.split(",") if x.strip()]
        for b in sizes:
            if b <= 0 or b % 4:
                raise SystemExit("size %d is not a positive multiple of 4" % b)
        expect = float(world * (world + 1) // 2)
        for nbytes in sizes:
            count = nbytes // 4
            name = "hvd_ops.%d" % nbytes
            buf = torch.zeros(count, dtype=torch.float32)

            def verify(phase):
                buf.fill_(float(rank + 1))
                out = hvd.allreduce(buf, op=hvd.Sum, name=name)
                if inject and rank == 0:
                    out[-1] += 1.0
                bad = int((out != expect).sum().item())
                if bad:
                    print("[hvd_ops %s rank %d] VERIFY FAILED (%s) bytes=%d: %d/%d wrong" %
                          (peer, rank, phase, nbytes, bad, count), file=sys.stderr)
                return max_over_ranks([1.0 if bad else 0.0], "hvd_ops.verdict")[0] == 0.0

            ok = verify("pre")
            acc = 0.0
            t_start = perf()
            for _ in range(3):
                hvd.barrier()
                t0 = perf()
                hvd.allreduce(buf, op=hvd.Sum, name=name)
                acc += perf() - t0
            est = max_over_ranks([acc / 3, (perf() - t_start) / 3], "hvd_ops.est")
            t_est, t_it = max(est[0], 1e-7), max(est[1], 1e-7)
            warm = int(min(1000, max(1, math.ceil(0.2 * a.target_time / t_it))))
            iters = int(min(a.max_iters, max(a.min_iters, math.ceil(a.target_time / t_it))))
            for _ in range(warm):
                hvd.barrier()
                hvd.allreduce(buf, op=hvd.Sum, name=name)
            times = [0.0] * iters
            for i in range(iters):
                hvd.barrier()
                t0 = perf()
                hvd.allreduce(buf, op=hvd.Sum, name=name)
                times[i] = perf() - t0
            st = stats(max_over_ranks(times, "hvd_ops.times.%d" % nbytes))
            t_loop, loop_iters = -1.0, 0
            if not a.no_loop:
                loop_iters = int(min(a.max_iters, max(3, math.ceil(0.3 * a.target_time / t_est))))
                hvd.barrier()
                t0 = perf()
                for _ in range(loop_iters):
                    hvd.allreduce(buf, op=hvd.Sum, name=name)
                t_loop = max_over_ranks([(perf() - t0) / loop_iters], "hvd_ops.loop")[0]
            ok = verify("post") and ok
            del buf
            row = dict(bench="allreduce", bytes=nbytes, op="sum", dtype="float32",
                       inplace=False, call="hvd.allreduce")
            if not ok:
                row["error"] = "verification failed"
                failures += 1
            else:
                row.update(timing_fields(st, nbytes, world), iters=iters, warmup=warm,
                           verified=True)
                if not a.no_loop:
                    row.update(time_us_loop=round(t_loop * 1e6, 3), loop_iters=loop_iters)
            emit(row)
    else:
        with open(a.shapes) as f:
            spec = json.load(f)
        names = [t["name"] for t in spec["tensors"]]
        grads = [torch.zeros(t["shape"], dtype=torch.float32) for t in spec["tensors"]]
        nbytes = sum(g.numel() * 4 for g in grads)

        def fill_pattern():
            gradient_check.fill(grads, rank)

        def check(phase):
            return gradient_check.count_wrong(grads, names, world, rank, inject,
                                              "hvd_ops %s rank %d, %s" % (peer, rank, phase))

        total = a.warmup_steps + a.steps
        times, wrong = [], 0
        for i in range(total):
            verify = i == 0 or i == total - 1
            if verify:
                fill_pattern()
            else:
                for g in grads:
                    g.fill_(float(rank + 1))
            hvd.barrier()
            t0 = perf()
            handles = [hvd.allreduce_async_(g, name="allreduce." + n, op=hvd.Sum)
                       for n, g in zip(names, grads)]
            for h in handles:
                hvd.synchronize(h)
            dt = perf() - t0
            if verify:
                wrong += check("step %d" % i)
            if i >= a.warmup_steps:
                times.append(dt)
        vals = max_over_ranks(times + [1.0 if wrong else 0.0], "hvd_ops.burst")
        ok = vals[-1] == 0.0
        row = dict(bench="burst", bytes=nbytes, model=spec.get("model", "?"),
                   tensors=len(grads), op="sum", dtype="float32",
                   call="hvd.allreduce_async_+hvd.synchronize")
        if not ok:
            row["error"] = "verification failed"
            failures += 1
        else:
            st = stats(vals[:-1])
            row.update(timing_fields(st, nbytes, world), iters=a.steps,
                       warmup=a.warmup_steps, verified=True)
        emit(row)
    hvd.shutdown()
    return 3 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
