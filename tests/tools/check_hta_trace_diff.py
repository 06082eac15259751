"""Holistic Trace Analysis's TraceDiff.compare_traces and `dlprof-report --diff --hta-compat --format json`
on the same pairs of runs must agree exactly: the same names, and for each its counts and total duration
(whole µs) on both sides. HTA's rows of each ProfilerStep#N are summed into dlprof's one row,
ProfilerStep#*.

Usage: check_hta_trace_diff.py DLPROF_REPORT TRACE_SET_DIR...

Compares each set that names ProfilerSteps with the next such set (the last with the first), HTA's
default selection (first rank, first iteration), and, for each set of several ranks, its last rank
against the next set's first (control_rank, --base-rank). Prints one line per pair and one per
disagreement; exits 1 on any, 77 (CTest's skip code) when HTA cannot be imported.
"""
import json
import logging
import os
import re
import subprocess
import sys

STEP = re.compile(r"ProfilerStep\s*#\s*\d+")


def hta_rows(table, label):
    rows = {}
    for name, row in table.iterrows():
        key = "ProfilerStep#*" if STEP.match(name) else name
        counts, total = rows.get(key, (0, 0))
        rows[key] = (counts + int(row[f"{label}_counts"]), total + int(row[f"{label}_total_duration"]))
    return {name: value for name, value in rows.items() if value[0]}


def dlprof_rows(dlprof_report, base, new, base_rank):
    command = [dlprof_report, "--hta-compat", "--format", "json", "--diff", base, new]
    if base_rank is not None:
        command += ["--base-rank", str(base_rank)]
    completed = subprocess.run(command, capture_output=True, text=True)
    if completed.returncode != 0:
        raise SystemExit(f"dlprof-report failed on {base} {new}: {completed.stderr.strip()}")
    rows = json.loads(completed.stdout)["rows"]
    control = {row["name"]: (row["control_counts"], row["control_total_duration"]) for row in rows if row["control_counts"]}
    test = {row["name"]: (row["test_counts"], row["test_total_duration"]) for row in rows if row["test_counts"]}
    return control, test


def compare(name, theirs, mine):
    failures = 0
    for key in sorted(set(theirs) | set(mine)):
        if theirs.get(key) != mine.get(key):
            failures += 1
            if failures <= 10:
                print(f"FAIL {name} {key!r}: HTA (counts, µs) {theirs.get(key)}, dlprof {mine.get(key)}")
    return failures


def main():
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        from hta.trace_diff import LabeledTrace, TraceDiff
    except ImportError as error:
        print(f"SKIP: Holistic Trace Analysis cannot be imported ({error}); scripts/test.sh installs it")
        return 77
    logging.disable(logging.WARNING)
    dlprof_report = sys.argv[1]
    runs = []
    for trace_dir in (path for path in sys.argv[2:] if os.path.isdir(path)):
        labeled = LabeledTrace(label=os.path.basename(os.path.normpath(trace_dir)), trace_dir=trace_dir)
        if labeled.iterations():
            runs.append((trace_dir, labeled))
        else:
            print(f"--   {labeled.label}: no ProfilerStep, which TraceDiff needs")
    failures = 0
    for index, (base_dir, base) in enumerate(runs):
        new_dir, new = runs[(index + 1) % len(runs)]
        for base_rank in sorted({base.ranks()[0], base.ranks()[-1]}):
            table = TraceDiff.compare_traces(base, new, control_rank=base_rank)
            # TraceDiff renames the test side when both labels are the same run's.
            test_label = [column[: -len("_counts")] for column in table.columns if column.endswith("_counts")
                          and not column.startswith("diff") and column != f"{base.label}_counts"]
            test_label = test_label[0] if test_label else base.label
            control, test = dlprof_rows(dlprof_report, base_dir, new_dir, base_rank)
            pair = f"{base.label} rank {base_rank} -> {new.label}"
            pair_failures = compare(pair + " (BASE)", hta_rows(table, base.label), control)
            pair_failures += compare(pair + " (NEW)", hta_rows(table, test_label), test)
            print(f"{'ok  ' if pair_failures == 0 else 'FAIL'} {pair}: {len(control)} and {len(test)} names")
            failures += pair_failures
    print(f"{failures} disagreement(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
