#!/usr/bin/python3
"""Elastic recovery times: how long from a fault to training again, korovod against Horovod.

Runs tests/python/elastic_worker.py (hvd.elastic.run, TorchState, a commit per step) as an elastic
job of 4 workers on 2 hosts of 2 slots, `--repeats` times per engine, the engines alternating:

  korovod   korovodrun --min-np 2 --max-np 4, virtual hosts localhost and 127.0.0.2 (spares
            127.0.0.3, 127.0.0.4)
  horovod   Horovod 0.28.1's horovodrun (Gloo; .deps/horovod-venv, scripts/install-deps.sh
            --bench) with the same flags, hosts `localhost` and `vm`-like names of this machine
            that resolve to 127.0.0.1 (spare: a third one); Horovod starts them without SSH

A trainer on the second host is SIGKILLed mid-step at step 8 (the whole host is blacklisted, so 2
workers go on); after 3 steps at 2 rank 0 adds a spare host of 2 slots to the discovery script's
list and the world grows back to 4. korovod also loses a sidecar at step 30 and grows back again.
From rank 0's timestamped lines:

  trainer_kill   the kill -> the first step of the next epoch
  sidecar_kill   the same for a killed sidecar (korovod only)
  grow           the host added to the list -> the first step with 4 workers again (discovery
                 interval, the newcomers' start-up, the survivors' next commit, the new epoch)

Every run must end with the final weights equal to a single-process run of every step. Writes a
JSON list of rows (median, min, max and every sample) and prints a table with korovod / Horovod.

    /usr/bin/python3 bench/elastic/recovery.py --repeats 3 --out docs/bench-results/elastic.json
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def local_names():
    """Host names other than localhost that resolve to 127.0.0.1 here (/etc/hosts)."""
    names = []
    try:
        with open("/etc/hosts") as f:
            for line in f:
                parts = line.split("#", 1)[0].split()
                if parts and parts[0] == "127.0.0.1":
                    names += [n for n in parts[1:] if n != "localhost" and n not in names]
    except OSError:
        pass
    return names


def run_once(engine, build, python, horovod_venv, steps, timeout):
    if engine == "korovod":
        first, second, spares = "localhost", "127.0.0.2", ["127.0.0.3:2", "127.0.0.4:2"]
        faults = "trainer@127.0.0.2@8,sidecar@127.0.0.3@30"
    else:
        names = local_names()
        if len(names) < 2:
            raise RuntimeError("Horovod needs 2 more names of 127.0.0.1 in /etc/hosts, has %s"
                               % names)
        first, second, spares = "localhost", names[0], [names[1] + ":2"]
        faults = "trainer@%s@8" % second
    with tempfile.TemporaryDirectory(prefix="korovod-elastic-bench-") as d:
        hosts = os.path.join(d, "hosts")
        with open(hosts, "w") as f:
            f.write("%s:2\n%s:2\n" % (first, second))
        env = dict(os.environ)
        env.pop("PYTHONPATH", None)
        env.update({"OMP_NUM_THREADS": "1", "ELASTIC_TEST_DIR": d, "ELASTIC_STEPS": str(steps),
                    "ELASTIC_FAULTS": faults, "ELASTIC_SPARE_HOSTS": ",".join(spares)})
        worker = os.path.join(REPO, "tests", "python", "elastic_worker.py")
        flags = ["--min-np", "2", "--max-np", "4", "--host-discovery-script", "cat " + hosts,
                 "--elastic-timeout", "60"]
        if engine == "korovod":
            env["PYTHONPATH"] = os.pathsep.join([os.path.join(REPO, "python"),
                                                 os.path.join(build, "python")])
            cmd = [os.path.join(build, "bin", "korovodrun")] + flags + [python, worker]
        else:
            cmd = ([os.path.join(horovod_venv, "bin", "horovodrun"), "-np", "4"] + flags +
                   [os.path.join(horovod_venv, "bin", "python"), worker])
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
        out = p.stdout + p.stderr
        if p.returncode != 0 or "final weights match" not in out:
            raise RuntimeError("%s elastic run failed (exit %d):\n%s" %
                               (engine, p.returncode, out[-3000:]))
    rows = [(int(m.group(1)), int(m.group(2)), float(m.group(4))) for m in re.finditer(
        r"\bstep (\d+) size (\d+) epoch (\d+) at ([0-9.]+)", p.stdout)]
    result = {}
    for what in ("trainer", "sidecar"):
        m = re.search(r"fault: killing the %s of worker \S+ at step \d+ at ([0-9.]+)" % what, out)
        after = [r for r in rows if m and r[2] > float(m.group(1))]
        if after:
            result[what + "_kill"] = after[0][2] - float(m.group(1))
    # The host file's additions are not timestamped: rank 0 makes them right after printing a
    # step line, which is.
    grows = []
    last_step = None
    for line in p.stdout.splitlines():
        m = re.search(r"\bstep \d+ size \d+ epoch \d+ at ([0-9.]+)", line)
        if m:
            last_step = float(m.group(1))
        elif "grow: added host" in line and last_step is not None:
            full = [r for r in rows if r[2] > last_step and r[1] == 4]
            if full:
                grows.append(full[0][2] - last_step)
    if grows:
        result["grow"] = statistics.median(grows)
    return result


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--engines", default="korovod,horovod")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--build", default=os.path.join(REPO, "build"))
    ap.add_argument("--python", default="/usr/bin/python3")
    ap.add_argument("--horovod-venv", default=os.path.join(REPO, ".deps", "horovod-venv"))
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    engines = [e for e in a.engines.split(",") if e]
    samples = {}
    errors = {}
    for i in range(a.repeats):
        for engine in (engines if i % 2 == 0 else list(reversed(engines))):
            try:
                r = run_once(engine, a.build, a.python, a.horovod_venv, a.steps, a.timeout)
            except (RuntimeError, subprocess.TimeoutExpired) as e:
                errors[engine] = str(e)
                print("run %d %s: %s" % (i + 1, engine, e), file=sys.stderr, flush=True)
                continue
            for k, v in r.items():
                samples.setdefault((engine, k), []).append(v)
            print("run %d %s: %s" % (i + 1, engine,
                                     ", ".join("%s %.3f s" % kv for kv in sorted(r.items()))),
                  file=sys.stderr, flush=True)
    rows = []
    for engine in engines:
        for k in ("trainer_kill", "sidecar_kill", "grow"):
            v = samples.get((engine, k), [])
            base = {"peer": engine, "bench": "elastic_recovery", "measure": k, "ranks": 4,
                    "hosts": "2 x 2 slots", "date": time.strftime("%Y-%m-%d")}
            if not v:
                if engine == "horovod" and k == "sidecar_kill":
                    continue
                rows.append(dict(base, error=errors.get(engine, "no sample")))
                continue
            rows.append(dict(base, time_us=statistics.median(v) * 1e6, min_us=min(v) * 1e6,
                             max_us=max(v) * 1e6, samples_s=v))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(rows, f, indent=1)
    med = {(r["peer"], r["measure"]): r["time_us"] / 1e6 for r in rows if "time_us" in r}
    print("| measure | korovod median (min-max) | Horovod median (min-max) | korovod / Horovod |")
    print("|---|---|---|---|")
    for k in ("trainer_kill", "sidecar_kill", "grow"):
        cells = []
        for engine in ("korovod", "horovod"):
            r = next((r for r in rows if r["peer"] == engine and r["measure"] == k), None)
            if r is None:
                cells.append("n/a")
            elif "error" in r:
                cells.append("error")
            else:
                cells.append("%.3f s (%.3f-%.3f, %d runs)" % (
                    r["time_us"] / 1e6, r["min_us"] / 1e6, r["max_us"] / 1e6, len(r["samples_s"])))
        ratio = ("%.2f" % (med[("korovod", k)] / med[("horovod", k)])
                 if ("korovod", k) in med and ("horovod", k) in med else "")
        print("| %s | %s | %s | %s |" % (k, cells[0], cells[1], ratio))
    if errors:
        for engine, e in errors.items():
            print("%s: %s" % (engine, e.splitlines()[0]), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
