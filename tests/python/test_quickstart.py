"""The README's main job and docs/quickstart.md's local job, as written, from the build tree.

The commands are read from the documents (the first `korovodrun` line of each), so a document
that changes its command changes the test. They run with the build's korovodrun and Python
packages in place of the installed ones (`pip install .` is tested by test_pip_install.py).

A clean run logs clean: no WARNING or ERROR line from any sidecar or korovodrun; an orderly end
that a sidecar reports is INFO (an ERROR means something a user must act on).
"""
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
BUILD = os.environ.get("KOROVOD_BUILD_DIR", os.path.join(REPO, "build"))
KOROVODRUN = os.path.join(BUILD, "bin", "korovodrun")
LOG_LINE = re.compile(r"^\[sidecar (\d+)\] \S+Z (TRACE|DEBUG|INFO|WARNING|ERROR) ", re.M)


def documented_command(doc):
    """The first `korovodrun ...` command of a document, as a list of words."""
    text = open(os.path.join(REPO, doc)).read()
    for block in re.findall(r"```[a-z]*\n(.*?)```", text, re.S):
        for line in block.splitlines():
            m = re.search(r"(?:^|&& )(korovodrun [^&]+)$", line.strip())
            if m:
                return m.group(1).split()
    raise AssertionError("no korovodrun command in " + doc)


def run_documented(doc, tmp_path):
    argv = documented_command(doc)
    assert argv[0] == "korovodrun"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(REPO, "python"),
                                         os.path.join(BUILD, "python")])
    env.setdefault("OMP_NUM_THREADS", "1")
    # The checkpoint the example writes by default (/tmp/korovod-digits.pt) is left to users;
    # the test writes its own.
    cmd = [KOROVODRUN] + argv[1:] + ["--checkpoint", str(tmp_path / "digits.pt")]
    p = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    out = p.stdout + p.stderr
    assert p.returncode == 0, "%s: exit %d\n%s" % (" ".join(cmd), p.returncode, out[-6000:])
    return argv, out


def assert_trained(out, np_):
    epochs = re.findall(r"^\[0\] epoch +(\d+) +loss [0-9.]+ +test accuracy ([0-9.]+)% +"
                        r"[0-9,]+ samples/s$", out, re.M)
    assert len(epochs) == 15, out
    assert float(epochs[-1][1]) > 90.0, epochs
    assert "checkpoint written to" in out and "(rank 0 only)" in out, out
    # Each sidecar's one summary line: rank, interface, address, transport and the link rates.
    for r in range(np_):
        assert re.search(r"^\[sidecar %d\] \S+ INFO \[rank %d\] world: korovod: rank %d/%d host "
                         r"\S+ iface \S+ addr \S+ transport shm: next rank " % (r, r, r, np_),
                         out, re.M), out


def assert_clean_log(out):
    loud = [line for line in out.splitlines()
            if re.match(r"^\[sidecar \d+\] \S+Z (WARNING|ERROR) ", line)
            or re.match(r"^\S*korovodrun\S*:? .*\b(WARNING|ERROR)\b", line)]
    assert not loud, "a clean run logged:\n" + "\n".join(loud)
    # A rank whose engine saw the end before its trainer left says so at INFO (which ranks do
    # depends on timing; sidecar_daemon_test's AnotherRanksShutdownIsAnOrderlyEnd makes it happen).
    for line in re.findall(r"^\[sidecar \d+\] .*engine (?:shut down|stopped): .*$", out, re.M):
        assert " INFO " in line and "shut down by rank 0" in line, line
    # Each sidecar's end-of-run line.
    assert len(re.findall(r"INFO \[rank \d+\] engine: korovod: rank \d+ end of run: ", out)) >= 1


def test_readme_main_job(tmp_path):
    argv, out = run_documented("README.md", tmp_path)
    assert argv[1:3] == ["-np", "4"], argv
    assert_trained(out, 4)
    assert_clean_log(out)
    assert len(set(int(r) for r, _ in LOG_LINE.findall(out))) == 4, out


def test_quickstart_local_job(tmp_path):
    argv, out = run_documented("docs/quickstart.md", tmp_path)
    assert argv[1:3] == ["-np", "2"], argv
    assert_trained(out, 2)
    assert_clean_log(out)


if __name__ == "__main__":
    sys.exit(subprocess.call([sys.executable, "-m", "pytest", "-q", __file__]))
