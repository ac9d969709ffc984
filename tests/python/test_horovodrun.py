"""horovodrun (korovod.runner.horovodrun): Horovod's flags mapped onto korovodrun's flags and the
engine's variables, checked without running a job; then real jobs through it.

Environment: KOROVOD_BUILD_DIR (default <repo>/build) holds bin/korovodrun, bin/korovod-sidecar
and python/korovod/_client*.so; PYTHON (default the running interpreter) runs the trainers.
"""
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
BUILD = os.environ.get("KOROVOD_BUILD_DIR", os.path.join(REPO, "build"))
PYTHON = os.environ.get("PYTHON", sys.executable)
sys.path.insert(0, os.path.join(REPO, "python"))

from korovod.runner import horovodrun  # noqa: E402  (after the path above)

CMD = ["python3", "train.py", "--lr", "0.1"]


def launch(*flags, environ=None, interfaces=("lo", "eth0")):
    opts, command = horovodrun.parse_args(list(flags) + CMD)
    assert command == CMD
    return horovodrun.plan(opts, command, environ=environ or {}, interfaces=list(interfaces))


def usage_error(*argv):
    with pytest.raises(horovodrun.UsageError) as e:
        opts, command = horovodrun.parse_args(list(argv))
        horovodrun.plan(opts, command, environ={}, interfaces=["lo"])
    return str(e.value)


def test_minimal_command_line():
    l = launch("-np", "4")
    assert l.args == ["-np", "4", "--"] + CMD
    assert l.env == {} and l.notes == [] and l.output_filename is None


@pytest.mark.parametrize("flags,env", [
    (["--fusion-threshold-mb", "32"], {"KOROVOD_FUSION_THRESHOLD": str(32 * 1024 * 1024)}),
    (["--fusion-threshold-mb=0"], {"KOROVOD_FUSION_THRESHOLD": "0"}),
    (["--cycle-time-ms", "2.5"], {"KOROVOD_CYCLE_TIME": "2.5"}),
    (["--cache-capacity", "0"], {"KOROVOD_CACHE_CAPACITY": "0"}),
    (["--timeline-mark-cycles"], {"KOROVOD_TIMELINE_MARK_CYCLES": "1"}),
    (["--no-timeline-mark-cycles"], {"KOROVOD_TIMELINE_MARK_CYCLES": "0"}),
    (["--autotune"], {"KOROVOD_AUTOTUNE": "1"}),
    (["--no-autotune"], {"KOROVOD_AUTOTUNE": "0"}),
    (["--hierarchical-allreduce"], {"KOROVOD_HIERARCHICAL_ALLREDUCE": "1"}),
    (["--no-hierarchical-allreduce"], {"KOROVOD_HIERARCHICAL_ALLREDUCE": "0"}),
    (["--autotune", "--autotune-log-file", "/tmp/at.csv", "--autotune-warmup-samples", "0",
      "--autotune-steps-per-sample", "5", "--autotune-bayes-opt-max-samples", "12"],
     {"KOROVOD_AUTOTUNE": "1", "KOROVOD_AUTOTUNE_LOG": "/tmp/at.csv",
      "KOROVOD_AUTOTUNE_WARMUP_SAMPLES": "0", "KOROVOD_AUTOTUNE_CYCLES_PER_SAMPLE": "5",
      "KOROVOD_AUTOTUNE_MAX_TRIALS": "12"}),
    (["--no-stall-check"], {"KOROVOD_STALL_CHECK_TIME_SECONDS": "0"}),
    (["--stall-check-warning-time-seconds", "30", "--stall-check-shutdown-time-seconds", "90"],
     {"KOROVOD_STALL_CHECK_TIME_SECONDS": "30", "KOROVOD_STALL_SHUTDOWN_TIME_SECONDS": "90"}),
])
def test_engine_flags_become_engine_variables(flags, env):
    l = launch("-np", "2", *flags)
    assert l.env == env
    assert l.args == ["-np", "2", "--"] + CMD


def test_every_engine_variable_set_is_documented():
    """What horovodrun sets must be variables the engine or the sidecar reads."""
    doc = open(os.path.join(REPO, "docs", "configuration.md"), encoding="utf-8").read()
    l = launch("-np", "2", "--fusion-threshold-mb", "1", "--cycle-time-ms", "1",
               "--cache-capacity", "1", "--timeline-mark-cycles", "--autotune",
               "--autotune-log-file", "a", "--autotune-warmup-samples", "1",
               "--autotune-steps-per-sample", "1", "--autotune-bayes-opt-max-samples", "1",
               "--stall-check-warning-time-seconds", "1",
               "--stall-check-shutdown-time-seconds", "2", "--start-timeout", "5",
               "--log-level", "DEBUG")
    assert len(l.env) == 13
    for name in l.env:
        assert "| `%s` |" % name in doc, name


def test_korovodrun_flags():
    l = launch("-np", "4", "-H", "localhost:2,127.0.0.2:2", "--timeline-filename", "tl.json",
               "--verbose", "--start-timeout", "45")
    assert l.args == ["-np", "4", "-H", "localhost:2,127.0.0.2:2", "--start-timeout", "45",
                      "--timeline", "tl.json", "--verbose", "--"] + CMD
    assert l.env == {"KOROVOD_START_TIMEOUT_SECONDS": "45"}
    assert launch("--num-proc=3", "--hosts=localhost:3").args[:4] == ["-np", "3", "-H",
                                                                      "localhost:3"]
    assert launch("-np=3", "-H=localhost:3").args[:4] == ["-np", "3", "-H", "localhost:3"]


def test_start_timeout_defaults_to_horovods_variable():
    l = launch("-np", "2", environ={"HOROVOD_START_TIMEOUT": "90"})
    assert l.args[:4] == ["-np", "2", "--start-timeout", "90"]
    assert l.env == {"KOROVOD_START_TIMEOUT_SECONDS": "90"}
    # the flag wins over the variable
    l = launch("-np", "2", "--start-timeout", "7.5", environ={"HOROVOD_START_TIMEOUT": "90"})
    assert l.env == {"KOROVOD_START_TIMEOUT_SECONDS": "7.5"}


@pytest.mark.parametrize("level,korovod_level,verbose", [
    ("TRACE", "trace", True), ("debug", "debug", True), ("INFO", "info", True),
    ("WARNING", "warning", False), ("ERROR", "error", False), ("fatal", "error", False)])
def test_log_level(level, korovod_level, verbose):
    l = launch("-np", "2", "--log-level", level)
    assert l.env == {"KOROVOD_LOG_LEVEL": korovod_level}
    # korovodrun shows a sidecar's lines below warnings only with --verbose
    assert ("--verbose" in l.args) == verbose


def test_hostfile(tmp_path):
    hostfile = tmp_path / "hosts"
    hostfile.write_text("# the machine under two names\nlocalhost slots=2\n\n127.0.0.2 slots = 3\n")
    assert launch("-np", "5", "--hostfile", str(hostfile)).args[:4] == [
        "-np", "5", "-H", "localhost:2,127.0.0.2:3"]
    hostfile.write_text("localhost 2\n")
    assert "line 1: expected 'hostname slots=N'" in usage_error(
        "-np", "2", "-hostfile", str(hostfile), "x")
    assert "No such file" in usage_error("-np", "2", "--hostfile", str(tmp_path / "none"), "x")
    assert "exclude each other" in usage_error(
        "-np", "2", "-H", "localhost:2", "--hostfile", str(hostfile), "x")


def test_accepted_flags_without_an_effect_say_so():
    l = launch("-np", "2", "--network-interface", "eth0", "--network-interfaces", "lo,eth0",
               "--autotune-gaussian-process-noise", "0.8", "--gloo")
    assert l.env == {} and l.args == ["-np", "2", "--"] + CMD
    assert any("--network-interface eth0,lo is not used" in n for n in l.notes), l.notes
    assert any("--autotune-gaussian-process-noise 0.8 is not used" in n for n in l.notes)
    assert launch("-np", "2", "--mpi").notes == []
    assert any("--mpi" in n for n in launch("-np", "2", "--mpi", "--verbose").notes)
    err = usage_error("-np", "2", "--network-interface", "ib0", "x")
    assert "no interface ib0 on this machine (it has lo)" in err


def test_elastic_flags_pass_to_korovodrun():
    l = launch("--min-np", "2", "--max-np", "4", "--host-discovery-script", "./hosts.sh",
               "--slots-per-host", "2", "--elastic-timeout", "30", "--reset-limit", "3",
               "--blacklist-cooldown-range", "5", "60")
    assert l.args == ["--min-np", "2", "--max-np", "4", "--host-discovery-script", "./hosts.sh",
                      "--slots-per-host", "2", "--reset-limit", "3", "--elastic-timeout", "30",
                      "--blacklist-cooldown-range", "5", "60", "--"] + CMD
    assert launch("-np", "3", "--min-np", "2").args == ["-np", "3", "--min-np", "2", "--"] + CMD


def test_output_filename():
    assert launch("-np", "2", "--output-filename", "/tmp/out").output_filename == "/tmp/out"


@pytest.mark.parametrize("argv,message", [
    (["--tcp", "-np", "2", "x"], "--tcp is not supported"),
    (["-np", "2", "--ssh-port", "22", "x"], "--ssh-port is not supported: korovodrun uses no SSH"),
    (["-np", "2", "--reset-limit", "1", "x"], "--reset-limit applies to elastic jobs only"),
    (["--host-discovery-script", "d.sh", "x"], "-np N is required (or --min-np N)"),
    (["--min-np", "2", "--blacklist-cooldown-range", "5"], "needs two numbers of seconds"),
    (["--min-np", "2", "--blacklist-cooldown-range", "5", "x"], "needs a number, got 'x'"),
    (["--min-np", "2", "--blacklist-cooldown-range", "5", "1", "x"], "HI (1) is below LO (5)"),
    (["--min-np", "2", "--output-filename", "o", "x"], "not supported for elastic jobs"),
    (["-np", "2", "--hierarchical-allgather", "x"], "--hierarchical-allgather is not supported"),
    (["-np", "2", "--mpi-args=--bind-to none", "x"], "--mpi-args is not supported"),
    (["-np", "2", "--fusion-treshold-mb", "1", "x"], "unknown flag --fusion-treshold-mb"),
    (["-np", "2", "-x", "x"], "unknown flag -x"),
    (["python3", "x"], "-np N is required"),
    (["-np", "2"], "no command to run"),
    (["-np", "0", "x"], "-np must be at least 1, got 0"),
    (["-np", "two", "x"], "-np needs a whole number, got 'two'"),
    (["-np", "2", "--cycle-time-ms", "0", "x"], "--cycle-time-ms must be above 0"),
    (["-np", "2", "--fusion-threshold-mb", "-1", "x"], "--fusion-threshold-mb must be at least 0"),
    (["-np", "2", "--autotune-gaussian-process-noise", "2", "x"], "at most 1"),
    (["-np", "2", "--log-level", "LOUD", "x"], "--log-level must be one of TRACE"),
    (["-np", "2", "--verbose=1", "x"], "--verbose takes no value"),
    (["-np", "2", "--gloo", "--mpi", "x"], "--gloo and --mpi exclude each other"),
    (["-np", "2", "--no-stall-check", "--stall-check-warning-time-seconds", "5", "x"],
     "--no-stall-check contradicts --stall-check-warning-time-seconds"),
    (["-np", "2", "--timeline-filename"], "--timeline-filename needs a value"),
])
def test_usage_errors_name_the_flag(argv, message):
    assert message in usage_error(*argv)


def test_command_after_double_dash_and_flags_after_the_command():
    opts, command = horovodrun.parse_args(["-np", "2", "--", "-weird", "--verbose"])
    assert command == ["-weird", "--verbose"] and "verbose" not in opts
    opts, command = horovodrun.parse_args(["-np", "2", "python3", "t.py", "--verbose"])
    assert command == ["python3", "t.py", "--verbose"] and "verbose" not in opts


def test_horovods_own_entry_point_is_the_same_launcher(capsys, monkeypatch):
    from horovod.runner import launch as horovod_launch
    monkeypatch.setattr(sys, "argv", ["horovodrun", "-np", "2", "--tcp", "x"])
    with pytest.raises(SystemExit) as e:
        horovod_launch.run_commandline()
    assert e.value.code == 2
    assert "horovodrun: --tcp is not supported" in capsys.readouterr().err


# ---- real runs: horovodrun -> korovodrun from the build tree --------------------------------

ALLREDUCE = """
import torch
import horovod.torch as hvd
hvd.init()
total = hvd.allreduce(torch.tensor([float(hvd.rank() + 1)]), op=hvd.Sum).item()
assert total == hvd.size() * (hvd.size() + 1) / 2, total
print("rank %d of %d sum %g" % (hvd.rank(), hvd.size(), total))
"""


def horovodrun_process(*argv, timeout=300):
    env = dict(os.environ)
    # korovodrun on PATH (as a pip install puts it next to horovodrun), the package from the
    # source and build trees.
    env["PATH"] = os.path.join(BUILD, "bin") + os.pathsep + env.get("PATH", "")
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(REPO, "python"),
                                         os.path.join(BUILD, "python")])
    env.setdefault("OMP_NUM_THREADS", "1")
    return subprocess.run([PYTHON, "-m", "korovod.runner.horovodrun"] + list(argv), env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_two_rank_allreduce_through_horovodrun(tmp_path):
    p = horovodrun_process("-np", "2", "--fusion-threshold-mb", "8", "--cycle-time-ms", "2",
                           "--no-stall-check", "--gloo", "--output-filename", str(tmp_path / "out"),
                           PYTHON, "-c", ALLREDUCE)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "[0] rank 0 of 2 sum 3" in p.stdout and "[1] rank 1 of 2 sum 3" in p.stdout, p.stdout
    # --output-filename: each rank's own lines, without korovodrun's prefix
    for r in range(2):
        assert (tmp_path / "out" / ("rank.%d" % r) / "stdout").read_text() == \
            "rank %d of 2 sum 3\n" % r
        assert (tmp_path / "out" / ("rank.%d" % r) / "stderr").exists()


def test_engine_variable_reaches_the_engine():
    """A bad value would only be caught by the engine: it proves the variable got there."""
    p = horovodrun_process("-np", "2", "--cache-capacity", "2000000", PYTHON, "-c", ALLREDUCE,
                           timeout=120)
    assert p.returncode != 0, p.stdout + p.stderr
    assert "KOROVOD_CACHE_CAPACITY" in p.stderr, p.stderr


def test_another_host_is_a_clear_error():
    p = horovodrun_process("-np", "2", "-H", "localhost:1,trainer-7.example.com:1", PYTHON, "-c",
                           "pass", timeout=60)
    assert p.returncode == 2, p.stdout + p.stderr
    assert "trainer-7.example.com is not local" in p.stderr, p.stderr


@pytest.mark.parametrize("tee", [False, True])
def test_trainer_exit_code_comes_back(tmp_path, tee):
    """horovodrun execs korovodrun, or with --output-filename waits for it: same exit code."""
    flags = ["--output-filename", str(tmp_path / "out")] if tee else []
    p = horovodrun_process("-np", "2", *flags, PYTHON, "-c", "raise SystemExit(3)")
    assert p.returncode == 3, p.stdout + p.stderr
