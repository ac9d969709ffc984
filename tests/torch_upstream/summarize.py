#!/usr/bin/python3
"""Tables from upstream_driver.py's result files: pass/skip/fail per group of tests for each
(torch, backend, mode), then, per torch, korovod's results that differ from gloo's, grouped by
reason. Stdlib only.

    summarize.py RESULT.json...            # markdown on stdout
"""
import collections
import re
import json
import sys

OUTCOMES = ("pass", "skip", "fail", "error")


def label(run):
    mode = " (declared)" if run["declare"] else ""
    return "torch %s, %s%s, %d ranks" % (run["torch"].split("+")[0], run["backend"], mode,
                                         run["world_size"])


def counts_table(runs):
    groups = sorted({t["group"] for r in runs for t in r["tests"]})
    out = ["| run | " + " | ".join(groups) + " | total |",
           "|---|" + "---|" * (len(groups) + 1)]
    for run in runs:
        per = collections.defaultdict(collections.Counter)
        for t in run["tests"]:
            per[t["group"]][t["outcome"]] += 1
            per["total"][t["outcome"]] += 1
        cells = ["/".join(str(per[g][o]) for o in OUTCOMES) for g in groups + ["total"]]
        out.append("| %s | %s |" % (label(run), " | ".join(cells)))
    return "\n".join(out) + "\n\nCells: pass/skip/fail/error.\n"


def first_line(reason):
    """The line that says why: a skip's text, or a failure's last exception line."""
    lines = [ln.strip() for ln in reason.splitlines() if ln.strip()]
    for ln in reversed(lines):
        if re.match(r"[\w.]*(Error|Exception)\b", ln) or ln.startswith("AssertionError"):
            return ln[:240]
    return (lines[-1] if lines else "")[:240]


def differences(runs):
    """korovod's outcomes that are not gloo's on the same torch, grouped by outcome and reason."""
    by_torch = collections.defaultdict(dict)
    for run in runs:
        by_torch[run["torch"]][(run["backend"], run["declare"])] = run
    out = []
    for torch_version, found in sorted(by_torch.items()):
        gloo = found.get(("gloo", False))
        for key, run in sorted(found.items()):
            if key[0] == "gloo" or gloo is None:
                continue
            want = {t["name"]: t for t in gloo["tests"]}
            grouped = collections.defaultdict(list)
            for t in run["tests"]:
                g = want.get(t["name"])
                if g and g["outcome"] == t["outcome"]:
                    continue
                was = g["outcome"] if g else "absent"
                grouped[(t["outcome"], was, first_line(t["reason"]))].append(t["name"])
            out.append("### %s: where it differs from gloo\n" % label(run))
            if not grouped:
                out.append("Every test's outcome is gloo's.\n")
            for (outcome, was, why), names in sorted(grouped.items(),
                                                     key=lambda kv: (-len(kv[1]), kv[0])):
                out.append("- **%s** (gloo: %s), %d: %s — `%s`" % (
                    outcome, was, len(names), why or "(no reason given)",
                    "`, `".join(sorted(names))))
            out.append("")
    return "\n".join(out)


def skip_reasons(runs):
    """Each run's skips, counted by reason (the suite's own words)."""
    out = []
    for run in runs:
        if run["backend"] == "gloo":
            continue
        reasons = collections.Counter(first_line(t["reason"]) for t in run["tests"]
                                      if t["outcome"] == "skip")
        out.append("### %s: skips by reason\n" % label(run))
        out.append("| skips | reason |\n|---:|---|")
        out.extend("| %d | %s |" % (n, why.replace("|", "/")) for why, n in reasons.most_common())
        out.append("")
    return "\n".join(out)


def main(paths):
    runs = []
    for p in paths:
        with open(p) as f:
            runs.append(json.load(f))
    runs.sort(key=lambda r: (r["torch"], r["backend"] != "gloo", r["backend"], r["declare"]))
    sys.stdout.write(counts_table(runs) + "\n" + differences(runs) + "\n" + skip_reasons(runs))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
