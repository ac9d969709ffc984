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


A = "test_torch.py::TorchTests::test_a"
B = "test_torch.py::TorchTests::test_b"
C = "test_torch.py::TorchTests::test_c"


def test_batch_outcomes_need_every_rank():
    out = "\n".join([
        "[0] %s PASSED [ 33%%]" % A, "[1] %s PASSED [ 33%%]" % A,
        "[0] %s SKIPPED (no GPU) [ 66%%]" % B, "[1] %s SKIPPED (no GPU) [ 66%%]" % B,
        "[0] %s PASSED [100%%]" % C, "[1] %s FAILED [100%%]" % C])
    assert run_torch_suite.outcomes_of_batch([A, B, C], 2, out) == {
        A: "passed", B: "skipped", C: "failed"}
    # A rank that never reported a test (it died, or the job hung before it): failed.
    assert run_torch_suite.outcomes_of_batch([A], 2, "[0] %s PASSED" % A) == {A: "failed"}


class Args:
    np = 2
    timeout = 10


def test_a_batch_runs_what_did_not_pass_alone(monkeypatch):
    calls = []

    def fake_attempt(args, env, parallel_dir, test_ids, timeout=None):
        calls.append(test_ids)
        if isinstance(test_ids, list):  # the batch: A passes, B fails on rank 1, C never reported
            return "failed", 3.0, "\n".join(["[0] %s PASSED" % A, "[1] %s PASSED" % A,
                                            "[0] %s PASSED" % B, "[1] %s FAILED" % B])
        return ("passed" if test_ids == C else "failed"), 1.0, "alone " + test_ids

    monkeypatch.setattr(run_torch_suite, "run_attempt", fake_attempt)
    done = run_torch_suite.run_batch(Args(), {}, ".", [A, B, C])
    assert calls == [[A, B, C], B, C]  # A's batch verdict stands; B and C get their own job
    assert [(d[0], d[1]) for d in done] == [(A, "passed"), (B, "failed"), (C, "passed")]
    assert done[1][3] == "alone " + B  # the failure printed is the test's own run


def test_a_hung_batch_runs_every_test_alone(monkeypatch):
    calls = []

    def fake_attempt(args, env, parallel_dir, test_ids, timeout=None):
        calls.append(test_ids)
        if isinstance(test_ids, list):
            return "hung", 30.0, "[0] %s PASSED\n[1] %s PASSED\n[hung]" % (A, A)
        return "passed", 1.0, ""

    monkeypatch.setattr(run_torch_suite, "run_attempt", fake_attempt)
    done = run_torch_suite.run_batch(Args(), {}, ".", [A, B])
    assert calls == [[A, B], A, B]
    assert [d[1] for d in done] == ["passed", "passed"]


# --- the adapted copy (suite_adaptations.py) -------------------------------------------------

import suite_adaptations  # noqa: E402

SUITE = os.environ.get("KOROVOD_HOROVOD_TESTS", os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "..", "shared",
    "horovod-tests"))
SUITE_FILE = os.path.join(SUITE, "parallel", "test_torch.py")


@pytest.mark.skipif(not os.path.isfile(SUITE_FILE), reason="Horovod's suite is not at " + SUITE)
def test_each_adaptation_matches_the_suite_exactly():
    with open(SUITE_FILE) as f:
        text = f.read()
    for a in suite_adaptations.ADAPTATIONS:
        assert text.count(a["old"]) == a["count"], a["name"]
    adapted = suite_adaptations.adapt(text, suite_adaptations.ADAPTATIONS)
    assert adapted.count("subclass.__name__ != 'Muon'") == 3
    compile(adapted, SUITE_FILE, "exec")  # still Python
    # Nothing else changed: removing the added text gives the suite back.
    for a in suite_adaptations.ADAPTATIONS:
        adapted = adapted.replace(a["new"], a["old"])
    assert adapted == text


def test_an_adaptation_whose_text_moved_fails_loudly():
    a = dict(suite_adaptations.ADAPTATIONS[0])
    with pytest.raises(ValueError, match="expects its text 3 times in the suite, found 1"):
        suite_adaptations.adapt("x\n" + a["old"], [a])


def test_adaptations_apply_only_where_their_torch_needs_them(tmp_path):
    """Asked of the interpreter itself: none on Debian's 1.13 (no Muon), 'muon' on the newest."""
    import torch
    chosen, version = suite_adaptations.applicable(sys.executable, dict(os.environ),
                                                   "test_torch.py")
    assert version == torch.__version__
    assert [a["name"] for a in chosen] == (["muon"] if hasattr(torch.optim, "Muon") else [])
    assert suite_adaptations.applicable(sys.executable, {}, "test_tensorflow.py") == ([], None)
    src = tmp_path / "suite"
    src.mkdir()
    (src / "test_torch.py").write_text("a\n" + suite_adaptations.ADAPTATIONS[0]["old"] * 3)
    out = suite_adaptations.write_adapted(str(src), "test_torch.py", str(tmp_path / "out"), "9.9",
                                          suite_adaptations.ADAPTATIONS)
    text = open(os.path.join(out, "test_torch.py")).read()
    assert text.startswith("# Adapted at test time") and "for torch 9.9" in text
    assert "#   muon (3 places): torch >= 2.9 has torch.optim.Muon" in text
