#!/usr/bin/python3
"""korovod against Horovod 0.28.1 itself: the same Horovod-API scripts under korovodrun and under
horovodrun --gloo, launches interleaved per configuration, one JSON list, markdown tables.

    bench/horovod/compare.py [--ranks 2,4] [--sizes 4,4K,1M,16M,64M] [--target-time 0.7]
        [--steps 10] [--warmup-steps 3] [--synthetic-ranks 1,2,4] [--repeats 1]
        [--skip-allreduce] [--skip-burst] [--skip-synthetic] [--out horovod.json]
    bench/horovod/compare.py --table horovod.json        # re-render the tables, run nothing

Benches (see README.md): `allreduce` (hvd_ops.py: hvd.allreduce per size, the peers' protocol),
`burst` (hvd_ops.py: ResNet-50's 161 gradients through hvd.allreduce_async_ + hvd.synchronize per
step), `synthetic` (examples/pytorch_synthetic_benchmark.py with its import switched to
`import horovod.torch as hvd`, the same copy run by both launchers; Total img/sec).
For every configuration (bench, N) and repeat, korovod and Horovod run back to back, the first of
the two alternating. Stdlib only; run with /usr/bin/python3. Exit status: 0 ok, 1 a launch or a
verification failed (its rows carry "error" naming the launch), 2 usage / missing prerequisites.
"""
import argparse
import datetime
import json
import os
import re
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
HVD_OPS = os.path.join(HERE, "hvd_ops.py")
EXAMPLE = os.path.join(REPO, "examples", "pytorch_synthetic_benchmark.py")
TOTAL = re.compile(r"Total img/sec on (\d+) rank\(s\): ([0-9.]+) \+-([0-9.]+)")
PER_RANK = re.compile(r"Img/sec per rank: ([0-9.]+) \+-([0-9.]+)")
ENGINES = ("korovod", "horovod")


def parse_size(s):
    s = s.strip()
    suf = s.lstrip("0123456789.")
    num = s[: len(s) - len(suf)]
    mul = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(suf[:1].upper())
    if not num or mul is None:
        raise argparse.ArgumentTypeError("bad size %r" % s)
    return int(float(num) * mul)


def fmt_size(b):
    for unit, m in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= m and b % m == 0:
            return "%d %s" % (b // m, unit)
    return "%d B" % b


def int_list(s):
    try:
        v = [int(x) for x in s.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError("not a comma list of integers: %r" % s)
    if not v or min(v) < 1:
        raise argparse.ArgumentTypeError("need world sizes >= 1: %r" % s)
    return v


def env_pair(s):
    if "=" not in s or not s.split("=", 1)[0]:
        raise argparse.ArgumentTypeError("expected NAME=VALUE, got %r" % s)
    return tuple(s.split("=", 1))


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="\n".join(__doc__.splitlines()[1:]))
    p.add_argument("--build", default=os.path.join(REPO, "build"),
                   help="korovod build dir (bin/korovodrun, bin/korovod-gradbench, python/)")
    p.add_argument("--horovod-venv", default=os.path.join(REPO, ".deps", "horovod-venv"),
                   help="venv with Horovod (bin/python, bin/horovodrun)")
    p.add_argument("--korovod-python", default="/usr/bin/python3",
                   help="interpreter of the korovod trainers")
    p.add_argument("--ranks", type=int_list, default=[2, 4], help="N for allreduce and burst")
    p.add_argument("--sizes", default="4,4K,1M,16M,64M", help="allreduce message sizes")
    p.add_argument("--target-time", type=float, default=0.7,
                   help="allreduce: seconds of timed iterations per size")
    p.add_argument("--no-loop", action="store_true", help="allreduce: skip time_us_loop")
    p.add_argument("--burst-model", default="resnet50",
                   help="burst: korovod-gradbench --print-shapes MODEL")
    p.add_argument("--steps", type=int, default=10, help="burst: timed steps")
    p.add_argument("--warmup-steps", type=int, default=3, help="burst: untimed steps")
    p.add_argument("--synthetic-ranks", type=int_list, default=[1, 2, 4])
    p.add_argument("--synthetic-model", default="resnet20", choices=["resnet20", "mlp"])
    p.add_argument("--batch-size", type=int, default=32, help="synthetic: per rank")
    p.add_argument("--num-iters", type=int, default=5, help="synthetic")
    p.add_argument("--num-batches-per-iter", type=int, default=5, help="synthetic")
    p.add_argument("--num-warmup-batches", type=int, default=5, help="synthetic")
    p.add_argument("--skip-allreduce", action="store_true")
    p.add_argument("--skip-burst", action="store_true")
    p.add_argument("--skip-synthetic", action="store_true")
    p.add_argument("--engines", default="korovod,horovod",
                   help="comma list: korovod, horovod (one alone for debugging)")
    p.add_argument("--repeats", type=int, default=1, help="separate launches per engine/config")
    p.add_argument("--timeout", type=float, default=900, help="seconds per launch")
    p.add_argument("--env", type=env_pair, action="append", default=[],
                   help="NAME=VALUE for both engines' launches (repeatable)")
    p.add_argument("--korovod-env", type=env_pair, action="append", default=[],
                   help="NAME=VALUE for korovod launches only, e.g. KOROVOD_ARENA_HEAP_MIB=256")
    p.add_argument("--horovod-env", type=env_pair, action="append", default=[],
                   help="NAME=VALUE for Horovod launches only, e.g. HOROVOD_CYCLE_TIME=1")
    p.add_argument("--out", default="", help="JSON list, rewritten after every launch")
    p.add_argument("--log", default="", help="every command line and output (default OUT.log)")
    p.add_argument("--table", nargs="+", metavar="JSON", help="render tables from files, run nothing")
    a = p.parse_args()
    a.engines = [e for e in a.engines.split(",") if e]
    for e in a.engines:
        if e not in ENGINES:
            p.error("unknown engine %r (korovod, horovod)" % e)
    try:
        a.size_list = [parse_size(x) for x in a.sizes.split(",") if x.strip()]
    except argparse.ArgumentTypeError as e:
        p.error(str(e))
    if any(b <= 0 or b % 4 for b in a.size_list):
        p.error("--sizes must be positive multiples of 4 bytes")
    if a.steps < 1 or a.warmup_steps < 0 or a.repeats < 1 or a.timeout <= 0:
        p.error("--steps >= 1, --warmup-steps >= 0, --repeats >= 1, --timeout > 0")
    return a


# ---------------------------------------------------------------------------------- launching

class Launcher:
    def __init__(self, a, tmp):
        self.a = a
        self.tmp = tmp
        self.korovodrun = os.path.join(a.build, "bin", "korovodrun")
        self.gradbench = os.path.join(a.build, "bin", "korovod-gradbench")
        self.hvd_python = os.path.join(a.horovod_venv, "bin", "python")
        self.horovodrun = os.path.join(a.horovod_venv, "bin", "horovodrun")
        log = a.log or (a.out + ".log" if a.out else "")
        self.log = open(log, "a") if log else None
        self.log_path = log

    def note(self, text):
        if self.log:
            self.log.write(text if text.endswith("\n") else text + "\n")
            self.log.flush()

    def env(self, engine):
        env = dict(os.environ)
        env["OMP_NUM_THREADS"] = "1"
        if engine == "korovod":
            env["PYTHONPATH"] = os.pathsep.join([os.path.join(REPO, "python"),
                                                 os.path.join(self.a.build, "python")])
            extra = self.a.korovod_env
        else:
            # Horovod's venv must import the real horovod: nothing of korovod's on the path.
            env.pop("PYTHONPATH", None)
            env["PATH"] = os.path.join(self.a.horovod_venv, "bin") + os.pathsep + env["PATH"]
            env.pop("VIRTUAL_ENV", None)
            extra = self.a.horovod_env
        for k, v in list(self.a.env) + list(extra):
            env[k] = v
        return env

    def overrides(self, engine):
        extra = self.a.korovod_env if engine == "korovod" else self.a.horovod_env
        return dict(list(self.a.env) + list(extra))

    def command(self, engine, n, script_argv):
        if engine == "korovod":
            return [self.korovodrun, "-np", str(n), self.a.korovod_python] + script_argv
        return [self.horovodrun, "--gloo", "-np", str(n), "-H", "localhost:%d" % n,
                self.hvd_python] + script_argv

    def run(self, label, cmd, env, timeout):
        """(rc, stdout, stderr, wall_s); rc 124 on timeout (the launch's process group is killed)."""
        self.note("\n=== %s  %s\n$ %s" % (label, now(), " ".join(shlex.quote(c) for c in cmd)))
        t0 = time.monotonic()
        try:
            p = subprocess.Popen(cmd, env=env, cwd=self.tmp, stdin=subprocess.DEVNULL,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 errors="replace", start_new_session=True)
        except OSError as e:
            self.note("cannot start: %s" % e)
            return 127, "", "cannot start %s: %s" % (cmd[0], e), 0.0
        try:
            out, err = p.communicate(timeout=timeout)
            rc = p.returncode
        except KeyboardInterrupt:
            # The launch runs in its own session: Ctrl-C does not reach it, so stop it here.
            try:
                os.killpg(p.pid, signal.SIGTERM)
                p.communicate(timeout=15)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            raise
        except subprocess.TimeoutExpired:
            # Only this launch's own process group (launcher, its ranks and sidecars).
            for sig, grace in ((signal.SIGTERM, 15), (signal.SIGKILL, 15)):
                try:
                    os.killpg(p.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    out, err = p.communicate(timeout=grace)
                    break
                except subprocess.TimeoutExpired:
                    out, err = "", ""
            rc = 124
            err = (err or "") + "\n[compare.py] %s timed out after %g s; killed its process group" % (
                label, timeout)
        wall = time.monotonic() - t0
        self.note("--- exit %d after %.1f s\n--- stdout\n%s\n--- stderr\n%s" % (rc, wall, out, err))
        return rc, out or "", err or "", wall


def now():
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def loadavg1():
    try:
        with open("/proc/loadavg") as f:
            return float(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def json_rows(text):
    """Every {"peer": ...} object in the launchers' output (rank prefixes ignored)."""
    dec = json.JSONDecoder()
    rows = []
    for line in text.splitlines():
        i = line.find('{"peer"')
        if i < 0:
            continue
        try:
            obj, _ = dec.raw_decode(line[i:])
        except ValueError:
            continue
        if isinstance(obj, dict):
            rows.append(obj)
    return rows


def tail(text, n=6):
    lines = [l for l in text.strip().splitlines() if l.strip()]
    return " | ".join(lines[-n:])


def preflight(L, engines):
    """Check the files, and that each engine's interpreter imports the intended horovod."""
    problems = []
    need = []
    if "korovod" in engines:
        need += [L.korovodrun, L.a.korovod_python]
    if "horovod" in engines:
        need += [L.hvd_python, L.horovodrun]
    need.append(L.gradbench)
    for f in need:
        if not os.access(f, os.X_OK):
            problems.append("missing or not executable: %s" % f)
    if problems:
        return problems, {}
    probe = ("import sys, horovod, horovod.torch as hvd, torch; "
             "print('korovod' if 'korovod.torch' in sys.modules else 'horovod', "
             "'horovod', horovod.__version__ + ',', 'torch', torch.__version__ + ',', hvd.__file__)")
    versions = {}
    for engine in engines:
        py = L.a.korovod_python if engine == "korovod" else L.hvd_python
        rc, out, err, _ = L.run("preflight %s" % engine, [py, "-c", probe], L.env(engine), 180)
        words = out.split()
        if rc != 0 or not words:
            problems.append("preflight %s: `%s -c 'import horovod.torch'` failed (exit %d): %s" %
                            (engine, py, rc, tail(err)))
        elif words[0] != engine:
            problems.append("preflight %s: `import horovod.torch` resolved to %s (%s)" %
                            (engine, words[0], words[-1]))
        else:
            versions[engine] = " ".join(words[1:])
    return problems, versions


# -------------------------------------------------------------------------------- benches

def allreduce_job(a, shapes, synth):
    argv = [HVD_OPS, "--bench", "allreduce", "--sizes", ",".join(str(b) for b in a.size_list),
            "--target-time", repr(a.target_time)] + (["--no-loop"] if a.no_loop else [])
    expect = [{"bench": "allreduce", "bytes": b} for b in a.size_list]
    return argv, expect


def burst_job(a, shapes, synth):
    argv = [HVD_OPS, "--bench", "burst", "--shapes", shapes, "--steps", str(a.steps),
            "--warmup-steps", str(a.warmup_steps)]
    return argv, [{"bench": "burst", "model": a.burst_model}]


def synthetic_job(a, shapes, synth):
    argv = [synth, "--model", a.synthetic_model, "--batch-size", str(a.batch_size),
            "--num-iters", str(a.num_iters), "--num-batches-per-iter", str(a.num_batches_per_iter),
            "--num-warmup-batches", str(a.num_warmup_batches)]
    return argv, [{"bench": "synthetic", "model": a.synthetic_model}]


TRANSPORT = {"korovod": "sidecar", "horovod": "gloo"}


def launch_rows(L, engine, bench, n, argv, expect, args):
    """Run one launch; return its rows (error rows for everything it failed to produce)."""
    label = "%s %s N=%d" % (engine, bench, n)
    if bench != "synthetic":
        argv = argv + ["--expect-engine", engine]
    cmd = L.command(engine, n, argv)
    load = loadavg1()
    rc, out, err, wall = L.run(label, cmd, L.env(engine), args.timeout)
    if bench == "synthetic":
        rows = []
        m = TOTAL.search(out) or TOTAL.search(err)
        pr = PER_RANK.search(out) or PER_RANK.search(err)
        if m:
            rows.append({"peer": engine, "transport": TRANSPORT[engine], "ranks": int(m.group(1)),
                         "bench": "synthetic", "model": args.synthetic_model,
                         "batch_size": args.batch_size, "num_iters": args.num_iters,
                         "num_batches_per_iter": args.num_batches_per_iter,
                         "img_per_s": float(m.group(2)), "img_per_s_conf": float(m.group(3)),
                         "img_per_s_per_rank": float(pr.group(1)) if pr else None})
    else:
        rows = json_rows(out)
    produced = []
    result = []
    for exp in expect:
        match = [r for r in rows if all(r.get(k) == v for k, v in exp.items())]
        if match:
            produced.append(exp)
            result.extend(match)
    failed = rc != 0 or len(produced) < len(expect)
    why = None
    if failed:
        if rc == 124:
            why = "%s launch timed out after %g s" % (engine, args.timeout)
        elif rc != 0:
            why = "%s launch failed (exit %d)" % (engine, rc)
        else:
            why = "%s launch exited 0 but printed no result row" % engine
        why += ": %s" % (tail(err) or tail(out) or "no output")
        print("FAILED: %s: %s\n  command: %s" % (label, why, " ".join(shlex.quote(c) for c in cmd)),
              file=sys.stderr, flush=True)
        for exp in expect:
            if exp not in produced:
                r = {"peer": engine, "transport": TRANSPORT[engine], "ranks": n, "error": why}
                r.update(exp)
                result.append(r)
    for r in result:
        if r.get("error") and not r["error"].startswith(engine + " launch"):
            # hvd_ops.py's own "verification failed" rows: name the launch too.
            r["error"] = "%s (%s, exit %d)" % (r["error"], label, rc)
        r.update(wall_s=round(wall, 2), loadavg1_start=load, launch_exit=rc,
                 command=" ".join(shlex.quote(c) for c in cmd))
        ov = L.overrides(engine)
        if ov:
            r["env"] = ov
    return result, failed or any("error" in r for r in result)


# --------------------------------------------------------------------------------- tables

def _key(r):
    if r.get("bench") == "allreduce":
        return ("allreduce", r["ranks"], r["bytes"])
    return (r.get("bench"), r["ranks"], r.get("model"))


def render(rows, out=sys.stdout):
    groups = {}
    for r in rows:
        if "error" in r or r.get("peer") not in ENGINES or "bench" not in r:
            continue
        groups.setdefault(_key(r), {}).setdefault(r["peer"], []).append(r)

    def med(rs, field):
        v = [r[field] for r in rs if r.get(field) is not None]
        return statistics.median(v) if v else None

    def cell(x, f="%.1f"):
        return f % x if x is not None else "—"

    def ratio(x):
        return "%.2f" % x if x is not None else "—"

    def speed(k, h, higher_better):
        if not k or not h:
            return None
        return k / h if higher_better else h / k

    keys = sorted(groups, key=lambda k: (str(k[0]), k[1], k[2] if isinstance(k[2], int) else 0,
                                         str(k[2])))
    ar = [k for k in keys if k[0] == "allreduce"]
    if ar:
        print("\n### hvd.allreduce, float32 sum (median µs per op, max over ranks; busbw GB/s)\n",
              file=out)
        print("| ranks | bytes | korovod µs | Horovod µs | korovod busbw | Horovod busbw "
              "| korovod ÷ Horovod speed | launches |", file=out)
        print("|---:|---:|---:|---:|---:|---:|---:|---|", file=out)
        for k in ar:
            g = groups[k]
            kt, ht = med(g.get("korovod", []), "time_us"), med(g.get("horovod", []), "time_us")
            print("| %d | %s | %s | %s | %s | %s | %s | %d+%d |" % (
                k[1], fmt_size(k[2]), cell(kt), cell(ht),
                cell(med(g.get("korovod", []), "busbw_gbps"), "%.3g"),
                cell(med(g.get("horovod", []), "busbw_gbps"), "%.3g"),
                ratio(speed(kt, ht, False)), len(g.get("korovod", [])),
                len(g.get("horovod", []))), file=out)
    bu = [k for k in keys if k[0] == "burst"]
    if bu:
        print("\n### gradient burst: every gradient through hvd.allreduce_async_ + "
              "hvd.synchronize (median step ms, max over ranks)\n", file=out)
        print("| ranks | model | tensors / MB | korovod ms | Horovod ms | korovod algbw GB/s "
              "| Horovod algbw GB/s | korovod ÷ Horovod speed | launches |", file=out)
        print("|---:|---|---:|---:|---:|---:|---:|---:|---|", file=out)
        for k in bu:
            g = groups[k]
            any_r = (g.get("korovod") or g.get("horovod"))[0]
            kt, ht = med(g.get("korovod", []), "time_us"), med(g.get("horovod", []), "time_us")
            print("| %d | %s | %s / %.1f | %s | %s | %s | %s | %s | %d+%d |" % (
                k[1], k[2], any_r.get("tensors", "?"), any_r.get("bytes", 0) / 1e6,
                cell(kt / 1e3 if kt else None, "%.2f"), cell(ht / 1e3 if ht else None, "%.2f"),
                cell(med(g.get("korovod", []), "algbw_gbps"), "%.3f"),
                cell(med(g.get("horovod", []), "algbw_gbps"), "%.3f"),
                ratio(speed(kt, ht, False)), len(g.get("korovod", [])),
                len(g.get("horovod", []))), file=out)
    sy = [k for k in keys if k[0] == "synthetic"]
    if sy:
        print("\n### examples/pytorch_synthetic_benchmark.py (Total img/sec, median over "
              "launches)\n", file=out)
        print("| ranks | model | korovod img/s | Horovod img/s | korovod ÷ Horovod speed "
              "| launches |", file=out)
        print("|---:|---|---:|---:|---:|---|", file=out)
        for k in sy:
            g = groups[k]
            ki, hi = med(g.get("korovod", []), "img_per_s"), med(g.get("horovod", []), "img_per_s")
            print("| %d | %s | %s | %s | %s | %d+%d |" % (
                k[1], k[2], cell(ki), cell(hi), ratio(speed(ki, hi, True)),
                len(g.get("korovod", [])), len(g.get("horovod", []))), file=out)
    errs = [r for r in rows if "error" in r]
    if errs:
        print("\nFailed rows:", file=out)
        for r in errs:
            what = fmt_size(r["bytes"]) if r.get("bench") == "allreduce" and "bytes" in r \
                else r.get("model", "")
            print("* %s %s N=%s %s: %s" % (r.get("peer"), r.get("bench"), r.get("ranks"), what,
                                           r["error"]), file=out)


# ----------------------------------------------------------------------------------- main

def main():
    a = parse_args()
    if a.table:
        rows = []
        for path in a.table:
            with open(path) as f:
                rows.extend(json.load(f))
        render(rows)
        return 0
    jobs = []
    if not a.skip_allreduce:
        jobs += [("allreduce", n, allreduce_job) for n in a.ranks]
    if not a.skip_burst:
        jobs += [("burst", n, burst_job) for n in a.ranks]
    if not a.skip_synthetic:
        jobs += [("synthetic", n, synthetic_job) for n in a.synthetic_ranks]
    if not jobs:
        print("compare.py: every bench skipped, nothing to run", file=sys.stderr)
        return 2

    with tempfile.TemporaryDirectory(prefix="korovod-vs-horovod-") as tmp:
        L = Launcher(a, tmp)
        problems, versions = preflight(L, a.engines)
        if problems:
            for pr in problems:
                print("compare.py: %s" % pr, file=sys.stderr)
            return 2
        print("engines: %s" % "; ".join("%s: %s" % kv for kv in versions.items()),
              file=sys.stderr, flush=True)

        shapes = os.path.join(tmp, "shapes-%s.json" % a.burst_model)
        if not a.skip_burst:
            cmd = [L.gradbench, "--print-shapes", a.burst_model]
            rc, out, err, _ = L.run("korovod-gradbench --print-shapes", cmd, dict(os.environ), 120)
            try:
                spec = json.loads(out)
                assert spec["tensors"]
            except (ValueError, KeyError, AssertionError):
                print("compare.py: `%s` failed (exit %d): %s" % (" ".join(cmd), rc,
                      tail(err) or tail(out)), file=sys.stderr)
                return 2
            with open(shapes, "w") as f:
                f.write(out)
        synth = os.path.join(tmp, "pytorch_synthetic_benchmark_hvd.py")
        if not a.skip_synthetic:
            with open(EXAMPLE) as f:
                src = f.read()
            old = "import korovod.torch as hvd\n"
            if src.count(old) != 1:
                print("compare.py: %s no longer has exactly one line %r to switch to "
                      "`import horovod.torch as hvd`" % (EXAMPLE, old.strip()), file=sys.stderr)
                return 2
            with open(synth, "w") as f:
                f.write(src.replace(old, "import horovod.torch as hvd\n"))

        run_id = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        rows, any_failed = [], False
        total = len(jobs) * a.repeats * len(a.engines)
        done = 0
        for rep in range(a.repeats):
            for ci, (bench, n, job) in enumerate(jobs):
                argv, expect = job(a, shapes, synth)
                order = list(a.engines)
                if (ci + rep) % 2 == 1:
                    order.reverse()
                for pos, engine in enumerate(order):
                    done += 1
                    print("[%d/%d] %s %s N=%d (rep %d)" % (done, total, engine, bench, n, rep),
                          file=sys.stderr, flush=True)
                    got, failed = launch_rows(L, engine, bench, n, argv, expect, a)
                    any_failed = any_failed or failed
                    for r in got:
                        r.update(rep=rep, run_id=run_id, launch_position=pos, date=now())
                        r.setdefault("engine_version", versions.get(engine))
                    rows.extend(got)
                    if a.out:
                        with open(a.out + ".tmp", "w") as f:
                            json.dump(rows, f, indent=1)
                        os.replace(a.out + ".tmp", a.out)
        render(rows)
        if a.out:
            print("\nrows: %s%s" % (a.out, "; log: %s" % L.log_path if L.log_path else ""),
                  file=sys.stderr)
    return 1 if any_failed else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
