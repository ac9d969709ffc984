"""The suite runner's reruns: only a named wall-clock test that fails is run again, and a pass on
a rerun is reported as such; every other failure counts at once."""
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run_torch_suite  # noqa: E402

BARRIER = "test_torch.py::TorchTests::test_global_barrier_op"
OTHER = "test_torch.py::TorchTests::test_horovod_allreduce"


def scripted(monkeypatch, results):
    calls = []

    def fake_attempt(args, env, parallel_dir, test_id):
        calls.append(test_id)
        r = results[len(calls) - 1]
        return r, 1.0, "attempt %d %s" % (len(calls), r)

    monkeypatch.setattr(run_torch_suite, "run_attempt", fake_attempt)
    return calls


def test_wall_clock_test_passing_on_a_rerun_says_so(monkeypatch):
    calls = scripted(monkeypatch, ["failed", "passed"])
    test_id, result, secs, output, attempts = run_torch_suite.run_one(None, {}, ".", BARRIER)
    assert (result, attempts, len(calls)) == ("passed", 2, 2)
    assert output == "attempt 1 failed"  # the first failure is what gets printed
    assert secs == 2.0


def test_wall_clock_test_failing_every_attempt_fails(monkeypatch):
    calls = scripted(monkeypatch, ["failed"] * 5)
    _, result, _, _, attempts = run_torch_suite.run_one(None, {}, ".", BARRIER)
    assert (result, attempts, len(calls)) == ("failed", run_torch_suite.RERUNS + 1,
                                              run_torch_suite.RERUNS + 1)


@pytest.mark.parametrize("first", ["failed", "hung"])
def test_other_tests_are_never_rerun(monkeypatch, first):
    calls = scripted(monkeypatch, [first, "passed"])
    _, result, _, _, attempts = run_torch_suite.run_one(None, {}, ".", OTHER)
    assert (result, attempts, len(calls)) == (first, 1, 1)


def test_a_hung_wall_clock_test_is_not_rerun(monkeypatch):
    calls = scripted(monkeypatch, ["hung", "passed"])
    _, result, _, _, attempts = run_torch_suite.run_one(None, {}, ".", BARRIER)
    assert (result, attempts, len(calls)) == ("hung", 1, 1)
