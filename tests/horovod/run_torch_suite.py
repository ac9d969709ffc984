#!/usr/bin/env python3
"""Runs Horovod's own PyTorch test suite (test/parallel/test_torch.py) against korovod.

The suite is Horovod's, kept outside this tree (../shared/horovod-tests by default). Each test
runs as its own `korovodrun -np N python3 -m pytest <id>` job with a deadline, so a hang cannot
hide the tests after it. Prints one line per test and a closing "N passed, N failed, N skipped"
line; exits 0 only when nothing failed or hung, 77 when the suite is not there (said plainly).

Tests run in batches (--batch, as Horovod's own CI runs the file: one pytest per rank for many
tests), which spares each test the job's start-up (sidecars, the trainers' torch import). Every
test of a batch that did not pass (or skip) on every rank, and every test of a batch that hung, is
then run alone in its own job, and that run is its result: a test that breaks the ones after it
still gets its own verdict, and so do they.

Where the suite itself cannot run on the interpreter's torch (the newest's torch.optim.Muon), an
adapted copy runs instead, each change listed in its header (suite_adaptations.py).

A few of Horovod's tests assert wall-clock times between ranks (WALL_CLOCK_TESTS, each with the
reason). Under CI's load they can fail without any fault in the engine; one of them that fails is
run again up to RERUNS more times, and its result line and the summary say that it passed only on
a rerun. Any other failure counts at once.

  run_torch_suite.py [--np 2] [--jobs 1] [--batch 20] [--timeout 180] [--suite DIR]
                     [--build DIR] [--json FILE] [-k SUBSTRING]
"""
import argparse
import concurrent.futures
import json
import os
import re
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
SKIP_CODE = 77

# Tests whose assertion compares clocks across ranks, with why they can fail on a loaded machine.
WALL_CLOCK_TESTS = {
    "test_global_barrier_op":
        "rank 1 times hvd.barrier() from when its previous allreduce returned; rank 0 starts its "
        "5 s sleep from when the same allreduce returned there. When rank 1's trainer is woken "
        "later than rank 0's by more than the barrier's own latency (a scheduling delay of a "
        "millisecond on 2 busy cores), rank 1 measures just under 5 s",
}
RERUNS = 2

sys.path.insert(0, HERE)
import suite_adaptations  # noqa: E402


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--np", type=int, default=2, help="ranks per test (korovodrun -np)")
    p.add_argument("--jobs", type=int, default=1, help="jobs run at the same time")
    p.add_argument("--batch", type=int, default=20, help="tests per job (1: each test alone)")
    p.add_argument("--timeout", type=float, default=180, help="seconds per test before it "
                   "counts as hung")
    p.add_argument("--suite", default=os.environ.get(
        "KOROVOD_HOROVOD_TESTS", os.path.join(os.path.dirname(REPO), "shared", "horovod-tests")),
        help="folder holding parallel/test_torch.py and utils/common.py")
    p.add_argument("--build", default=os.environ.get("KOROVOD_BUILD_DIR",
                                                     os.path.join(REPO, "build")))
    p.add_argument("--python", default=os.environ.get("PYTHON", "/usr/bin/python3"))
    p.add_argument("--json", help="write the per-test results here")
    p.add_argument("-k", dest="only", help="run only the tests whose id contains this")
    p.add_argument("--file", default="test_torch.py",
                   help="the suite's file in parallel/ (test_tensorflow.py: Horovod's TensorFlow "
                        "suite, run with a --python that has TensorFlow)")
    return p.parse_args()


def suite_env(args):
    env = dict(os.environ)
    paths = [os.path.join(REPO, "python"), os.path.join(args.build, "python"),
             os.path.join(args.suite, "utils")]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def collect(args, env, parallel_dir):
    p = subprocess.run([args.python, "-m", "pytest", "--collect-only", "-q", "-p",
                        "no:cacheprovider", "--rootdir", parallel_dir, args.file],
                       cwd=parallel_dir, env=env,
                       capture_output=True, text=True, timeout=300)
    ids = [line.strip() for line in p.stdout.splitlines() if "::" in line]
    if not ids:
        raise SystemExit("collecting %s/%s found no tests:\n%s%s" % (
            parallel_dir, args.file, p.stdout[-3000:], p.stderr[-3000:]))
    return ids


def outcome_of(returncode, output):
    """passed / skipped / failed, from every rank's pytest summary line."""
    summaries = re.findall(r"^\[\d+\] .*?(\d+ (?:passed|failed|skipped|error)[^\n]*) in [\d.]+s",
                           output, re.M)
    if returncode != 0:
        return "failed"
    if summaries and all("skipped" in s and "passed" not in s for s in summaries):
        return "skipped"
    if summaries and all("passed" in s and "failed" not in s for s in summaries):
        return "passed"
    return "failed"


def run_one(args, env, parallel_dir, test_id):
    """Runs the test, and again (RERUNS times at most) while a wall-clock test fails.
    Returns (id, result, seconds, output, attempts); output is the first failure's, if any."""
    name = test_id.split("::")[-1]
    attempts = 0
    first_failure = None
    total = 0.0
    while True:
        attempts += 1
        result, secs, output = run_attempt(args, env, parallel_dir, test_id)
        total += secs
        if result != "failed" or name not in WALL_CLOCK_TESTS or attempts > RERUNS:
            break
        first_failure = first_failure or output
    return test_id, result, total, first_failure or output, attempts


def outcomes_of_batch(ids, np_, output):
    """{test id: passed / skipped / failed} from every rank's verbose pytest lines: passed or
    skipped only where every rank says so; failed where a rank failed or said nothing."""
    seen = {}
    for rank, test_id, word in re.findall(
            r"^\[(\d+)\] (\S+::\S+) (PASSED|FAILED|SKIPPED|ERROR|XFAIL|XPASS)\b", output, re.M):
        seen.setdefault(test_id, {})[int(rank)] = word
    results = {}
    for test_id in ids:
        words = set(seen.get(test_id, {}).values())
        if len(seen.get(test_id, {})) != np_ or not words <= {"PASSED", "SKIPPED", "XFAIL"}:
            results[test_id] = "failed"
        elif words == {"SKIPPED"}:
            results[test_id] = "skipped"
        else:
            results[test_id] = "passed"
    return results


def run_batch(args, env, parallel_dir, ids):
    """Runs `ids` in one job. Returns [(id, result, seconds, output, attempts)]: the batch's
    result for a test that passed or skipped there, else the test's own run (run_one)."""
    result, secs, output = run_attempt(args, env, parallel_dir, ids,
                                       timeout=args.timeout * max(1, len(ids) // 4))
    outcomes = outcomes_of_batch(ids, args.np, output) if result != "hung" else {}
    done = []
    for test_id in ids:
        if outcomes.get(test_id) in ("passed", "skipped"):
            done.append((test_id, outcomes[test_id], secs / len(ids), "", 1))
        else:
            done.append(run_one(args, env, parallel_dir, test_id))
    return done


def run_attempt(args, env, parallel_dir, test_ids, timeout=None):
    """One korovodrun job running pytest on `test_ids` (one id, or a list: verbose, so that each
    test's outcome on each rank can be read). Returns (result, seconds, output)."""
    timeout = timeout or args.timeout
    ids = [test_ids] if isinstance(test_ids, str) else list(test_ids)
    cmd = [os.path.join(args.build, "bin", "korovodrun"), "-np", str(args.np), args.python, "-m",
           "pytest", "-v" if len(ids) > 1 else "-q", "-p", "no:cacheprovider", "-rs",
           # Test ids relative to the suite's folder, also for the adapted copy in the build
           # tree (whose ancestors hold the project's pyproject.toml).
           "--rootdir", parallel_dir] + ids
    start = time.monotonic()
    # Its own session, so a hung job is ended whole: korovodrun, its sidecars and trainers.
    p = subprocess.Popen(cmd, cwd=parallel_dir, env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        output, _ = p.communicate(timeout=timeout)
        result = outcome_of(p.returncode, output)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGTERM)  # korovodrun stops its sidecars and trainers
        try:
            output, _ = p.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            output, _ = p.communicate()
        output += "\n[hung: still running after %.0f s]" % timeout
        result = "hung"
    return result, time.monotonic() - start, output


def main():
    args = parse_args()
    # Resolved: pytest names tests relative to --rootdir after resolving the file's symlinks, so
    # a suite reached through a symlink (a clone's ../shared) would get ids with no file part.
    parallel_dir = os.path.realpath(os.path.join(args.suite, "parallel"))
    if not os.path.isfile(os.path.join(parallel_dir, args.file)):
        print("Horovod's PyTorch suite is not at %s (set KOROVOD_HOROVOD_TESTS or --suite): "
              "NOT RUN" % parallel_dir, flush=True)
        return SKIP_CODE
    env = suite_env(args)
    adaptations, version = suite_adaptations.applicable(args.python, env, args.file)
    if adaptations:
        # A copy where the suite itself cannot run on this torch (suite_adaptations.py).
        parallel_dir = os.path.realpath(suite_adaptations.write_adapted(
            parallel_dir, args.file, os.path.join(args.build, "horovod-suite", "torch-" + version,
                                                  "parallel"), version, adaptations))
        print("Horovod's %s adapted for torch %s (%s): %s" % (
            args.file, version, ", ".join(a["name"] for a in adaptations),
            os.path.join(parallel_dir, args.file)), flush=True)
    ids = collect(args, env, parallel_dir)
    if args.only:
        ids = [i for i in ids if args.only in i]
    print("Horovod's %s from %s: %d tests, %d ranks each, %d per job, %d jobs at a time" % (
        args.file, parallel_dir, len(ids), args.np, args.batch, args.jobs), flush=True)
    start = time.monotonic()
    results = []
    batch = max(1, args.batch)
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = [pool.submit(run_batch, args, env, parallel_dir, ids[i:i + batch])
                   for i in range(0, len(ids), batch)]
        for test_id, result, secs, output, attempts in (
                r for f in futures for r in f.result()):
            results.append({"id": test_id, "result": result, "seconds": round(secs, 2),
                            "attempts": attempts})
            rerun = ""
            if attempts > 1:
                rerun = "  (%s on attempt %d; wall-clock test: %s)" % (
                    result, attempts, WALL_CLOCK_TESTS[test_id.split("::")[-1]])
            print("%-8s %6.1fs  %s%s" % (result.upper(), secs, test_id, rerun), flush=True)
            if result in ("failed", "hung") or attempts > 1:
                print("\n".join("    " + line for line in output.splitlines()[-60:]), flush=True)
    counts = {k: sum(r["result"] == k for r in results)
              for k in ("passed", "failed", "hung", "skipped")}
    elapsed = time.monotonic() - start
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"np": args.np, "seconds": round(elapsed, 1), "counts": counts,
                       "torch": version, "adaptations": [a["name"] for a in adaptations],
                       "tests": results}, f, indent=1)
    skipped = [r["id"] for r in results if r["result"] == "skipped"]
    if skipped:
        print("skipped by the suite: " + ", ".join(s.split("::")[-1] for s in skipped))
    reruns = [r["id"].split("::")[-1] for r in results
              if r["attempts"] > 1 and r["result"] == "passed"]
    if reruns:
        print("passed only on a rerun (wall-clock tests): " + ", ".join(reruns))
    if adaptations:
        print("run adapted for torch %s: %s (tests/horovod/suite_adaptations.py)" % (
            version, ", ".join(a["name"] for a in adaptations)))
    print("Horovod %s at %d ranks: %.0f s" % (args.file, args.np, elapsed))
    print("%d passed, %d failed, %d skipped" % (
        counts["passed"], counts["failed"] + counts["hung"], counts["skipped"]), flush=True)
    return 0 if counts["failed"] == 0 and counts["hung"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
