#!/usr/bin/python3
"""Why korovod's TensorFlow ops are a custom op library: ResNet-50's 161 gradients allreduced in
one tf.function per step, three ways, on the same ranks in the same run.

  ops          korovod.tensorflow's asynchronous kernels (hvd.allreduce in the graph)
  py_function  tf.py_function around a synchronous allreduce on korovod's Python client (submit
               and wait per tensor): what a binding without a custom op does
  torch-gloo   the peer: torch.distributed (gloo) all_reduce of the same tensors, one per call

    bench/tensorflow/py_function_vs_ops.py [--ranks 2] [--steps 8] [--warmup 2] [--repeats 3]
        [--inter-op-threads 2] [--out docs/bench-results/tensorflow-py-function.json]

Rows (JSON list, the schema of ../shared/bench/peers/README.md: peer, transport, ranks, bytes,
time_us = the median step time over steps and repeats, plus min/max/samples) and a markdown
table with each method's ratio to `ops`. Runs with a Python that has TensorFlow (default
<repo>/.deps/tf-venv/bin/python) and the build tree's korovodrun.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def resnet50_shapes():
    """torchvision's resnet50 parameters, in named_parameters() order (161 tensors, 97.5 MiB)."""
    shapes = [(64, 3, 7, 7), (64,), (64,)]
    inplanes = 64
    for planes, blocks in ((64, 3), (128, 4), (256, 6), (512, 3)):
        for b in range(blocks):
            shapes += [(planes, inplanes, 1, 1), (planes,), (planes,),
                       (planes, planes, 3, 3), (planes,), (planes,),
                       (planes * 4, planes, 1, 1), (planes * 4,), (planes * 4,)]
            if b == 0:
                shapes += [(planes * 4, inplanes, 1, 1), (planes * 4,), (planes * 4,)]
            inplanes = planes * 4
    shapes += [(1000, 2048), (1000,)]
    return shapes


def worker(args):
    """One rank (under korovodrun, or torchrun-style env for torch-gloo): prints JSON step
    times on rank 0."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import numpy as np
    shapes = resnet50_shapes()
    if args.method == "torch-gloo":
        import torch
        import torch.distributed as dist
        dist.init_process_group("gloo", init_method="file://" + args.init_file,
                                rank=int(os.environ["RANK"]), world_size=int(os.environ["SIZE"]))
        rank, size = dist.get_rank(), dist.get_world_size()
        grads = [torch.full(s, float(rank + 1)) for s in shapes]

        def step():
            for g in grads:
                dist.all_reduce(g)
            return grads[0]
    else:
        import tensorflow as tf
        tf.config.threading.set_inter_op_parallelism_threads(args.inter_op_threads)
        import horovod.tensorflow as hvd
        from korovod import session
        hvd.init()
        rank, size = hvd.rank(), hvd.size()
        grads = [tf.fill(s, float(rank + 1)) for s in shapes]
        if args.method == "ops":
            @tf.function
            def step():
                return [hvd.allreduce(g, op=hvd.Sum) for g in grads]
        else:
            client = session._client_or_none()
            counter = [0]

            def reduce_numpy(t):
                a = np.ascontiguousarray(t.numpy())
                out = np.empty_like(a)
                counter[0] += 1
                h = client.allreduce(a.ctypes.data, out.ctypes.data, session._client.DataType.float32,
                                     list(a.shape), "pyf.%d" % counter[0], hvd.Sum)
                h.wait()
                return out

            @tf.function
            def step():
                return [tf.py_function(reduce_numpy, [g], tf.float32) for g in grads]
    # Every element checked once: the sum over ranks of rank + 1.
    out = step()
    first = out[0] if isinstance(out, list) else out
    want = size * (size + 1) / 2.0
    assert float(np.asarray(first).ravel()[0]) == want, (first, want)
    for _ in range(args.warmup):
        step()
    times = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    if rank == 0:
        print("RESULT " + json.dumps({"times": times}), flush=True)
    if args.method == "torch-gloo":
        dist.destroy_process_group()


def launch(args, method, n):
    me = os.path.abspath(__file__)
    common = ["--worker", "--method", method, "--steps", str(args.steps), "--warmup",
              str(args.warmup), "--inter-op-threads", str(args.inter_op_threads)]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(REPO, "python"),
                                         os.path.join(args.build, "python")])
    env.setdefault("OMP_NUM_THREADS", "1")
    if method == "torch-gloo":
        init = tempfile.mktemp(prefix="kv-tfbench-")
        procs = []
        for r in range(n):
            e = dict(env, RANK=str(r), SIZE=str(n), GLOO_SOCKET_IFNAME="lo")
            procs.append(subprocess.Popen(["/usr/bin/python3", me] + common +
                                          ["--init-file", init], env=e, stdout=subprocess.PIPE,
                                          stderr=subprocess.STDOUT, text=True))
        outs = [p.communicate(timeout=900)[0] for p in procs]
        out = outs[0]
        ok = all(p.returncode == 0 for p in procs)
    else:
        p = subprocess.run([os.path.join(args.build, "bin", "korovodrun"), "-np", str(n),
                            args.python, me] + common, env=env, capture_output=True, text=True,
                           timeout=900)
        out, ok = p.stdout + p.stderr, p.returncode == 0
    for line in out.splitlines():
        if "RESULT " in line and ok:
            return json.loads(line.split("RESULT ", 1)[1])["times"], None
    return None, out[-2000:]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", default="2")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--inter-op-threads", type=int, default=2)
    p.add_argument("--methods", default="ops,py_function,torch-gloo")
    p.add_argument("--python", default=os.path.join(REPO, ".deps", "tf-venv", "bin", "python"))
    p.add_argument("--build", default=os.environ.get("KOROVOD_BUILD_DIR",
                                                      os.path.join(REPO, "build")))
    p.add_argument("--out", default="")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--method", help=argparse.SUPPRESS)
    p.add_argument("--init-file", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        return worker(args)
    nbytes = sum(4 * int(__import__("math").prod(s)) for s in resnet50_shapes())
    methods = args.methods.split(",")
    rows = []
    for n in (int(x) for x in args.ranks.split(",")):
        samples = {m: [] for m in methods}
        errors = {}
        for rep in range(args.repeats):
            order = methods if rep % 2 == 0 else list(reversed(methods))
            for m in order:
                times, err = launch(args, m, n)
                if times is None:
                    errors[m] = err
                else:
                    samples[m] += times
        for m in methods:
            transport = {"ops": "shm (custom op)", "py_function": "shm (tf.py_function)",
                         "torch-gloo": "tcp"}[m]
            peer = "torch-gloo" if m == "torch-gloo" else "korovod-tf"
            row = {"peer": peer, "transport": transport, "ranks": n, "bytes": nbytes,
                   "algo": "resnet50-161-tensors", "inter_op_threads": args.inter_op_threads}
            if m in errors or not samples[m]:
                row["error"] = "launch failed: " + (errors.get(m) or "no samples")
            else:
                s = samples[m]
                row.update(time_us=statistics.median(s) * 1e6, time_us_min=min(s) * 1e6,
                           time_us_max=max(s) * 1e6, samples_s=s, iters=len(s))
            rows.append(row)
    print("| ranks | method | median step (ms) | min | max | ratio to ops |")
    print("|---|---|---|---|---|---|")
    for n in sorted({r["ranks"] for r in rows}):
        base = next((r for r in rows if r["ranks"] == n and r["transport"].endswith("op)")), None)
        for r in (x for x in rows if x["ranks"] == n):
            if "error" in r:
                print("| %d | %s | error | | | |" % (n, r["transport"]))
                continue
            ratio = r["time_us"] / base["time_us"] if base and "time_us" in base else float("nan")
            print("| %d | %s %s | %.1f | %.1f | %.1f | %.2f |" % (
                n, r["peer"], r["transport"], r["time_us"] / 1e3, r["time_us_min"] / 1e3,
                r["time_us_max"] / 1e3, ratio))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=1)
    return 1 if any("error" in r for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
