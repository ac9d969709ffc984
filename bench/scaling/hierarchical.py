#!/usr/bin/env python3
"""Hierarchical vs flat allreduce on an emulated cluster: H hosts (network namespaces, every
host's link shaped with tc htb to --rate-mbit both ways) of L ranks each; one korovod-bench
process per rank (`--join`), TCP between hosts, shared memory inside a host for the hierarchy.

For each launch and algorithm (interleaved, so drift hits both alike) it runs the peers'
protocol (bench/README.md) at every size and keeps rank 0's rows, annotated with the layout and
the link; then prints the median busbw of each algorithm and their ratio per size.

  hierarchical.py --bench build/bin/korovod-bench [--op allreduce] [--hosts 2]
                  [--ranks-per-host 2] [--rate-mbit 1000] [--sizes 4M,64M] [--algos ring,hier]
                  [--repeats 3] [--out rows.json]

Variants (--algos): ring, hier (allreduce's --algo), auto (the runtime's choice: hierarchical
where the layout allows), flat (the world's hierarchy off: every collective flat). Each row
carries its variant in "variant".
Needs root (ip netns, tc). Exit 0 when every launch verified; 77 (skipped) without root or
network namespaces.
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import emulated_cluster as ec  # noqa: E402  (the cluster of namespaces, shaping, processes)

BASE_PORT = 29700


def run_launch(args, cluster, procs, algo, work, launch):
    n_hosts, per = args.hosts, args.ranks_per_host
    peers = ",".join("%s:%d" % (cluster.addrs[h], BASE_PORT + l)
                     for h in range(n_hosts) for l in range(per))
    hosts = ",".join("h%d" % h for h in range(n_hosts) for _ in range(per))
    key = os.path.join(work, "key")
    ranks = []
    for r in range(n_hosts * per):
        cmd = [args.bench, args.op, "--join", str(r), "--peers", peers, "--hosts", hosts,
               "--transport", "tcp", "--sizes", args.sizes, "--job-key-file", key,
               "--target-time", str(args.target_time)]
        if algo == "flat":
            cmd += ["--hierarchy", "off"]
        elif algo != "auto":
            cmd += ["--algo", algo]
        if args.no_loop:
            cmd.append("--no-loop")
        log = os.path.join(work, "%s-%d-rank%d.log" % (algo, launch, r))
        ranks.append(procs.start(cluster.hosts[r // per], cmd, dict(os.environ), log,
                                 "rank %d" % r))
    deadline = time.time() + args.timeout
    for p in ranks:
        try:
            p.wait(timeout=max(1, deadline - time.time()))
        except Exception:  # noqa: BLE001 - any wait failure ends the launch
            procs.stop(ranks)
            raise SystemExit("%s launch %d: %s still running after %d s\n%s" % (
                algo, launch, p.what, args.timeout, ec.tail(p.logpath)))
    for p in ranks:
        if p.returncode != 0:
            raise SystemExit("%s launch %d: %s exited %d\n%s" % (
                algo, launch, p.what, p.returncode, ec.tail(p.logpath)))
    rows = []
    with open(ranks[0].logpath) as f:
        for line in f:
            if line.startswith("{"):
                row = json.loads(line)
                row.update({"variant": algo, "hosts": n_hosts, "ranks_per_host": per,
                            "link_mbit": args.rate_mbit, "launch": launch})
                rows.append(row)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bench", required=True)
    ap.add_argument("--op", default="allreduce",
                    choices=["allreduce", "allgather", "broadcast"])
    ap.add_argument("--hosts", type=int, default=2)
    ap.add_argument("--ranks-per-host", type=int, default=2)
    ap.add_argument("--rate-mbit", type=float, default=1000)
    ap.add_argument("--sizes", default="4M,64M")
    ap.add_argument("--algos", default="ring,hier")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--target-time", type=float, default=0.7)
    ap.add_argument("--no-loop", action="store_true")
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--out")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("SKIP: needs root (ip netns, tc)")
        return 77
    probe = ec.sh("ip", "netns", "add", "kvhprobe%d" % os.getpid(), check=False)
    if probe.returncode != 0:
        print("SKIP: cannot create a network namespace: %s" % probe.stdout.strip())
        return 77
    ec.sh("ip", "netns", "del", "kvhprobe%d" % os.getpid(), check=False)
    ec.Cluster.remove_stale()
    cluster = ec.Cluster(args.hosts, args.rate_mbit, 0)
    procs = ec.Procs()
    work = tempfile.mkdtemp(prefix="korovod-hier-")
    with open(os.path.join(work, "key"), "w") as f:
        f.write(os.urandom(16).hex() + "\n")
    rows = []
    try:
        cluster.up()
        link = cluster.measure_link()
        ec.log("%d hosts x %d ranks, links shaped to %g Mbit/s (one TCP stream measured %s)" % (
            args.hosts, args.ranks_per_host, args.rate_mbit,
            "%.0f Mbit/s" % link if link else "?"))
        for launch in range(args.repeats):
            for algo in args.algos.split(","):
                got = run_launch(args, cluster, procs, algo, work, launch)
                for row in got:
                    row["link_measured_mbit"] = round(link, 1) if link else None
                    ec.log("%s launch %d: %s B busbw %.3f GB/s median %.1f ms%s" % (
                        algo, launch, row["bytes"], row.get("busbw_gbps", 0), row.get("time_us", 0) / 1e3,
                        "" if row.get("verified", True) else " NOT VERIFIED"))
                rows += got
                if args.out:
                    with open(args.out, "w") as f:
                        json.dump(rows, f, indent=1)
    finally:
        procs.stop_all()
        cluster.down()
    algos = args.algos.split(",")
    print("| bytes | " + " | ".join("%s busbw GB/s (median of %d)" % (a, args.repeats)
                                    for a in algos) + " | " +
          " | ".join("%s / %s" % (a, algos[0]) for a in algos[1:]) + " |")
    print("|---|" + "---|" * (2 * len(algos) - 1))
    for size in sorted({r["bytes"] for r in rows}):
        med = [statistics.median(r.get("busbw_gbps", 0) for r in rows
                                 if r["bytes"] == size and r["variant"] == a) for a in algos]
        print("| %d | %s | %s |" % (size, " | ".join("%.3f" % m for m in med),
                                    " | ".join("%.2f" % (m / med[0]) for m in med[1:])))
    want = len(args.algos.split(",")) * args.repeats * len(args.sizes.split(","))
    if len(rows) != want:
        print("FAIL: %d rows, expected %d" % (len(rows), want))
        return 1
    return 0 if all(r.get("verified", True) for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
