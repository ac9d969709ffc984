#!/usr/bin/python3
"""torch.distributed on korovod against gloo (and Horovod's API on korovod), same machine, same
run, launches interleaved: DDP step time (ResNet-18, CPU), FSDP2 step time, and the per-op busbw
of all_gather_into_tensor / reduce_scatter_tensor. Stdlib only; the ranks are workloads.py.

    bench/torch_distributed/compare.py [--python PY] [--build build] [--ranks 2,4]
        [--benches ddp,fsdp,ops] [--repeats 3] [--out docs/bench-results/torch-backend.json]
    bench/torch_distributed/compare.py --table FILE...        # re-render, run nothing

Sides: korovod (`korovodrun -np N PY workloads.py B --backend korovod`: N sidecars + N trainers),
gloo (`PY -m torch.distributed.run --nproc_per_node N workloads.py B --backend gloo`), and for ddp
also korovod-hvd (`korovodrun -np N PY workloads.py hvd`: hvd.DistributedOptimizer). For every
(bench, N) and repeat the sides run back to back, the first one rotating, so machine load falls on
all alike. Rows: the peers' schema (../shared/bench/peers/README.md) plus `rep`, `wall_s`,
`loadavg1_start`; a launch that fails or times out gives a row with "error" naming it (exit 1).
Tables: median [min-max] over launches, and each side ÷ gloo (time ratios < 1 and busbw ratios
> 1 favour korovod).
"""
import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
WORKLOADS = os.path.join(HERE, "workloads.py")
TORCH_VENV = os.path.join(REPO, ".deps", "torch-venv", "bin", "python")


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--python", default=TORCH_VENV if os.path.exists(TORCH_VENV) else sys.executable)
    p.add_argument("--build", default=os.path.join(REPO, "build"))
    p.add_argument("--ranks", default="2,4")
    p.add_argument("--benches", default="ddp,fsdp,ops")
    p.add_argument("--sides", default="korovod,gloo,korovod-hvd")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--sizes", default="4M,64M")
    p.add_argument("--target-time", type=float, default=0.7)
    p.add_argument("--timeout", type=float, default=900, help="seconds per launch")
    p.add_argument("--out", default="")
    p.add_argument("--table", nargs="+", default=None)
    return p.parse_args()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def command(a, side, bench, n):
    work = [WORKLOADS, "hvd" if side == "korovod-hvd" else bench, "--steps", str(a.steps),
            "--warmup", str(a.warmup), "--sizes", a.sizes, "--target-time", str(a.target_time)]
    if side == "gloo":
        return [a.python, "-m", "torch.distributed.run", "--nproc_per_node", str(n),
                "--master_port", str(free_port())] + work + ["--backend", "gloo"]
    backend = [] if side == "korovod-hvd" else ["--backend", "korovod"]
    return [os.path.join(a.build, "bin", "korovodrun"), "-np", str(n), a.python] + work + backend


def environment(a):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(REPO, "python"),
                                         os.path.join(a.build, "python")])
    env["OMP_NUM_THREADS"] = "1"
    return env


def launch(cmd, env, timeout):
    """(rc, output); rc 124 when the deadline passed: the launch's own process group (launcher,
    ranks, sidecars) gets SIGTERM, then SIGKILL."""
    p = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, errors="replace",
                         start_new_session=True)
    try:
        out = p.communicate(timeout=timeout)[0]
        return p.returncode, out
    except subprocess.TimeoutExpired:
        pass
    note = "\n[compare.py] timed out after %g s; killed its process group" % timeout
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(p.pid, sig)
        except ProcessLookupError:
            break
        try:
            return 124, (p.communicate(timeout=15)[0] or "") + note
        except subprocess.TimeoutExpired:
            continue
    return 124, note


def json_rows(text):
    dec, rows = json.JSONDecoder(), []
    for line in text.splitlines():
        i = line.find("{")
        if i < 0:
            continue
        try:
            obj, _ = dec.raw_decode(line[i:])
        except ValueError:
            continue
        if isinstance(obj, dict) and "peer" in obj:
            rows.append(obj)
    return rows


def tail(text, n=8):
    return " | ".join([ln for ln in text.strip().splitlines() if ln.strip()][-n:])


def run_grid(a):
    env, rows, failed, turn = environment(a), [], False, 0
    for bench in a.benches.split(","):
        sides = [s for s in a.sides.split(",") if s != "korovod-hvd" or bench == "ddp"]
        for n in [int(x) for x in a.ranks.split(",")]:
            for rep in range(a.repeats):
                order = sides[turn % len(sides):] + sides[:turn % len(sides)]
                turn += 1
                for side in order:
                    cmd = command(a, side, bench, n)
                    with open("/proc/loadavg") as f:
                        load = float(f.read().split()[0])
                    t0 = time.monotonic()
                    rc, out = launch(cmd, env, a.timeout)
                    wall = round(time.monotonic() - t0, 1)
                    got = json_rows(out)
                    if rc != 0 or not got:
                        failed = True
                        got = [dict(peer=side, ranks=n, bench=bench, error="%s %s N=%d: exit %d: %s"
                                    % (side, bench, n, rc, tail(out)))]
                        print(got[0]["error"], file=sys.stderr)
                    for r in got:
                        r.update(rep=rep, wall_s=wall, loadavg1_start=load, side=side)
                    rows.extend(got)
                    print("%s %s N=%d rep %d: %s" % (bench, side, n, rep, "; ".join(
                        r.get("error") or "%s %s us" % (r.get("op", r["bench"]), r["time_us"])
                        for r in got)), file=sys.stderr, flush=True)
                    if a.out:
                        with open(a.out, "w") as f:
                            json.dump(rows, f, indent=1)
    return rows, failed


def _key(r):
    return (r.get("bench"), r.get("op", ""), r.get("bytes") if r.get("bench") == "op" else 0,
            r.get("ranks"))


def _cell(values, fmt):
    if not values:
        return "—"
    med = statistics.median(values)
    if len(values) == 1:
        return fmt % med
    return (fmt + " [" + fmt + "–" + fmt + "]") % (med, min(values), max(values))


def _size(b):
    return "%d MiB" % (b >> 20) if b >= 1 << 20 else "%d KiB" % (b >> 10)


def render(rows, out=sys.stdout):
    """Markdown: step times (ms) and busbw (GB/s), median [min–max] over launches, ÷ gloo."""
    good = [r for r in rows if "error" not in r]
    sides = [s for s in ("korovod", "gloo", "korovod-hvd") if any(r["side"] == s for r in good)]
    keys = sorted({_key(r) for r in good}, key=lambda k: tuple(str(x) for x in k))
    steps = [k for k in keys if k[0] != "op"]
    ops = [k for k in keys if k[0] == "op"]

    def values(k, side, field, scale=1.0):
        return [r[field] * scale for r in good if _key(r) == k and r["side"] == side]

    def ratio(k, side, field):
        mine, gloo = values(k, side, field), values(k, "gloo", field)
        if not (mine and gloo):
            return "—"
        return "%.2f" % (statistics.median(mine) / statistics.median(gloo))

    if steps:
        out.write("| bench | ranks | " + " | ".join("%s ms" % s for s in sides) + " | " +
                  " | ".join("%s ÷ gloo" % s for s in sides if s != "gloo") + " |\n")
        out.write("|---|---:|" + "---:|" * (2 * len(sides) - 1) + "\n")
        for k in steps:
            out.write("| %s | %d | " % (k[0], k[3]) + " | ".join(
                _cell(values(k, s, "time_us", 1e-3), "%.1f") for s in sides) + " | " + " | ".join(
                ratio(k, s, "time_us") for s in sides if s != "gloo") + " |\n")
        out.write("\n")
    if ops:
        op_sides = [s for s in sides if s != "korovod-hvd"]
        out.write("| op | size | ranks | " + " | ".join("%s busbw GB/s" % s for s in op_sides) +
                  " | korovod ÷ gloo |\n|---|---:|---:|" + "---:|" * (len(op_sides) + 1) + "\n")
        for k in ops:
            out.write("| %s | %s | %d | " % (k[1], _size(k[2]), k[3]) + " | ".join(
                _cell(values(k, s, "busbw_gbps"), "%.3f") for s in op_sides) + " | " +
                ratio(k, "korovod", "busbw_gbps") + " |\n")
        out.write("\n")
    for r in rows:
        if "error" in r:
            out.write("- failed: %s\n" % r["error"])


def main():
    a = parse_args()
    if a.table:
        rows = []
        for path in a.table:
            with open(path) as f:
                rows.extend(json.load(f))
        render(rows)
        return 0
    rows, failed = run_grid(a)
    render(rows)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
