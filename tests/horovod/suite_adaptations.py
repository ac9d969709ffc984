"""Where Horovod's suite itself cannot run on a torch, the changes made to a copy of it.

The suite (../shared/horovod-tests) stays unmodified. On a torch where one of ADAPTATIONS applies
(its `when`, asked of the interpreter that runs the suite), run_torch_suite.py runs an adapted
copy of the suite's file instead, written at test time into the build tree with the changes
listed in its header; on every other torch (Debian's 1.13) the file runs as it is. An adaptation
only ever touches what keeps the suite from running on that torch, never an assertion about
Horovod's API, and its text must occur exactly `count` times: a suite that changed fails loudly
instead of running half-adapted. tests/horovod/README.md lists them too.
"""
import json
import os
import subprocess
import textwrap

ADAPTATIONS = [
    {
        "name": "muon",
        "file": "test_torch.py",
        "why": "torch >= 2.9 has torch.optim.Muon, which takes 2-D parameters only; the suite "
               "builds every optimizer of its enumeration of torch.optim.Optimizer's subclasses "
               "on models with 1-D biases, so Muon's constructor raises ValueError before any "
               "Horovod call (test_broadcast_state, test_broadcast_state_options, "
               "test_force_allreduce). Muon is left out of the three enumerations, as the "
               "suite leaves out LBFGS and SparseAdam.",
        "when": "hasattr(torch.optim, 'Muon')",
        "old": "               subclass != torch.optim.SparseAdam\n",
        "new": "               subclass != torch.optim.SparseAdam and\n"
               "               subclass.__name__ != 'Muon'  # korovod: adaptation 'muon'\n",
        "count": 3,
    },
]


def applicable(python, env, file, adaptations=ADAPTATIONS):
    """The adaptations of the suite's `file` whose `when` holds on `python`'s torch, and that
    torch's version (None when `file` has no adaptations: nothing is asked)."""
    adaptations = [a for a in adaptations if a["file"] == file]
    if not adaptations:
        return [], None
    probe = "import json, torch; print(json.dumps([torch.__version__, [%s]]))" % ", ".join(
        "bool(%s)" % a["when"] for a in adaptations)
    p = subprocess.run([python, "-c", probe], env=env, capture_output=True, text=True,
                       timeout=300)
    if p.returncode != 0:
        raise SystemExit("%s cannot import torch to choose the suite's adaptations:\n%s" % (
            python, p.stderr[-3000:]))
    version, holds = json.loads(p.stdout.strip().splitlines()[-1])
    return [a for a, h in zip(adaptations, holds) if h], version


def adapt(text, adaptations):
    """`text` with every adaptation made; ValueError naming one whose text does not occur
    exactly `count` times."""
    for a in adaptations:
        found = text.count(a["old"])
        if found != a["count"]:
            raise ValueError("adaptation %r expects its text %d times in the suite, found %d: "
                             "the suite changed; revisit tests/horovod/suite_adaptations.py" % (
                                 a["name"], a["count"], found))
        text = text.replace(a["old"], a["new"])
    return text


def header(source, version, adaptations):
    lines = ["# Adapted at test time by korovod's tests/horovod/run_torch_suite.py from",
             "# %s for torch %s; only these changes (suite_adaptations.py):" % (source, version)]
    for a in adaptations:
        lines += textwrap.wrap("%s (%d places): %s" % (a["name"], a["count"], a["why"]), 96,
                               initial_indent="#   ", subsequent_indent="#     ")
    return "\n".join(lines) + "\n"


def write_adapted(parallel_dir, file, out_dir, version, adaptations):
    """Writes the adapted copy of parallel_dir/file as out_dir/file; returns out_dir."""
    source = os.path.join(parallel_dir, file)
    with open(source) as f:
        text = adapt(f.read(), adaptations)
    os.makedirs(out_dir, exist_ok=True)
    tmp = os.path.join(out_dir, file + ".tmp")
    with open(tmp, "w") as f:
        f.write(header(source, version, adaptations) + text)
    os.replace(tmp, os.path.join(out_dir, file))
    return out_dir
