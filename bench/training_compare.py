#!/usr/bin/python3
"""End-to-end training throughput: examples/pytorch_synthetic_benchmark.py on korovod (korovodrun:
N sidecars + N trainers) against the same models and loop on torch.distributed gloo DDP
(bench/peers/torch_synthetic_benchmark.py), launches interleaved so machine load hits both alike.

    bench/training_compare.py [--build build] [--ranks 2,4] [--models mlp,resnet20]
        [--repeats 3] [--batch-size 32] [--num-iters 5] [--out training.json]

One JSON row per (peer, model, ranks) in the peers' schema style: `img_per_s` is the median over
launches of each launch's "Total img/sec", with min/max over launches; a launch that fails gives
a row with "error". Prints a table with korovod ÷ torch per model and world size.
Exit status: 0 ok, 1 a launch failed.
"""
import argparse
import datetime
import json
import os
import re
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
EXAMPLE = os.path.join(REPO, "examples", "pytorch_synthetic_benchmark.py")
PEER = os.path.join(HERE, "peers", "torch_synthetic_benchmark.py")
TOTAL = re.compile(r"Total img/sec on \d+ rank\(s\): ([0-9.]+)")


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--build", default=os.path.join(REPO, "build"))
    p.add_argument("--ranks", default="2,4")
    p.add_argument("--models", default="mlp,resnet20")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--num-iters", type=int, default=5)
    p.add_argument("--timeout", type=float, default=600)
    p.add_argument("--out", default="")
    return p.parse_args()


def env_for(build):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(REPO, "python"),
                                         os.path.join(build, "python")])
    env["OMP_NUM_THREADS"] = "1"
    return env


def run_korovod(args, model, n):
    cmd = [os.path.join(args.build, "bin", "korovodrun"), "-np", str(n), sys.executable, EXAMPLE,
           "--model", model, "--batch-size", str(args.batch_size),
           "--num-iters", str(args.num_iters)]
    p = subprocess.run(cmd, env=env_for(args.build), capture_output=True, text=True,
                       timeout=args.timeout)
    return p.returncode, p.stdout + p.stderr


def run_torch(args, model, n, port):
    procs = []
    for r in range(n):
        env = env_for(args.build)
        env.update(RANK=str(r), WORLD_SIZE=str(n), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                   GLOO_SOCKET_IFNAME="lo")
        procs.append(subprocess.Popen(
            [sys.executable, PEER, "--model", model, "--batch-size", str(args.batch_size),
             "--num-iters", str(args.num_iters)], env=env, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True))
    outs, rc = [], 0
    for p in procs:
        try:
            out, _ = p.communicate(timeout=args.timeout)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            return 124, "torch peer timed out"
        outs.append(out)
        rc = rc or p.returncode
    return rc, "\n".join(outs)


def main():
    args = parse_args()
    ranks = [int(x) for x in args.ranks.split(",")]
    models = args.models.split(",")
    samples = {}
    failed = {}
    port = 29700
    for model in models:
        for n in ranks:
            for rep in range(args.repeats):
                # Alternate which side goes first so slow drift in machine load evens out.
                order = ("korovod", "torch") if rep % 2 == 0 else ("torch", "korovod")
                for peer in order:
                    port += 1
                    rc, out = (run_korovod(args, model, n) if peer == "korovod"
                               else run_torch(args, model, n, port))
                    m = TOTAL.search(out)
                    key = (peer, model, n)
                    if rc != 0 or not m:
                        failed[key] = "exit %d: %s" % (rc, out.strip().splitlines()[-1:] or "")
                        print("%s %s N=%d failed: %s" % (peer, model, n, failed[key]),
                              file=sys.stderr)
                        continue
                    samples.setdefault(key, []).append(float(m.group(1)))
                    print("%s %s N=%d launch %d: %.1f img/s" % (peer, model, n, rep,
                          float(m.group(1))), file=sys.stderr, flush=True)
    date = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    rows = []
    for model in models:
        for n in ranks:
            for peer, transport in (("korovod", "shm+sidecar"), ("torch", "tcp")):
                key = (peer, model, n)
                row = {"peer": peer if peer == "korovod" else "torch-ddp-gloo",
                       "transport": transport, "ranks": n, "model": model,
                       "batch_size": args.batch_size, "date": date}
                if key in failed:
                    row["error"] = failed[key]
                if key in samples:
                    v = samples[key]
                    row.update(img_per_s=statistics.median(v), img_per_s_min=min(v),
                               img_per_s_max=max(v), launches=len(v))
                rows.append(row)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=1)
    print("| model | ranks | korovod img/s | torch DDP gloo img/s | korovod ÷ torch |")
    print("|---|---|---|---|---|")
    for model in models:
        for n in ranks:
            k, t = samples.get(("korovod", model, n)), samples.get(("torch", model, n))
            if k and t:
                mk, mt = statistics.median(k), statistics.median(t)
                print("| %s | %d | %.1f | %.1f | %.2f |" % (model, n, mk, mt, mk / mt))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
