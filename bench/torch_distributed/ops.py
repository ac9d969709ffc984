"""all_gather_into_tensor and reduce_scatter_tensor (float32, SUM) under the peers' protocol
(../shared/bench/peers/README.md): verify, estimate, warm-up, barrier-aligned timed ops with the
per-op time max-reduced over ranks, median, back-to-back loop, verify again. `bytes` is the full
tensor: the output of all_gather_into_tensor, the input of reduce_scatter_tensor (N shards of
bytes/N), and busbw = algbw (N-1)/N, as nccl-tests count these two collectives."""
import os
import time

import torch


def _clamp(v, lo, hi):
    return max(lo, min(hi, v))


class _Op:
    """One collective on preallocated buffers, with a fill and a check that name what differs."""

    def __init__(self, dist, name, nbytes, rank, size):
        self.dist, self.name, self.rank, self.size = dist, name, rank, size
        full = nbytes // 4
        self.shard = full // size
        if name == "all_gather_into_tensor":
            self.inp = torch.empty(self.shard)
            self.out = torch.empty(self.shard * size)
        else:
            self.inp = torch.empty(self.shard * size)
            self.out = torch.empty(self.shard)

    def run(self):
        if self.name == "all_gather_into_tensor":
            self.dist.all_gather_into_tensor(self.out, self.inp)
        else:
            self.dist.reduce_scatter_tensor(self.out, self.inp)

    def fill(self):
        # Small integers: exact in float32 whatever the order of the sums.
        idx = torch.arange(self.inp.numel(), dtype=torch.float32)
        self.inp.copy_((idx % 13) + 16 * (self.rank + 1))
        self.out.fill_(-1.0)

    def check(self):
        """An empty string when the output is right, else what is wrong. PEERBENCH_INJECT_FAULT
        (the peers' switch) corrupts rank 0's first element first: every row must then fail."""
        if os.environ.get("PEERBENCH_INJECT_FAULT") and self.rank == 0:
            self.out[0] += 1
        if self.name == "all_gather_into_tensor":
            idx = torch.arange(self.shard, dtype=torch.float32) % 13
            want = torch.cat([idx + 16 * (r + 1) for r in range(self.size)])
        else:
            idx = torch.arange(self.shard * self.size, dtype=torch.float32) % 13
            mine = idx[self.rank * self.shard:(self.rank + 1) * self.shard]
            want = self.size * mine + 16 * self.size * (self.size + 1) / 2
        bad = (self.out != want).nonzero()
        if bad.numel() == 0:
            return ""
        i = int(bad[0])
        return "rank %d: %s element %d is %g, expected %g (%d wrong)" % (
            self.rank, self.name, i, float(self.out[i]), float(want[i]), bad.numel())


def _verify(comm, op):
    op.fill()
    op.run()
    problem = op.check()
    failed = comm.max([1.0 if problem else 0.0])[0]
    return problem or ("verification failed on another rank" if failed else "")


def _measure(comm, op, target):
    """The peers' protocol between the two verifications: per-op seconds (max over ranks), loop."""
    t0 = time.perf_counter()
    for _ in range(3):
        comm.barrier()
        op.run()
    t_it = comm.max([(time.perf_counter() - t0) / 3])[0]
    for _ in range(int(_clamp(0.2 * target / t_it, 1, 1000))):
        comm.barrier()
        op.run()
    iters = int(_clamp(target / t_it, 5, 200000))
    times = []
    for _ in range(iters):
        comm.barrier()
        t = time.perf_counter()
        op.run()
        times.append(time.perf_counter() - t)
    times = comm.max(times)
    loops = int(_clamp(0.3 * target / t_it, 3, 1000))
    comm.barrier()
    t = time.perf_counter()
    for _ in range(loops):
        op.run()
    loop = comm.max([(time.perf_counter() - t) / loops])[0]
    return times, loop, loops


def bench_ops(comm, a, peer, transport):
    from workloads import parse_size, stats
    rows = []
    for name in a.ops.split(","):
        for size_text in a.sizes.split(","):
            nbytes = parse_size(size_text)
            op = _Op(comm.dist, name, nbytes, comm.rank, comm.size)
            row = dict(peer=peer, transport=transport, ranks=comm.size,
                       bytes=op.shard * comm.size * 4, op=name, bench="op",
                       torch=torch.__version__.split("+")[0])
            problem = _verify(comm, op)
            if not problem:
                times, loop, loops = _measure(comm, op, a.target_time)
                problem = _verify(comm, op)
            if problem:
                row["error"] = problem
                rows.append(row)
                continue
            st = stats(times)
            algbw = row["bytes"] / st["median"] / 1e9
            row.update(time_us=round(st["median"] * 1e6, 1), algbw_gbps=algbw,
                       busbw_gbps=algbw * (comm.size - 1) / comm.size,
                       time_us_min=round(st["min"] * 1e6, 1),
                       time_us_p90=round(st["p90"] * 1e6, 1), time_us_loop=round(loop * 1e6, 1),
                       iters=len(times), loop_iters=loops, verified=True)
            rows.append(row)
    return rows
