#!/usr/bin/python3
"""korovod against Horovod built with TensorFlow: examples/tensorflow2_synthetic_benchmark.py
(Horovod's TF2 synthetic benchmark, DistributedGradientTape in a tf.function) run by korovodrun
on korovod and by Horovod's own horovodrun --gloo on Horovod, launches alternating, the same
script and flags.

    bench/tensorflow/synthetic_vs_horovod.py --horovod-python /tmp/hvd-tf-venv/bin/python \\
        [--ranks 2] [--repeats 3] [--model MobileNetV2] [--image-size 64] [--batch-size 16]
        [--out docs/bench-results/tensorflow-synthetic-horovod.json]

--horovod-python: a Python whose `horovod` is Horovod built with TensorFlow (HOROVOD_WITH_
TENSORFLOW=1, Gloo) and whose TensorFlow is the one korovod's op library was built against;
its bin/ holds horovodrun. Rows: the schema of ../shared/bench/peers/README.md (time_us: the
median step time over iterations, from img/sec per rank) plus img_sec_total (median); a table
with korovod / Horovod.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
EXAMPLE = os.path.join(REPO, "examples", "tensorflow2_synthetic_benchmark.py")
ITER = re.compile(r"Iter #\d+: ([0-9.]+) img/sec per CPU")


def launch(args, engine, n):
    flags = ["--model", args.model, "--image-size", str(args.image_size), "--batch-size",
             str(args.batch_size), "--num-warmup-batches", str(args.warmup),
             "--num-batches-per-iter", str(args.batches_per_iter), "--num-iters",
             str(args.iters)]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", OMP_NUM_THREADS="1")
    if args.legacy_keras:
        env["TF_USE_LEGACY_KERAS"] = "1"
    if engine == "korovod":
        env["PYTHONPATH"] = os.pathsep.join([os.path.join(REPO, "python"),
                                             os.path.join(args.build, "python")])
        cmd = [os.path.join(args.build, "bin", "korovodrun"), "-np", str(n), args.python,
               EXAMPLE] + flags
    else:
        env.pop("PYTHONPATH", None)
        horovodrun = os.path.join(os.path.dirname(args.horovod_python), "horovodrun")
        cmd = [horovodrun, "-np", str(n), "-H", "localhost:%d" % n, "--gloo",
               "--network-interface", "lo", args.horovod_python, EXAMPLE] + flags
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
    out = p.stdout + p.stderr
    rates = [float(x) for x in ITER.findall(out)]
    if p.returncode != 0 or not rates:
        return None, out[-3000:]
    return rates, None


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--horovod-python", required=True)
    p.add_argument("--python", default=os.path.join(REPO, ".deps", "tf-venv", "bin", "python"))
    p.add_argument("--build", default=os.path.join(REPO, "build"))
    p.add_argument("--ranks", default="2")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--model", default="MobileNetV2")
    p.add_argument("--image-size", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--batches-per-iter", type=int, default=5)
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--legacy-keras", action="store_true",
                   help="TF_USE_LEGACY_KERAS=1 (tf_keras) for both")
    p.add_argument("--out", default="")
    args = p.parse_args()
    rows = []
    for n in (int(x) for x in args.ranks.split(",")):
        samples = {"korovod": [], "horovod": []}
        errors = {}
        for rep in range(args.repeats):
            order = ["korovod", "horovod"] if rep % 2 == 0 else ["horovod", "korovod"]
            for engine in order:
                rates, err = launch(args, engine, n)
                if rates is None:
                    errors[engine] = err
                else:
                    samples[engine] += rates
        for engine in ("korovod", "horovod"):
            row = {"peer": engine if engine == "korovod" else "horovod-0.28.1-gloo",
                   "transport": "shm" if engine == "korovod" else "tcp", "ranks": n,
                   "bytes": 0, "algo": "tf2-synthetic-%s-%dpx-b%d" % (
                       args.model, args.image_size, args.batch_size)}
            s = samples[engine]
            if engine in errors or not s:
                row["error"] = "launch failed: " + (errors.get(engine) or "no samples")
            else:
                per_rank = statistics.median(s)
                row.update(img_sec_per_rank=per_rank, img_sec_total=per_rank * n,
                           img_sec_samples=s, time_us=args.batch_size / per_rank * 1e6,
                           time_us_min=args.batch_size / max(s) * 1e6,
                           time_us_max=args.batch_size / min(s) * 1e6, iters=len(s))
            rows.append(row)
    print("| ranks | engine | img/sec total (median) | step ms | korovod / horovod |")
    print("|---|---|---|---|---|")
    for n in sorted({r["ranks"] for r in rows}):
        mine = [r for r in rows if r["ranks"] == n]
        k = next((r for r in mine if r["peer"] == "korovod" and "error" not in r), None)
        h = next((r for r in mine if r["peer"] != "korovod" and "error" not in r), None)
        for r in mine:
            if "error" in r:
                print("| %d | %s | error | | |" % (n, r["peer"]))
                continue
            ratio = (k["img_sec_total"] / h["img_sec_total"]) if k and h else float("nan")
            print("| %d | %s | %.1f | %.1f | %.2f |" % (n, r["peer"], r["img_sec_total"],
                                                       r["time_us"] / 1e3, ratio))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=1)
    return 1 if any("error" in r for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
