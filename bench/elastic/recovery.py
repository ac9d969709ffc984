#!/usr/bin/python3
"""Elastic recovery times under korovodrun: how long from a fault to training again.

Runs tests/python/elastic_worker.py as an elastic job of 4 workers on virtual hosts (127.0.0.x),
`--repeats` times. In each run a trainer is SIGKILLed mid-step at step 8 and a sidecar at step
30; after each loss the survivors train 3 steps at 3 workers, then rank 0 adds a spare host to the
discovery script's list and the world grows back to 4. From rank 0's timestamped lines:

  trainer_kill   the kill -> the first step of the next epoch (3 workers)
  sidecar_kill   the same for a killed sidecar
  grow           the host added to the list -> the first step with 4 workers again (discovery
                 interval, the newcomer's sidecar and Python start-up, the survivors' next commit,
                 the new epoch)

Every run must also end with the final weights equal to a single-process run. Writes a JSON list
of rows (one per measure: median, min, max and every sample in seconds) and prints a table.

    /usr/bin/python3 bench/elastic/recovery.py --repeats 5 --out docs/bench-results/elastic.json
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


def run_once(build, python, steps, timeout):
    with tempfile.TemporaryDirectory(prefix="korovod-elastic-bench-") as d:
        hosts = os.path.join(d, "hosts")
        with open(hosts, "w") as f:
            f.write("localhost\n127.0.0.2\n127.0.0.3\n127.0.0.4\n")
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([os.path.join(REPO, "python"),
                                             os.path.join(build, "python")])
        env.update({"OMP_NUM_THREADS": "1", "ELASTIC_TEST_DIR": d, "ELASTIC_STEPS": str(steps),
                    "ELASTIC_FAULTS": "trainer@127.0.0.4@8,sidecar@127.0.0.3@30",
                    "ELASTIC_SPARE_HOSTS": "127.0.0.5,127.0.0.6"})
        cmd = [os.path.join(build, "bin", "korovodrun"), "--min-np", "2", "--max-np", "4",
               "--host-discovery-script", "cat " + hosts, "--elastic-timeout", "60", python,
               os.path.join(REPO, "tests", "python", "elastic_worker.py")]
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
        out = p.stdout + p.stderr
        if p.returncode != 0 or "final weights match" not in out:
            raise RuntimeError("elastic run failed (exit %d):\n%s" % (p.returncode, out[-3000:]))
    rows = [(int(m.group(1)), int(m.group(2)), float(m.group(4))) for m in re.finditer(
        r"\] step (\d+) size (\d+) epoch (\d+) at ([0-9.]+)", p.stdout)]
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
        m = re.search(r"\] step \d+ size \d+ epoch \d+ at ([0-9.]+)", line)
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
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--build", default=os.path.join(REPO, "build"))
    ap.add_argument("--python", default="/usr/bin/python3")
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    samples = {}
    for i in range(a.repeats):
        r = run_once(a.build, a.python, a.steps, a.timeout)
        for k, v in r.items():
            samples.setdefault(k, []).append(v)
        print("run %d: %s" % (i + 1, ", ".join("%s %.3f s" % kv for kv in sorted(r.items()))),
              file=sys.stderr, flush=True)
    rows = []
    for k in ("trainer_kill", "sidecar_kill", "grow"):
        v = samples.get(k, [])
        if not v:
            rows.append({"peer": "korovod", "bench": "elastic_recovery", "measure": k,
                         "ranks": 4, "error": "no sample"})
            continue
        rows.append({"peer": "korovod", "bench": "elastic_recovery", "measure": k, "ranks": 4,
                     "transport": "tcp", "launcher": "korovodrun",
                     "time_us": statistics.median(v) * 1e6, "min_us": min(v) * 1e6,
                     "max_us": max(v) * 1e6, "samples_s": v,
                     "date": time.strftime("%Y-%m-%d")})
    if a.out:
        with open(a.out, "w") as f:
            json.dump(rows, f, indent=1)
    print("| measure | median | min | max | runs |\n|---|---|---|---|---|")
    for r in rows:
        if "error" in r:
            print("| %s | %s | | | |" % (r["measure"], r["error"]))
        else:
            print("| %s | %.3f s | %.3f s | %.3f s | %d |" % (
                r["measure"], r["time_us"] / 1e6, r["min_us"] / 1e6, r["max_us"] / 1e6,
                len(r["samples_s"])))


if __name__ == "__main__":
    main()
