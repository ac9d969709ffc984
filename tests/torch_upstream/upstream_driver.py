"""PyTorch's own distributed test base, unmodified, on a backend named by --backend.

The equivalent of upstream's test/distributed/test_distributed_spawn.py (not shipped in the wheel):
`TestDistBackendWithSpawn(TestDistBackend, DistributedTest._DistTestBase)` from this torch's
`torch.testing._internal.distributed.distributed_test`, each test spawning WORLD_SIZE processes
that call `dist.init_process_group(backend=BACKEND, init_method="file://...", rank, world_size)`.
Upstream's own driver refuses any backend but gloo/nccl/ucc; this one takes any name, so a
third-party backend meets the suite's own `BACKEND` checks as they are.

    python upstream_driver.py --backend korovod --world-size 2 [--declare] [-k PATTERN]...
        [--tests FILE] [--out RESULTS.json] [--timeout 120]

--declare adds the backend to the suite's feature sets (`DistTestCases.backend_feature`: ddp,
subgroup, plugin): upstream's own knob for saying what a backend implements (the suite's test
bodies are not touched). Without it the suite sees an unknown name and skips what it gates.

The backend module is imported before the suite, in this process and (spawn start method) in
every rank's process, since a rank imports this file as its main module: `korovod` comes from
`import korovod.torch.distributed`. One JSON object per test goes to --out: name, group, outcome
(pass, skip, fail, error), reason (skip reason or the last lines of the failure) and seconds.
Exit status: 0 when it ran (whatever the outcomes; with --expect-pass: when every selected test
passed, else 1, naming those that did not), 2 on bad arguments.
"""
import argparse
import json
import os
import re
import sys
import tempfile
import time
import unittest

BACKEND_MODULES = {"korovod": "korovod.torch.distributed"}


def _early_args(argv):
    """BACKEND, WORLD_SIZE and TEMP_DIR are read when the suite is imported, so they are set from
    the command line before anything imports it. Ranks (spawned) inherit them."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", default=os.environ.get("BACKEND", "gloo"))
    p.add_argument("--world-size", type=int, default=int(os.environ.get("WORLD_SIZE", "2")))
    p.add_argument("--declare", action="store_true",
                   default=os.environ.get("KOROVOD_UPSTREAM_DECLARE") == "1")
    p.add_argument("-k", dest="patterns", action="append", default=[],
                   help="run tests whose name contains this (repeatable)")
    p.add_argument("--tests", action="append", default=[],
                   help="file with one test name per line (repeatable)")
    p.add_argument("--out", default="")
    p.add_argument("--expect-pass", action="store_true",
                   help="exit 1 unless every selected test passes (the ctest's guard)")
    p.add_argument("--timeout", type=int, default=120,
                   help="seconds per test before the suite kills its ranks")
    p.add_argument("--start", choices=("fork", "spawn"),
                   default=os.environ.get("KOROVOD_UPSTREAM_START", "fork"),
                   help="how each test starts its ranks")
    p.add_argument("--list", action="store_true", help="print the test names and exit")
    return p.parse_args(argv)


if __name__ == "__main__":
    ARGS = _early_args(sys.argv[1:])
    os.environ["BACKEND"] = ARGS.backend
    os.environ["WORLD_SIZE"] = str(ARGS.world_size)
    os.environ.setdefault("TEMP_DIR", tempfile.mkdtemp(prefix="korovod-upstream-"))
    os.environ["DISTRIBUTED_TESTS_DEFAULT_TIMEOUT"] = str(ARGS.timeout)
    os.environ["KOROVOD_UPSTREAM_DECLARE"] = "1" if ARGS.declare else "0"
    os.environ["KOROVOD_UPSTREAM_START"] = ARGS.start

_BACKEND = os.environ.get("BACKEND", "gloo")
if _BACKEND in BACKEND_MODULES:
    __import__(BACKEND_MODULES[_BACKEND])

from torch.testing._internal.common_distributed import DistTestCases  # noqa: E402
from torch.testing._internal.distributed.distributed_test import (  # noqa: E402
    DistributedTest, TestDistBackend)

if os.environ.get("KOROVOD_UPSTREAM_DECLARE") == "1":
    for _feature in ("ddp", "subgroup", "plugin"):
        DistTestCases.backend_feature[_feature].add(_BACKEND)


class TestDistBackendWithSpawn(TestDistBackend, DistributedTest._DistTestBase):
    """As upstream's test_distributed_spawn.py: every test starts its ranks, by spawn as upstream
    does, or (KOROVOD_UPSTREAM_START=fork, the default here) by fork as upstream's former
    test_distributed_fork.py did: a spawned rank imports torch again, ~10 s a test on 2 cores."""

    def setUp(self):
        super().setUp()
        if os.environ.get("KOROVOD_UPSTREAM_START", "fork") == "spawn":
            self._spawn_processes()
        else:
            import torch.multiprocessing
            self._start_processes(torch.multiprocessing.get_context("fork").Process)


# Families of tests, for the summary: first match wins.
GROUPS = [
    ("ddp", r"ddp|_DistributedDataParallel|distributed_data_parallel|sync_bn|batchnorm|join|"
            r"post_localSGD|model_averager|hierarchical_model|static_graph|grad_div|"
            r"accumulate_gradients|native_mixed_precision|SyncBatchNorm"),
    ("all_reduce", r"all_reduce|allreduce"),
    ("all_gather", r"all_gather|allgather"),
    ("all_to_all", r"all_to_all|alltoall"),
    ("reduce_scatter", r"reduce_scatter"),
    ("broadcast", r"broadcast"),
    ("reduce", r"_reduce"),
    ("gather_scatter", r"_gather|_scatter"),
    ("send_recv", r"send|recv|isend|irecv|p2p"),
    ("barrier", r"barrier|monitored"),
    ("groups", r"group|backend_full|backend_group|get_rank|get_world|destroy|new_subgroups|"
               r"subgroup"),
    ("objects", r"object"),
    ("profiler", r"profil"),
    ("other", r"."),
]


def group_of(name):
    for group, pattern in GROUPS:
        if re.search(pattern, name):
            return group
    return "other"


class _Recorder(unittest.TextTestResult):
    """unittest's result, keeping one record per test with its reason."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.records = []
        self._t0 = 0.0

    def startTest(self, test):
        self._t0 = time.monotonic()
        super().startTest(test)

    def _record(self, test, outcome, reason=""):
        name = test.id().split(".")[-1]
        self.records.append({"name": name, "group": group_of(name), "outcome": outcome,
                             "reason": reason, "seconds": round(time.monotonic() - self._t0, 2)})

    def addSuccess(self, test):
        super().addSuccess(test)
        self._record(test, "pass")

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self._record(test, "skip", str(reason))

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._record(test, "fail", _tail(self._exc_info_to_string(err, test)))

    def addError(self, test, err):
        super().addError(test, err)
        self._record(test, "error", _tail(self._exc_info_to_string(err, test)))

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self._record(test, "pass", "expected failure")

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self._record(test, "fail", "unexpected success")


def _tail(text, lines=10):
    """The exception lines a rank printed (its C++ frames are cut) and the failure's last lines."""
    kept = [ln for ln in text.strip().splitlines() if ln.strip()]
    causes = [ln.strip() for ln in kept if re.match(r"\s*[\w.]*(Error|Exception)\b", ln)]
    frames = [ln for ln in kept[-lines:] if not ln.startswith("frame #")]
    return "\n".join(causes[-3:] + frames)


def selected_names(args):
    names = unittest.TestLoader().getTestCaseNames(TestDistBackendWithSpawn)
    extra = os.environ.get("KOROVOD_UPSTREAM_EXTRA_TESTS")  # ctest: more tests on one torch
    if args.tests:
        wanted = []
        for path in args.tests + ([extra] if extra else []):
            with open(path) as f:
                wanted += [ln.split("#")[0].strip() for ln in f]
        wanted = [w for w in wanted if w]
        unknown = sorted(set(wanted) - set(names))
        if unknown:
            print("upstream_driver: not in this torch's suite: %s" % ", ".join(unknown),
                  file=sys.stderr)
            sys.exit(2)
        names = wanted
    if args.patterns:
        names = [n for n in names if any(p in n for p in args.patterns)]
    return names


def main(args):
    import torch
    names = selected_names(args)
    if args.list:
        print("\n".join(names))
        return 0
    suite = unittest.TestSuite(TestDistBackendWithSpawn(n) for n in names)
    runner = unittest.TextTestRunner(resultclass=_Recorder, verbosity=2, stream=sys.stderr)
    result = runner.run(suite)
    summary = {"torch": torch.__version__, "backend": args.backend,
               "world_size": args.world_size, "declare": args.declare,
               "tests": result.records}
    if args.out:
        with open(args.out, "w") as f:
            json.dump(summary, f, indent=1)
    counts = {}
    for r in result.records:
        counts[r["outcome"]] = counts.get(r["outcome"], 0) + 1
    print("upstream_driver: torch %s backend %s world %d declare %s: %s" % (
        torch.__version__, args.backend, args.world_size, args.declare,
        " ".join("%s %d" % kv for kv in sorted(counts.items()))))
    if args.expect_pass:
        missed = [r for r in result.records if r["outcome"] != "pass"]
        for r in missed:
            print("upstream_driver: %s %s (torch %s, backend %s):\n  %s" % (
                r["name"], r["outcome"], torch.__version__, args.backend,
                r["reason"].replace("\n", "\n  ")), file=sys.stderr)
        if missed or len(result.records) != len(names):
            print("upstream_driver: %d of %d selected tests did not pass" % (
                len(names) - counts.get("pass", 0), len(names)), file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(ARGS))
